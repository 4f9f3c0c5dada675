package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// sseEvent is one Server-Sent Event as a client reads it.
type sseEvent struct{ event, id, data string }

// readEvents reads events from body until it ends, or until stop says so.
func readEvents(t *testing.T, body io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	var data []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			cur.data = strings.Join(data, "\n")
			out = append(out, cur)
			if stop != nil && stop(cur) {
				return out
			}
			cur, data = sseEvent{}, nil
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	return out
}

// streamingAgent serves "words" (streams n words, returns them joined) and
// "hang" (one chunk, then waits for its cancel, which it reports).
func streamingAgent(t *testing.T, tg *testGateway) (cancelled chan struct{}) {
	t.Helper()
	nc, err := nats.Connect(tg.g.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a, err := agentkit.New(nc, agentkit.Config{Type: "teller", ID: "teller-1"}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	cancelled = make(chan struct{}, 1)
	_ = a.Handle("words", agentkit.Typed(func(ctx context.Context, r *agentkit.Request, n int) (string, error) {
		var all []string
		for i := 1; i <= n; i++ {
			w := fmt.Sprintf("w%d", i)
			if err := r.Send(ctx, w); err != nil {
				return "", err
			}
			all = append(all, w)
		}
		return strings.Join(all, " "), nil
	}))
	_ = a.Handle("hang", func(ctx context.Context, r *agentkit.Request) (any, error) {
		if err := r.Send(ctx, "first"); err != nil {
			return nil, err
		}
		<-ctx.Done()
		cancelled <- struct{}{}
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Drain(context.Background()) })
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(tg.d.Routable("words")); n != 1 {
			return fmt.Errorf("words has %d routable instances", n)
		}
		return nil
	})
	return cancelled
}

func TestServerSentEventsStreamAResult(t *testing.T) {
	tg := startGateway(t, Config{})
	streamingAgent(t, tg)
	for _, c := range []struct{ path, accept string }{
		{"/v1/stream/words", ""},
		{"/v1/call/words", "application/json, text/event-stream"},
	} {
		req, _ := http.NewRequest(http.MethodPost, tg.base+c.path, strings.NewReader("4"))
		if c.accept != "" {
			req.Header.Set("Accept", c.accept)
		}
		res, err := tg.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		evs := readEvents(t, res.Body, nil)
		res.Body.Close()
		if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "text/event-stream" || res.Header.Get("Reach-Request-Id") == "" {
			t.Fatalf("%s: %d %s %v", c.path, res.StatusCode, ct, res.Header)
		}
		want := []sseEvent{{"chunk", "1", `"w1"`}, {"chunk", "2", `"w2"`}, {"chunk", "3", `"w3"`}, {"chunk", "4", `"w4"`}, {"result", "4", `"w1 w2 w3 w4"`}}
		if fmt.Sprint(evs) != fmt.Sprint(want) {
			t.Errorf("%s: events %v, want %v", c.path, evs, want)
		}
	}
	// The control: a plain call answers the whole result as its body.
	r := tg.do(t, http.MethodPost, "/v1/call/words", "2")
	if r.status != 200 || string(r.body) != `"w1 w2"` {
		t.Errorf("plain call: %d %s", r.status, r.body)
	}
	// An error before anything streams is an error event.
	req, _ := http.NewRequest(http.MethodPost, tg.base+"/v1/stream/nothing.here", strings.NewReader("{}"))
	res, err := tg.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, res.Body, nil)
	res.Body.Close()
	if len(evs) != 1 || evs[0].event != "error" || !strings.Contains(evs[0].data, `"NO_AGENT"`) {
		t.Errorf("a stream of nothing: %v", evs)
	}
}

// A client that goes away cancels the task: its agent gets the CANCEL.
func TestAnSSEClientThatLeavesCancelsTheTask(t *testing.T) {
	tg := startGateway(t, Config{})
	cancelled := streamingAgent(t, tg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rctx, leave := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, tg.base+"/v1/stream/hang", strings.NewReader("{}"))
	res, err := tg.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, res.Body, func(sseEvent) bool { return true })
	if len(evs) != 1 || evs[0].event != "chunk" || evs[0].data != `"first"` {
		t.Fatalf("first event %v", evs)
	}
	leave() // the client goes away mid-stream
	res.Body.Close()
	select {
	case <-cancelled:
	case <-ctx.Done():
		t.Fatal("the agent was not cancelled after its HTTP client left")
	}
}
