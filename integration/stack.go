package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Stack is an embedded server with the topology provisioned, plus helpers to
// add dispatchers, agents and clients that are all stopped when the test ends.
// Its dispatchers and agents log at debug level into a buffer that a failing
// test prints.
type Stack struct {
	T         testing.TB
	Server    *server.Server
	Heartbeat time.Duration
	log       zerolog.Logger
}

// NewStack starts a server and provisions the topology with heartbeat hb;
// tune, when given, adjusts the server's options first.
func NewStack(tb testing.TB, hb time.Duration, tune ...func(*server.Options)) *Stack {
	tb.Helper()
	opts := natstest.Options(tb.TempDir())
	for _, f := range tune {
		f(opts)
	}
	st := runStack(tb, hb, opts)
	natstest.Provision(tb, st.Conn(), streams.Topology{Heartbeat: hb, Memory: true})
	return st
}

// runStack starts a server with opts and the stack's log, without
// provisioning.
func runStack(tb testing.TB, hb time.Duration, opts *server.Options) *Stack {
	tb.Helper()
	s := natstest.RunServerWith(tb, opts)
	logs := &tailBuffer{}
	// Registered first, so it runs after every dispatcher and agent stopped.
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("the stack's log (its last %d KB at most):\n%s", 2*keepLog>>10, logs.bytes())
		}
	})
	log := zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	return &Stack{T: tb, Server: s, Heartbeat: hb, log: log}
}

// keepLog is how much of its log (in bytes) a stack keeps at least.
const keepLog = 1 << 20

// tailBuffer keeps the last keepLog to 2 × keepLog bytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *tailBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > 2*keepLog {
		l.b = append(l.b[:0], l.b[len(l.b)-keepLog:]...)
	}
	return len(p), nil
}

func (l *tailBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b...)
}

// Conn opens a connection closed at the end of the test.
func (st *Stack) Conn() *nats.Conn { return natstest.Connect(st.T, st.Server) }

// Dispatcher starts a dispatcher on its own connection.
func (st *Stack) Dispatcher(cfg config.Config) *dispatcher.Dispatcher {
	st.T.Helper()
	return st.dispatcherOn(st.Conn(), cfg)
}

// dispatcherOn starts a dispatcher on nc.
func (st *Stack) dispatcherOn(nc *nats.Conn, cfg config.Config, opts ...dispatcher.Option) *dispatcher.Dispatcher {
	st.T.Helper()
	d, err := dispatcher.New(nc, cfg, append(opts, dispatcher.WithLogger(st.log))...)
	if err != nil {
		st.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		st.T.Fatal(err)
	}
	st.T.Cleanup(func() { _ = d.Close() })
	return d
}

// Agent starts an agent serving handlers, on connections of its own.
func (st *Stack) Agent(cfg agentkit.Config, handlers map[string]agentkit.Handler) *agentkit.Agent {
	st.T.Helper()
	return st.agentOn(st.Conn(), cfg, handlers)
}

// agentOn starts an agent on nc (and a heartbeat connection like it).
func (st *Stack) agentOn(nc *nats.Conn, cfg agentkit.Config, handlers map[string]agentkit.Handler) *agentkit.Agent {
	st.T.Helper()
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = st.Heartbeat
	}
	a, err := agentkit.New(nc, cfg, agentkit.WithoutSignals(), agentkit.WithLogger(st.log))
	if err != nil {
		st.T.Fatal(err)
	}
	for c, h := range handlers {
		if err := a.Handle(c, h); err != nil {
			st.T.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		st.T.Fatal(err)
	}
	st.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Drain(ctx)
	})
	return a
}

// Client returns a client on its own connection.
func (st *Stack) Client(opts ...agentkit.ClientOption) *agentkit.Client {
	c, err := agentkit.NewClient(st.Conn(), opts...)
	if err != nil {
		st.T.Fatal(err)
	}
	return c
}

// WaitRoutable waits until every dispatcher routes capability to n instances.
func WaitRoutable(tb testing.TB, capability string, n int, ds ...*dispatcher.Dispatcher) {
	tb.Helper()
	natstest.WaitFor(tb, 5*time.Second, func() error {
		for _, d := range ds {
			if got := d.Table().Candidates(capability).Len(); got != n {
				return fmt.Errorf("%s routes %s to %d instances, want %d", d.Name(), capability, got, n)
			}
		}
		return nil
	})
}

// WaitHeartbeat waits until agent id puts its record in the REACH_AGENTS
// bucket kv again after the revision stored now: it is heartbeating.
func WaitHeartbeat(tb testing.TB, kv jetstream.KeyValue, id string, within time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within+5*time.Second)
	defer cancel()
	first, err := kv.Get(ctx, id)
	if err != nil {
		tb.Fatal(err)
	}
	natstest.WaitFor(tb, within, func() error {
		if e, err := kv.Get(ctx, id); err != nil || e.Revision() == first.Revision() {
			return fmt.Errorf("no new heartbeat of %s (%v)", id, err)
		}
		return nil
	})
}

// FanOut starts the fan-out and broadcast service beside d, on its own
// connection.
func (st *Stack) FanOut(d *dispatcher.Dispatcher) *fanout.Service {
	st.T.Helper()
	return st.fanOutOn(st.Conn(), d)
}

// fanOutOn starts the fan-out and broadcast service beside d on nc.
func (st *Stack) fanOutOn(nc *nats.Conn, d *dispatcher.Dispatcher, opts ...fanout.Option) *fanout.Service {
	st.T.Helper()
	s, err := fanout.New(nc, d, fanout.Config{}, append(opts, fanout.WithLogger(st.log))...)
	if err != nil {
		st.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		st.T.Fatal(err)
	}
	st.T.Cleanup(func() { _ = s.Close() })
	return s
}
