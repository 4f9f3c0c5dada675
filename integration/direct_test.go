package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// wiretap records every task-related message the server routes: deliveries,
// replies and results (everything but JetStream's and KV's own traffic).
type wiretap struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func tap(t *testing.T, st *Stack) *wiretap {
	t.Helper()
	w := &wiretap{}
	nc := st.Conn()
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "$") {
			return
		}
		w.mu.Lock()
		w.msgs = append(w.msgs, m)
		w.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// matching returns the recorded messages for which keep is true.
func (w *wiretap) matching(keep func(*nats.Msg) bool) []*nats.Msg {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*nats.Msg
	for _, m := range w.msgs {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// await waits until exactly n recorded messages match keep, and returns them.
func (w *wiretap) await(t *testing.T, n int, what string, keep func(*nats.Msg) bool) []*nats.Msg {
	t.Helper()
	var got []*nats.Msg
	natstest.WaitFor(t, 5*time.Second, func() error {
		if got = w.matching(keep); len(got) != n {
			return fmt.Errorf("%d %s, want %d", len(got), what, n)
		}
		return nil
	})
	return got
}

func isNotice(m *nats.Msg) bool { return m.Header.Get(streams.HeaderDirect) != "" }

func TestAnAgentAnswersTheCallerDirectly(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	a := st.Agent(agentkit.Config{Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 1, d)
	w := tap(t, st)
	nc := st.Conn()

	res, err := nc.Request(streams.Subjects{}.Task("echo"), []byte(`{"text":"hi"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Data) != `{"text":"hi"}` || res.Header.Get(streams.HeaderStatus) != string(streams.StatusFinished) {
		t.Fatalf("reply %q, headers %v", res.Data, res.Header)
	}
	id := res.Header.Get(streams.HeaderRequestID)
	for k, want := range map[string]string{streams.HeaderNode: a.ID(), streams.HeaderAttempt: "1",
		streams.HeaderOrchestrationID: id, streams.HeaderContentType: streams.ContentTypeJSON} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("reply header %s = %q, want %q", k, got, want)
		}
	}
	if id == "" {
		t.Error("reply has no Reach-Request-Id")
	}

	// The delivery offered the caller's inbox; the agent answered there once
	// and sent the dispatcher a bodiless notice, which ended the task.
	deliveries := w.await(t, 1, "deliveries", func(m *nats.Msg) bool { return m.Subject == streams.Subjects{}.Agent(a.ID()) })
	caller := deliveries[0].Header.Get(streams.HeaderReplyTo)
	if caller == "" || !strings.HasPrefix(caller, "_INBOX.") {
		t.Fatalf("delivery offers Reach-Reply-To %q, want the caller's inbox", caller)
	}
	w.await(t, 1, "messages to the caller", func(m *nats.Msg) bool { return m.Subject == caller })
	notice := w.await(t, 1, "notices", isNotice)[0]
	if notice.Subject != deliveries[0].Reply || len(notice.Data) != 0 ||
		notice.Header.Get(streams.HeaderStatus) != string(streams.StatusFinished) {
		t.Fatalf("notice on %q (delivery reply %q), body %q, headers %v", notice.Subject, deliveries[0].Reply, notice.Data, notice.Header)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if s := d.Stats(); s.Finished != 1 || s.Failed != 0 {
			return fmt.Errorf("dispatcher stats %+v, want 1 finished", s)
		}
		return nil
	})

	// A durable task's delivery offers nothing: its result belongs in
	// REACH_RESULTS, which only the dispatcher writes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done, err := st.Client().SubmitAndWait(ctx, "echo", echoIn{Text: "later"})
	if err != nil {
		t.Fatalf("durable task: %v (dispatcher stats %+v)", err, d.Stats())
	}
	rid := done.RequestID
	durable := w.await(t, 1, "durable deliveries", func(m *nats.Msg) bool {
		return m.Subject == streams.Subjects{}.Agent(a.ID()) && m.Header.Get(streams.HeaderRequestID) == rid
	})
	if to := durable[0].Header.Get(streams.HeaderReplyTo); to != "" {
		t.Errorf("durable delivery offers Reach-Reply-To %q", to)
	}
	w.await(t, 1, "notices", isNotice) // still only the first task's
}

func TestRelayResultsKeepsResultsOnTheDispatchersPath(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{RelayResults: true})
	a := st.Agent(agentkit.Config{Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 1, d)
	w := tap(t, st)

	res, err := st.Client().Call(context.Background(), "echo", echoIn{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Node != a.ID() || res.Attempt != 1 {
		t.Fatalf("metadata %+v", res)
	}
	delivery := w.await(t, 1, "deliveries", func(m *nats.Msg) bool { return m.Subject == streams.Subjects{}.Agent(a.ID()) })[0]
	if to := delivery.Header.Get(streams.HeaderReplyTo); to != "" {
		t.Errorf("delivery offers Reach-Reply-To %q with RelayResults on", to)
	}
	// The agent's result went to the dispatcher's inbox, not as a notice.
	w.await(t, 1, "results to the dispatcher", func(m *nats.Msg) bool {
		return m.Subject == delivery.Reply && m.Header.Get(streams.HeaderStatus) == string(streams.StatusFinished) && len(m.Data) > 0
	})
	if n := w.matching(isNotice); len(n) != 0 {
		t.Errorf("%d notices with RelayResults on", len(n))
	}
}

// An agent that may only answer the messages it receives (allow_responses,
// as in deploy/) finds out at start that it cannot publish to callers'
// inboxes, and sends every result through the dispatcher: nothing is lost.
func TestAnAgentWithoutInboxRightsRelaysItsResults(t *testing.T) {
	st := NewStack(t, time.Second, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "agent", Password: "agent", Permissions: &server.Permissions{
				Publish:  &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"_INBOX.>"}},
				Response: &server.ResponsePermission{MaxMsgs: 5, Expires: time.Minute},
			}},
		}
		o.NoAuthUser = "admin"
	})
	d := st.Dispatcher(config.Config{})
	violations := make(chan error, 16)
	anc := natstest.Connect(t, st.Server, nats.UserInfo("agent", "agent"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	a, err := agentkit.New(anc, agentkit.Config{Type: "echo", Heartbeat: st.Heartbeat}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Handle("echo", echoHandler()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Drain(context.Background()) })
	WaitRoutable(t, "echo", 1, d)
	w := tap(t, st)

	for i := range 3 {
		res, err := st.Client().Call(ctx, "echo", echoIn{Text: fmt.Sprint(i)})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		var out echoIn
		if err := res.Decode(&out); err != nil || out.Text != fmt.Sprint(i) || res.Node != a.ID() {
			t.Fatalf("call %d: %+v, %v, node %s", i, out, err, res.Node)
		}
	}
	if n := w.matching(isNotice); len(n) != 0 {
		t.Errorf("%d notices from an agent that may not publish to inboxes", len(n))
	}
	// The probe at start is what found out.
	select {
	case err := <-violations:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Errorf("async error %v", err)
		}
	case <-ctx.Done():
		t.Error("the probe at start raised no permissions violation: did it run?")
	}
}

// A notice claims the result went to the caller; when the delivery offered
// no reply subject, the caller would wait for nothing. The dispatcher
// answers INTERNAL at once instead.
func TestAnUnofferedDirectNoticeIsAnError(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{RelayResults: true, Retries: config.NoRetries})
	nc := st.Conn()
	RawInstance(t, nc, "liar-1", st.Heartbeat, func(m *nats.Msg) {
		notice := streams.StatusReply(m.Reply, streams.StatusFinished, m.Header.Get(streams.HeaderRequestID))
		notice.Header.Set(streams.HeaderDirect, "1")
		_ = nc.PublishMsg(notice)
	}, "echo")
	WaitRoutable(t, "echo", 1, d)
	_, err := st.Client().Call(context.Background(), "echo", echoIn{Text: "hi"}, agentkit.WithTimeout(5*time.Second))
	var e *streams.Error
	if !errors.As(err, &e) || e.Code != streams.CodeInternal || !strings.Contains(e.Message, streams.HeaderReplyTo) {
		t.Fatalf("call: %v, want INTERNAL naming %s", err, streams.HeaderReplyTo)
	}
}
