package a2a_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/gateway/a2a"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// teller adds an agent of type "teller" to st: teller.words streams n
// words and returns them joined, teller.flop streams one word then
// rejects, teller.hang streams one word then waits for its cancel, which
// it reports.
func (st *stack) teller(t *testing.T) (cancelled chan struct{}) {
	t.Helper()
	nc, err := nats.Connect(st.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a, err := agentkit.New(nc, agentkit.Config{Type: "teller", ID: "teller-1"}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	cancelled = make(chan struct{}, 1)
	_ = a.Handle("teller.words", agentkit.Typed(func(ctx context.Context, r *agentkit.Request, n int) (string, error) {
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
	_ = a.Handle("teller.flop", func(ctx context.Context, r *agentkit.Request) (any, error) {
		if err := r.Send(ctx, "once"); err != nil {
			return nil, err
		}
		return nil, agentkit.Reject("the end is missing")
	})
	_ = a.Handle("teller.hang", func(ctx context.Context, r *agentkit.Request) (any, error) {
		if err := r.Send(ctx, "first"); err != nil {
			return nil, err
		}
		<-ctx.Done()
		cancelled <- struct{}{}
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Drain(context.Background()) })
	natstest.WaitFor(t, 20*time.Second, func() error {
		if n := len(st.d.Routable("teller.hang")); n != 1 {
			return fmt.Errorf("teller has %d routable instances", n)
		}
		return nil
	})
	return cancelled
}

// streamEvent is one event of a SendStreamingMessage answer.
type streamEvent struct {
	JSONRPC string             `json:"jsonrpc"`
	ID      json.RawMessage    `json:"id"`
	Result  a2a.StreamResponse `json:"result"`
	Error   *a2a.RPCError      `json:"error"`
}

// openStream sends a SendStreamingMessage of payload to skill and returns
// the response, its events read one by one by next.
func (st *stack) openStream(t *testing.T, skill string, payload any) (*http.Response, func() (streamEvent, error)) {
	t.Helper()
	p := message(map[string]any{"data": payload})
	p["metadata"] = map[string]any{"skill": skill}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "s1", "method": a2a.MethodSendStreamingMessage, "params": p})
	req, _ := http.NewRequest(http.MethodPost, st.base+"/a2a/teller", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(a2a.HeaderVersion, a2a.ProtocolVersion)
	res, err := st.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("stream: %d %v %s", res.StatusCode, res.Header, b)
	}
	rd := bufio.NewReader(res.Body)
	return res, func() (streamEvent, error) {
		var ev streamEvent
		line, err := rd.ReadString('\n')
		if err != nil {
			return ev, err
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if blank, err := rd.ReadString('\n'); !ok || err != nil || blank != "\n" {
			return ev, fmt.Errorf("not an event: %q then %q (%v)", line, blank, err)
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return ev, fmt.Errorf("event %q: %v", data, err)
		}
		if ev.JSONRPC != "2.0" || string(ev.ID) != `"s1"` {
			return ev, fmt.Errorf("event %q: not the response to s1", data)
		}
		return ev, nil
	}
}

func TestSendStreamingMessageStreamsArtifactUpdates(t *testing.T) {
	st := startStack(t)
	st.teller(t)
	_, next := st.openStream(t, "teller.words", 3)
	var taskID, contextID string
	for i := 1; i <= 4; i++ {
		ev, err := next()
		if err != nil {
			t.Fatal(err)
		}
		u := ev.Result.ArtifactUpdate
		if u == nil || ev.Result.Task != nil || u.Artifact.ArtifactID != "result" || len(u.Artifact.Parts) != 1 {
			t.Fatalf("event %d: %+v", i, ev.Result)
		}
		if i == 1 {
			taskID, contextID = u.TaskID, u.ContextID
		}
		if u.TaskID != taskID || u.ContextID != contextID || taskID == "" || contextID == "" {
			t.Fatalf("event %d is of task %q (context %q), the first of %q (%q)", i, u.TaskID, u.ContextID, taskID, contextID)
		}
		if i <= 3 {
			if want := fmt.Sprintf(`"w%d"`, i); string(u.Artifact.Parts[0].Data) != want || u.Append != (i > 1) || u.LastChunk {
				t.Fatalf("chunk %d: %+v, data %s", i, u, u.Artifact.Parts[0].Data)
			}
			continue
		}
		if !u.Append || !u.LastChunk || u.Artifact.Parts[0].Text == nil || *u.Artifact.Parts[0].Text != "" {
			t.Fatalf("the last update: %+v", u)
		}
	}
	ev, err := next()
	if err != nil {
		t.Fatal(err)
	}
	tk := ev.Result.Task
	if tk == nil || ev.Result.ArtifactUpdate != nil || tk.ID != taskID || tk.Status.State != a2a.StateCompleted ||
		len(tk.Artifacts) != 1 || string(tk.Artifacts[0].Parts[0].Data) != `"w1 w2 w3"` {
		t.Fatalf("the final event: %+v", ev.Result)
	}
	if _, err := next(); err != io.EOF {
		t.Fatalf("after the final event: %v", err)
	}
	if got := st.task(t, "/a2a/teller", a2a.MethodGetTask, map[string]any{"id": taskID}); got.Status.State != a2a.StateCompleted {
		t.Fatalf("GetTask of the streamed task: %+v", got)
	}

	// A stream that fails after a chunk: no last chunk, the task rejected.
	_, next = st.openStream(t, "teller.flop", map[string]any{})
	if ev, err := next(); err != nil || ev.Result.ArtifactUpdate == nil || ev.Result.ArtifactUpdate.Append || ev.Result.ArtifactUpdate.LastChunk {
		t.Fatalf("flop's chunk: %+v %v", ev.Result, err)
	}
	if ev, err := next(); err != nil || ev.Result.Task == nil || ev.Result.Task.Status.State != a2a.StateRejected {
		t.Fatalf("flop's end: %+v %v", ev.Result, err)
	}

	// A skill that does not stream: the final task alone, as before.
	_, next = st.openStream(t, "teller.words", 0)
	if ev, err := next(); err != nil || ev.Result.Task == nil || ev.Result.Task.Status.State != a2a.StateCompleted {
		t.Fatalf("no chunk: %+v %v", ev.Result, err)
	}
	if _, err := next(); err != io.EOF {
		t.Fatalf("after the only event: %v", err)
	}
}

func TestSendStreamingMessageClientGoneCancels(t *testing.T) {
	st := startStack(t)
	cancelled := st.teller(t)
	res, next := st.openStream(t, "teller.hang", map[string]any{})
	if ev, err := next(); err != nil || ev.Result.ArtifactUpdate == nil || string(ev.Result.ArtifactUpdate.Artifact.Parts[0].Data) != `"first"` {
		t.Fatalf("hang's chunk: %+v %v", ev.Result, err)
	}
	_ = res.Body.Close() // the client goes away mid-stream
	select {
	case <-cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent was not cancelled when the client went away")
	}
}
