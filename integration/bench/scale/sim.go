package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

const (
	simConns = 4
	simTick  = 10 * time.Millisecond
)

// sim heartbeats simulated agents: each is a pre-encoded record put every
// interval by one of the workers, each worker on its own connection with a
// timing wheel of 10 ms slots.
type sim struct {
	interval time.Duration
	slots    int
	start    time.Time
	workers  []*simWorker

	beats, errs atomic.Int64
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	once        sync.Once
}

type simWorker struct {
	kv    jetstream.KeyValue
	mu    sync.Mutex
	wheel [][]simAgent
}

type simAgent struct {
	id  string
	rec []byte
}

func newSim(e *harness.Env, interval time.Duration) (*sim, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sim{interval: interval, slots: int(interval / simTick), start: time.Now(), cancel: cancel}
	for i := range simConns {
		js, _, err := e.JS(fmt.Sprintf("sim-%d", i))
		if err != nil {
			s.Stop()
			return nil, err
		}
		kv, err := js.KeyValue(ctx, streams.BucketAgents)
		if err != nil {
			s.Stop()
			return nil, err
		}
		sw := &simWorker{kv: kv, wheel: make([][]simAgent, s.slots)}
		s.workers = append(s.workers, sw)
		s.wg.Add(1)
		go s.loop(ctx, sw)
	}
	return s, nil
}

func (s *sim) tickAt(t time.Time) int { return int(t.Sub(s.start) / simTick) }

func (s *sim) loop(ctx context.Context, w *simWorker) {
	defer s.wg.Done()
	t := time.NewTicker(simTick)
	defer t.Stop()
	next := s.tickAt(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for now := s.tickAt(time.Now()); next <= now && ctx.Err() == nil; next++ {
			w.mu.Lock()
			due := w.wheel[next%s.slots]
			w.mu.Unlock()
			for _, a := range due {
				if s.put(ctx, w, a) != nil && ctx.Err() == nil {
					s.errs.Add(1)
				}
			}
		}
	}
}

func (s *sim) put(ctx context.Context, w *simWorker, a simAgent) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := w.kv.Put(pctx, a.id, a.rec)
	if err == nil {
		s.beats.Add(1)
	}
	return err
}

// join adds agents [from, to) at an even pace over d, each registered with
// the watcher just before its first put, then heartbeating one interval
// after it.
func (s *sim) join(r *harness.Run, jw *joinWatcher, from, to int, d time.Duration) error {
	n := to - from
	begin := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, simConns)
	for g := range simConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := from + g; k < to; k += simConns {
				if err := r.Sleep(time.Until(begin.Add(d * time.Duration(k-from) / time.Duration(n)))); err != nil {
					errc <- err
					return
				}
				a, err := simRecord(k, s.interval)
				if err != nil {
					errc <- err
					return
				}
				jw.expect(a.id, time.Now())
				s.enroll(r.Ctx, k, a)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// enroll puts agent k's record now, on worker k's connection, and
// heartbeats it every interval from then on.
func (s *sim) enroll(ctx context.Context, k int, a simAgent) {
	w := s.workers[k%simConns]
	if err := s.put(ctx, w, a); err != nil {
		s.errs.Add(1)
	}
	w.mu.Lock()
	slot := s.tickAt(time.Now()) % s.slots
	w.wheel[slot] = append(w.wheel[slot], a)
	w.mu.Unlock()
}

// enrollAll enrolls every agent as fast as the workers' connections take
// the puts, and says how many puts failed.
func (s *sim) enrollAll(ctx context.Context, agents []simAgent) error {
	errs0 := s.errs.Load()
	var wg sync.WaitGroup
	for g := range simConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := g; k < len(agents) && ctx.Err() == nil; k += simConns {
				s.enroll(ctx, k, agents[k])
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := s.errs.Load() - errs0; n > 0 {
		return fmt.Errorf("simulated agents: %d of %d records could not be put", n, len(agents))
	}
	return nil
}

func simRecord(k int, hb time.Duration) (simAgent, error) {
	return simRecordOf(registry.Record{ID: fmt.Sprintf("sim-%05d", k), Type: "sim", Capabilities: []string{simCapability},
		MaxConcurrent: 4, HeartbeatMS: hb.Milliseconds()})
}

// simRecordOf completes rec (weight, status and version when unset),
// validates it and encodes it for a simulated agent.
func simRecordOf(rec registry.Record) (simAgent, error) {
	rec.Normalize()
	if rec.Version == "" {
		rec.Version = "1.0.0"
	}
	if err := rec.Validate(); err != nil {
		return simAgent{}, err
	}
	b, err := json.Marshal(rec)
	return simAgent{id: rec.ID, rec: b}, err
}

// Stop ends the heartbeats and waits for the workers; calling it again does
// nothing.
func (s *sim) Stop() {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
}

// joinWatcher times agents from their first put until a routing table holds
// them, checking its pending agents whenever the table changes.
type joinWatcher struct {
	tbl *registry.Table

	mu      sync.Mutex
	pending map[string]time.Time
	hist    *hdrhistogram.Histogram

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func newJoinWatcher(tbl *registry.Table) *joinWatcher {
	w := &joinWatcher{tbl: tbl, pending: make(map[string]time.Time), hist: harness.NewHist(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *joinWatcher) expect(id string, t time.Time) {
	w.mu.Lock()
	w.pending[id] = t
	w.mu.Unlock()
}

func (w *joinWatcher) run() {
	defer close(w.done)
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	for {
		changed := w.tbl.Changed()
		w.scan()
		t.Reset(2 * time.Millisecond)
		select {
		case <-w.stop:
			return
		case <-changed:
		case <-t.C:
		}
	}
}

func (w *joinWatcher) scan() {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, t0 := range w.pending {
		if _, ok := w.tbl.Lookup(id); ok {
			_ = w.hist.RecordValue(max(now.Sub(t0).Microseconds(), 1))
			delete(w.pending, id)
		}
	}
}

func (w *joinWatcher) pendingCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// take returns the join times recorded so far and starts a new histogram;
// agents still pending are dropped.
func (w *joinWatcher) take() *hdrhistogram.Histogram {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.hist
	w.hist = harness.NewHist()
	clear(w.pending)
	return h
}

func (w *joinWatcher) Close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
	})
}
