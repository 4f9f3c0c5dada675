package agenttest

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// recordLog is every change of the agent's key in REACH_AGENTS, followed
// from before the agent starts: puts, deletes, purges and expiries, with the
// server's timestamps.
type recordLog struct {
	mu      sync.Mutex
	entries []recordEntry
	changed chan struct{} // closed and replaced on every entry

	quit chan struct{}
	done chan struct{}
}

// recordEntry is one change of the key.
type recordEntry struct {
	op    jetstream.KeyValueOp // a delete is KeyValueDelete; a purge or an expiry KeyValuePurge
	value []byte
	at    time.Time // the server's timestamp
	// subscribed, on the first put, reports whether the agent's delivery
	// subject had a subscriber when the suite saw the put.
	subscribed bool
}

// follow starts following the agent's key.
func (s *suite) follow(ctx context.Context) (*recordLog, error) {
	w, err := s.agents.Watch(context.WithoutCancel(ctx), s.env.AgentID)
	if err != nil {
		return nil, err
	}
	l := &recordLog{changed: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	subject := s.env.Subjects.Agent(s.env.AgentID)
	go func() {
		defer close(l.done)
		defer func() { _ = w.Stop() }()
		firstPut := true
		for {
			select {
			case <-l.quit:
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // the end of the (empty) initial values
				}
				re := recordEntry{op: e.Operation(), value: e.Value(), at: e.Created()}
				if re.op == jetstream.KeyValuePut && firstPut {
					re.subscribed, firstPut = subscribers(s.srv, subject) > 0, false
				}
				l.add(re)
			}
		}
	}()
	return l, nil
}

// subscribers counts the server's subscriptions that a message on subject
// would reach.
func subscribers(srv *server.Server, subject string) int {
	sz, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: subject})
	if err != nil {
		return 0
	}
	return sz.Total
}

func (l *recordLog) add(e recordEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	close(l.changed)
	l.changed = make(chan struct{})
}

// snapshot returns the entries so far.
func (l *recordLog) snapshot() []recordEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]recordEntry(nil), l.entries...)
}

// await waits until cond holds for the entries so far, deadline passes, ctx
// ends or gone closes (nil: never), and returns the entries and whether
// cond held.
func (l *recordLog) await(ctx context.Context, deadline time.Time, gone <-chan struct{}, cond func([]recordEntry) bool) ([]recordEntry, bool) {
	for {
		l.mu.Lock()
		es, changed := append([]recordEntry(nil), l.entries...), l.changed
		l.mu.Unlock()
		if cond(es) {
			return es, true
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
			t.Stop()
			continue
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-gone:
			t.Stop()
		}
		return es, false
	}
}

// stop ends the watch and waits for it.
func (l *recordLog) stop() {
	close(l.quit)
	<-l.done
}
