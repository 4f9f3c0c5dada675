package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Streaming results (docs/protocol.md, Streaming results), with raw-protocol
// agents and callers.

// sendChunk publishes chunk seq of a delivery, as a streaming agent does.
func sendChunk(nc *nats.Conn, m *nats.Msg, seq int, body string) {
	out := nats.NewMsg(m.Reply)
	out.Header.Set(streams.HeaderStatus, string(streams.StatusChunk))
	out.Header.Set(streams.HeaderRequestID, m.Header.Get(streams.HeaderRequestID))
	out.Header.Set(streams.HeaderSeq, strconv.Itoa(seq))
	out.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	out.Data = []byte(body)
	_ = nc.PublishMsg(out)
}

// sendFinal publishes a delivery's final result after n chunks.
func sendFinal(nc *nats.Conn, m *nats.Msg, n int, body string) {
	out := nats.NewMsg(m.Reply)
	out.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
	out.Header.Set(streams.HeaderChunks, strconv.Itoa(n))
	out.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	out.Data = []byte(body)
	_ = nc.PublishMsg(out)
}

// streamer registers a raw agent that runs script on its own goroutine
// for each delivery; CANCELs go to cancels.
func streamer(t *testing.T, st *Stack, id, capability string, script func(nc *nats.Conn, m *nats.Msg)) (deliveries *atomic.Int64, cancels chan *nats.Msg) {
	t.Helper()
	nc := st.Conn()
	deliveries, cancels = &atomic.Int64{}, make(chan *nats.Msg, 64)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	RawInstance(t, nc, id, st.Heartbeat, func(m *nats.Msg) {
		if m.Reply == "" {
			select {
			case cancels <- m:
			default:
			}
			return
		}
		deliveries.Add(1)
		_ = nc.PublishMsg(streams.StatusReply(m.Reply, streams.StatusAcked, ""))
		wg.Add(1)
		go func() {
			defer wg.Done()
			script(nc, m)
		}()
	}, capability)
	return deliveries, cancels
}

// words streams n chunks "w1 ", "w2 ", … then the whole text.
func words(n int) func(nc *nats.Conn, m *nats.Msg) {
	return func(nc *nats.Conn, m *nats.Msg) {
		var all strings.Builder
		for i := 1; i <= n; i++ {
			w := fmt.Sprintf(`"w%d "`, i)
			sendChunk(nc, m, i, w)
			all.WriteString(fmt.Sprintf("w%d ", i))
		}
		sendFinal(nc, m, n, `"`+all.String()+`"`)
	}
}

// streamCall sends one task as a raw caller, with Reach-Stream: 1 when
// stream, and returns every message it gets up to and including the
// final one (anything but a CHUNK).
func streamCall(t *testing.T, nc *nats.Conn, capability, id string, stream bool) []*nats.Msg {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req := nats.NewMsg(streams.Subjects{}.Task(capability))
	req.Reply = inbox
	req.Data = []byte(`{}`)
	req.Header.Set(streams.HeaderRequestID, id)
	if stream {
		req.Header.Set(streams.HeaderStream, "1")
	}
	if err := nc.PublishMsg(req); err != nil {
		t.Fatal(err)
	}
	var got []*nats.Msg
	for {
		m, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(got), err)
		}
		got = append(got, m)
		if m.Header.Get(streams.HeaderStatus) != string(streams.StatusChunk) {
			return got
		}
	}
}

// checkChunks checks that msgs begin with n chunks of request id, numbered
// from 1, from node.
func checkStreamChunks(t *testing.T, msgs []*nats.Msg, n int, id, node string) {
	t.Helper()
	if len(msgs) != n+1 {
		t.Fatalf("got %d messages, want %d chunks and the final one", len(msgs), n)
	}
	for i, m := range msgs[:n] {
		for k, want := range map[string]string{streams.HeaderStatus: "CHUNK", streams.HeaderSeq: strconv.Itoa(i + 1),
			streams.HeaderRequestID: id, streams.HeaderNode: node} {
			if v := m.Header.Get(k); v != want {
				t.Errorf("chunk %d: %s = %q, want %q", i+1, k, v, want)
			}
		}
		if want := fmt.Sprintf(`"w%d "`, i+1); string(m.Data) != want {
			t.Errorf("chunk %d: body %s, want %s", i+1, m.Data, want)
		}
	}
}

// recorder keeps the records a dispatcher writes (dispatcher.Observer).
type recorder struct {
	mu  sync.Mutex
	evs []events.Event
}

func (r *recorder) Observed(ev *events.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, *ev)
	r.mu.Unlock()
}

func (r *recorder) of(id string) []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.Event
	for _, ev := range r.evs {
		if ev.RequestID == id {
			out = append(out, ev)
		}
	}
	return out
}

func TestAStreamIsRelayedInOrderAndANonStreamingCallerSeesNoChange(t *testing.T) {
	st := NewStack(t, time.Second)
	rec := &recorder{}
	d := st.dispatcherOn(st.Conn(), config.Config{}, dispatcher.WithObserver(rec))
	streamer(t, st, "story-1", "story", words(20))
	WaitRoutable(t, "story", 1, d)
	nc := st.Conn()

	msgs := streamCall(t, nc, "story", "stream-1", true)
	checkStreamChunks(t, msgs, 20, "stream-1", "story-1")
	final := msgs[len(msgs)-1]
	if final.Header.Get(streams.HeaderStatus) != "FINISHED" || final.Header.Get(streams.HeaderChunks) != "20" ||
		!strings.HasPrefix(string(final.Data), `"w1 w2 `) || final.Header.Get(streams.HeaderRequestID) != "stream-1" {
		t.Errorf("final: headers %v body %s, want FINISHED with Reach-Chunks 20 and the whole text", final.Header, final.Data)
	}

	// The control: without Reach-Stream the same agent's chunks are dropped
	// and the caller gets its one result, as before streaming existed.
	msgs = streamCall(t, nc, "story", "plain-1", false)
	if len(msgs) != 1 || msgs[0].Header.Get(streams.HeaderStatus) != "FINISHED" || msgs[0].Header.Get(streams.HeaderChunks) != "" {
		t.Fatalf("a caller without %s got %d messages, the last %v", streams.HeaderStream, len(msgs), msgs[len(msgs)-1].Header)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if s := d.Stats(); s.ChunksRelayed != 20 || s.ChunksDropped != 20 {
			return fmt.Errorf("relayed %d, dropped %d; want 20 and 20", s.ChunksRelayed, s.ChunksDropped)
		}
		return nil
	})
	// One record per stream, with its chunks and time to first chunk.
	evs := rec.of("stream-1")
	if len(evs) != 1 || !evs[0].Streamed || evs[0].Chunks != 20 || evs[0].FirstChunkMS <= 0 || evs[0].FirstChunkMS > evs[0].LatencyMS {
		t.Errorf("records of the stream: %+v", evs)
	}
	if evs := rec.of("plain-1"); len(evs) != 1 || evs[0].Streamed || evs[0].Chunks != 0 {
		t.Errorf("records of the plain call: %+v", evs)
	}
}

// Only a streaming caller's delivery says Reach-Stream: an agent streams for
// nobody otherwise.
func TestADeliveryAsksForAStreamOnlyForAStreamingCaller(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	asked := make(chan string, 4)
	streamer(t, st, "story-1", "story", func(nc *nats.Conn, m *nats.Msg) {
		asked <- m.Header.Get(streams.HeaderStream)
		words(1)(nc, m)
	})
	WaitRoutable(t, "story", 1, d)
	nc := st.Conn()
	streamCall(t, nc, "story", "s-1", true)
	streamCall(t, nc, "story", "s-2", false)
	if a, b := <-asked, <-asked; a != "1" || b != "" {
		t.Errorf("deliveries said %s %q and %q, want \"1\" for the streaming caller only", streams.HeaderStream, a, b)
	}
}

// Before its first chunk a streamed task is retried like any other: an
// instance that never acknowledges is passed over.
func TestAStreamIsRetriedBeforeItsFirstChunk(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{AckTimeout: 300 * time.Millisecond})
	NeverAck(t, st.Conn(), "mute-1", st.Heartbeat, "story")
	streamer(t, st, "story-1", "story", words(3))
	WaitRoutable(t, "story", 2, d)
	nc := st.Conn()
	for i := range 6 { // least load picks either first
		id := fmt.Sprint("retry-", i)
		msgs := streamCall(t, nc, "story", id, true)
		checkStreamChunks(t, msgs, 3, id, "story-1")
		if f := msgs[3]; f.Header.Get(streams.HeaderStatus) != "FINISHED" {
			t.Fatalf("call %d: final %v", i, f.Header)
		}
	}
}

// After its first chunk a stream is pinned: an instance that falls silent
// ends the stream with the error, and no other instance gets the task.
func TestAStreamIsPinnedAfterItsFirstChunk(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{AckTimeout: 300 * time.Millisecond})
	streamer(t, st, "dies-1", "story", func(nc *nats.Conn, m *nats.Msg) {
		sendChunk(nc, m, 1, `"w1 "`)
		// then nothing: a dead agent
	})
	WaitRoutable(t, "story", 1, d)
	nc := st.Conn()
	msgs := streamCall(t, nc, "story", "pinned-1", true)
	checkStreamChunks(t, msgs, 1, "pinned-1", "dies-1")
	f := msgs[1]
	if f.Header.Get(streams.HeaderError) != string(streams.CodeTimeout) || f.Header.Get(streams.HeaderChunks) != "" {
		t.Fatalf("final of a stream whose agent died: %v %s, want TIMEOUT without %s", f.Header, f.Data, streams.HeaderChunks)
	}
}

// A pinned stream is never delivered again, though another instance could
// take it: the caller would get a second stream.
func TestAPinnedStreamIsNotRetriedElsewhere(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{AckTimeout: 300 * time.Millisecond})
	var first sync.Once
	script := func(nc *nats.Conn, m *nats.Msg) {
		dies := false
		first.Do(func() { dies = true })
		if dies {
			sendChunk(nc, m, 1, `"w1 "`)
			return
		}
		words(2)(nc, m)
	}
	d1, _ := streamer(t, st, "a-1", "story", script)
	d2, _ := streamer(t, st, "a-2", "story", script)
	WaitRoutable(t, "story", 2, d)
	nc := st.Conn()
	msgs := streamCall(t, nc, "story", "once-1", true)
	if len(msgs) != 2 || msgs[1].Header.Get(streams.HeaderError) != string(streams.CodeTimeout) {
		t.Fatalf("got %d messages, the last %v: want one chunk, then TIMEOUT", len(msgs), msgs[len(msgs)-1].Header)
	}
	if n := d1.Load() + d2.Load(); n != 1 {
		t.Errorf("%d deliveries of a pinned stream, want 1", n)
	}
	// The control: the next call, to the healthy instance, streams whole.
	msgs = streamCall(t, nc, "story", "once-2", true)
	if f := msgs[len(msgs)-1]; f.Header.Get(streams.HeaderStatus) != "FINISHED" || f.Header.Get(streams.HeaderChunks) != "2" {
		t.Errorf("a healthy stream ended %v", f.Header)
	}
}

func TestAGapInReachSeqEndsTheStreamInternal(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	streamer(t, st, "gap-1", "story", func(nc *nats.Conn, m *nats.Msg) {
		sendChunk(nc, m, 1, `"w1 "`)
		sendChunk(nc, m, 3, `"w3 "`)
		sendFinal(nc, m, 3, `"w1 w2 w3"`)
	})
	streamer(t, st, "short-1", "tail", func(nc *nats.Conn, m *nats.Msg) {
		sendChunk(nc, m, 1, `"w1 "`)
		sendFinal(nc, m, 2, `"w1 w2"`) // says 2, sent 1
	})
	WaitRoutable(t, "story", 1, d)
	WaitRoutable(t, "tail", 1, d)
	nc := st.Conn()
	for _, c := range []string{"story", "tail"} {
		msgs := streamCall(t, nc, c, "gap-"+c, true)
		checkStreamChunks(t, msgs, 1, "gap-"+c, map[string]string{"story": "gap-1", "tail": "short-1"}[c])
		if f := msgs[1]; f.Header.Get(streams.HeaderError) != string(streams.CodeInternal) || f.Header.Get(streams.HeaderChunks) != "" {
			t.Errorf("%s: final %v %s, want INTERNAL", c, f.Header, f.Data)
		}
	}
}

// A hedge's loser is cancelled once the other delivery streams, and its
// chunks are dropped; a chunk after the final is dropped too.
func TestAHedgeLosersChunksAreDropped(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{Hedges: map[string]selection.HedgeConfig{"story": {After: 30 * time.Millisecond, Budget: 1}}})
	// The slow instance streams only once it is cancelled: its chunks can
	// only arrive after the hedge has won.
	var slowID atomic.Value
	slowDeliveries, slowCancels := streamer(t, st, "slow-1", "story", func(nc *nats.Conn, m *nats.Msg) {
		slowID.Store(m.Reply)
	})
	fastDeliveries, _ := streamer(t, st, "fast-1", "story", func(nc *nats.Conn, m *nats.Msg) {
		words(3)(nc, m)
		sendChunk(nc, m, 4, `"late"`) // after the final
	})
	WaitRoutable(t, "story", 2, d)
	nc := st.Conn()
	hedged := 0
	for i := 0; i < 20 && hedged == 0; i++ {
		id := fmt.Sprint("hedge-", i)
		before := slowDeliveries.Load()
		msgs := streamCall(t, nc, "story", id, true)
		checkStreamChunks(t, msgs, 3, id, "fast-1")
		if slowDeliveries.Load() == before {
			continue
		}
		hedged++
		if msgs[3].Header.Get(streams.HeaderHedged) != "1" {
			t.Errorf("a hedged stream's final: %v", msgs[3].Header)
		}
		c := recv(t, slowCancels, "CANCEL at the hedge's loser")
		loser := &nats.Msg{Reply: c.Header.Get(streams.HeaderDelivery), Header: nats.Header{}}
		loser.Header.Set(streams.HeaderRequestID, id)
		sendChunk(nc, loser, 1, `"loser"`)
	}
	if hedged == 0 {
		t.Fatalf("no first delivery went to slow-1 in 20 calls (fast-1 got %d)", fastDeliveries.Load())
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		// each call's late chunk, and the loser's
		if s, want := d.Stats(), fastDeliveries.Load()+1; s.ChunksDropped != want {
			return fmt.Errorf("dropped %d chunks, want %d", s.ChunksDropped, want)
		}
		return nil
	})
}

// A durable task and a fan-out's branch, answered by a streaming agent,
// end with the one final result.
func TestADurableTaskAnsweredByAStreamingAgentHasOneResult(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	streamer(t, st, "story-1", "story", words(5))
	WaitRoutable(t, "story", 1, d)
	c := st.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.SubmitAndWait(ctx, "story", map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(res.Data), `"w1 w2 w3 w4 w5`) {
		t.Errorf("durable result %s, want the whole text", res.Data)
	}
	// A fan-out's branch runs in process (Call): no stream either.
	msg := nats.NewMsg("")
	msg.Data = []byte(`{}`)
	msg.Header.Set(streams.HeaderStream, "1")
	out := d.Call(ctx, "story", msg)
	if out.Header.Get(streams.HeaderStatus) != "FINISHED" || out.Header.Get(streams.HeaderChunks) != "" {
		t.Errorf("in-process call of a streaming agent: %v", out.Header)
	}
}

// A reader slower than the agent: past Config.StreamBuffer chunks waiting,
// the stream ends OVERLOADED and the agent is cancelled; the control, a
// reader that keeps up, gets every chunk.
func TestASlowReaderEndsTheStreamOverloaded(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{StreamBuffer: 4})
	_, cancels := streamer(t, st, "story-1", "story", words(50))
	WaitRoutable(t, "story", 1, d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	release := make(chan struct{})
	var got atomic.Int64
	msg := nats.NewMsg("")
	msg.Data = []byte(`{}`)
	done := make(chan *nats.Msg, 1)
	go func() {
		done <- d.Stream(ctx, "story", msg, func(*nats.Msg) {
			got.Add(1)
			select { // the reader stalls until the stream has been refused
			case <-release:
			case <-ctx.Done():
			}
		})
	}()
	recv(t, cancels, "CANCEL of the overloaded stream")
	close(release)
	final := <-done
	if final.Header.Get(streams.HeaderError) != string(streams.CodeOverloaded) {
		t.Fatalf("a stalled reader's stream ended %v %s, want OVERLOADED", final.Header, final.Data)
	}
	if s := d.Stats(); s.StreamsOverloaded != 1 {
		t.Errorf("stats count %d overloaded streams", s.StreamsOverloaded)
	}

	// The control, on a replica with the default bound (more than the
	// agent's burst of 50).
	d2 := st.Dispatcher(config.Config{})
	WaitRoutable(t, "story", 1, d2)
	var seqs []string
	msg = nats.NewMsg("")
	msg.Data = []byte(`{}`)
	final = d2.Stream(ctx, "story", msg, func(m *nats.Msg) { seqs = append(seqs, m.Header.Get(streams.HeaderSeq)) })
	if final.Header.Get(streams.HeaderChunks) != "50" || len(seqs) != 50 || seqs[49] != "50" {
		t.Errorf("a reader that keeps up: %d chunks, final %v", len(seqs), final.Header)
	}
}

// A caller that stops reading (its context ends) cancels the task at the
// agent.
func TestAStreamCancelledByItsReaderCancelsTheAgent(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	_, cancels := streamer(t, st, "story-1", "story", func(nc *nats.Conn, m *nats.Msg) {
		sendChunk(nc, m, 1, `"w1 "`) // and then it thinks
	})
	WaitRoutable(t, "story", 1, d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	msg := nats.NewMsg("")
	msg.Data = []byte(`{}`)
	final := d.Stream(sctx, "story", msg, func(*nats.Msg) { stop() })
	if final.Header.Get(streams.HeaderError) != string(streams.CodeCancelled) {
		t.Errorf("final %v", final.Header)
	}
	c := recv(t, cancels, "CANCEL at the agent")
	if c.Header.Get(streams.HeaderStatus) != "CANCEL" {
		t.Errorf("cancel %v", c.Header)
	}
}
