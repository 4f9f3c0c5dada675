package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

type seenEvents struct {
	mu  sync.Mutex
	evs []events.Event
}

func (s *seenEvents) Observed(ev *events.Event) {
	s.mu.Lock()
	s.evs = append(s.evs, *ev)
	s.mu.Unlock()
}

type onlyAlice struct{}

func (onlyAlice) Authorize(capability string, m *nats.Msg, _ bool) *streams.Error {
	if m.Header.Get(streams.HeaderSource) != "alice" {
		return streams.NewError(streams.CodeUnauthorized, "%q may not call %s", m.Header.Get(streams.HeaderSource), capability)
	}
	return nil
}

type greeter struct{}

func (greeter) Serves(name string) bool { return name == "hello.flow" }
func (greeter) Names() []string         { return []string{"hello.flow"} }
func (greeter) Direct(*nats.Msg, string) *nats.Msg {
	out := nats.NewMsg("")
	out.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
	out.Data = []byte(`"hello from the resolver"`)
	return out
}
func (greeter) Durable(msg jetstream.Msg, _ string) { _ = msg.Term() }

func TestTheDispatchersExtensionPoints(t *testing.T) {
	st := NewStack(t, time.Second)
	var seen seenEvents
	nc := st.Conn()
	d, err := dispatcher.New(st.Conn(), config.Config{NoEvents: true},
		dispatcher.WithObserver(&seen), dispatcher.WithAuthorizer(onlyAlice{}), dispatcher.WithResolver(greeter{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	agentNC := st.Conn()
	RawInstance(t, agentNC, "echo-1", time.Second, func(m *nats.Msg) { finish(agentNC, m, m.Data) }, "echo")
	WaitRoutable(t, "echo", 1, d)

	call := func(subject, source string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set(streams.HeaderSource, source)
		m.Data = []byte(`{}`)
		res, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call(streams.Subjects{}.Task("echo"), "alice"); res.Header.Get(streams.HeaderStatus) != "FINISHED" {
		t.Errorf("alice's call: %v", res.Header)
	}
	if e := streams.ErrorFromMessage(call(streams.Subjects{}.Task("echo"), "mallory")); e == nil || e.Code != streams.CodeUnauthorized {
		t.Errorf("mallory's call: %v, want UNAUTHORIZED", e)
	}
	if res := call(streams.Subjects{}.Task("hello.flow"), "alice"); string(res.Data) != `"hello from the resolver"` {
		t.Errorf("a name the resolver serves: %q %v", res.Data, res.Header)
	}
	// The resolver's names pass the Authorizer too.
	if e := streams.ErrorFromMessage(call(streams.Subjects{}.Task("hello.flow"), "mallory")); e == nil || e.Code != streams.CodeUnauthorized {
		t.Errorf("mallory's call of the resolver's name: %v, want UNAUTHORIZED", e)
	}
	// The observer saw both tasks the dispatcher routed, records off or not.
	natstest.WaitFor(t, 5*time.Second, func() error {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		var ok, refused int
		for _, ev := range seen.evs {
			switch ev.Code {
			case "":
				ok++
			case string(streams.CodeUnauthorized):
				refused++
			}
		}
		if ok != 1 || refused != 1 {
			return fmt.Errorf("observed %d finished and %d refused tasks, want 1 and 1", ok, refused)
		}
		return nil
	})
}
