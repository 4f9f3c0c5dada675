package agenttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher"
	dconfig "github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// The suite's topology and timing. The heartbeat is short so that the rules
// about it are quick; the dispatcher's call timeout is short so that
// processing can show that PROCESSING keeps a longer task alive.
const (
	// Heartbeat is the heartbeat the suite provisions: REACH_AGENTS has a
	// TTL of 3 s, and an agent must put its record every second.
	Heartbeat = time.Second
	// CallTimeout is the per-call timeout of the suite's dispatcher
	// (MinCallTimeout = MaxCallTimeout): a task that takes longer must send
	// PROCESSING.
	CallTimeout = time.Second

	setupTimeout     = 15 * time.Second // server, provisioning, dispatcher
	stopTimeout      = 20 * time.Second // the agent's drain and exit
	routeTimeout     = 5 * time.Second  // a dispatcher routing a registered agent
	callBound        = 10 * time.Second // one call through the dispatcher
	deliveryDeadline = 30 * time.Second // Reach-Deadline of a direct delivery, from now
	serverTimeout    = 10 * time.Second // the embedded server taking connections
)

// suite is one run of Check: its server, connections, dispatcher and what
// it has learnt about the agent.
type suite struct {
	env     Env
	log     zerolog.Logger
	dir     string
	srv     *server.Server
	nc      *nats.Conn // the suite's own: caller, direct deliveries, watches
	dnc     *nats.Conn // the dispatcher's
	js      jetstream.JetStream
	agents  jetstream.KeyValue
	idem    jetstream.KeyValue
	disp    *dispatcher.Dispatcher
	relay   bool       // disp relays results (RelayResults)
	auth    *authSetup // nil without WithAuth
	rec     *registry.Record
	records *recordLog

	agent   Agent
	gone    <-chan struct{} // closed when a process agent exits; nil once stopping is expected
	exitErr func() error
	stopped bool
}

// newSuite starts the server, provisions the topology, follows the agent's
// key (which no agent has written yet) and starts the dispatcher.
// With withAuth the server runs in operator mode on an identity store of
// its own (WithAuth).
func newSuite(ctx context.Context, log zerolog.Logger, withAuth bool) (*suite, error) {
	s := &suite{log: log}
	if err := s.setup(ctx, withAuth); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *suite) setup(ctx context.Context, withAuth bool) (err error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if s.dir, err = os.MkdirTemp("", "agenttest-"); err != nil {
		return fmt.Errorf("agenttest: store directory: %w", err)
	}
	s.env = Env{AgentID: "conformance-" + nuid.Next()[12:]}
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: filepath.Join(s.dir, "jetstream"), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 4 << 30,
	}
	if withAuth {
		if err := s.configureAuth(opts); err != nil {
			return err
		}
	}
	s.srv, err = server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("agenttest: NATS server: %w", err)
	}
	go s.srv.Start()
	if !s.srv.ReadyForConnections(serverTimeout) {
		return fmt.Errorf("agenttest: NATS server not ready within %v", serverTimeout)
	}
	s.env.ServerURL = s.srv.ClientURL()
	// With auth both are the dispatcher identity authDispatcher's.
	var as []nats.Option
	if s.auth != nil {
		if as, err = s.auth.connectAs(authDispatcher); err != nil {
			return err
		}
		as = slices.Clip(as) // each append below gets its own array
	}
	if s.nc, err = nats.Connect(s.env.ServerURL, append(as, nats.Name("agenttest"))...); err != nil {
		return fmt.Errorf("agenttest: connect: %w", err)
	}
	if s.dnc, err = nats.Connect(s.env.ServerURL, append(as, nats.Name("agenttest dispatcher"))...); err != nil {
		return fmt.Errorf("agenttest: connect: %w", err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return err
	}
	if err := streams.Provision(ctx, s.js, streams.Topology{Heartbeat: Heartbeat}); err != nil {
		return fmt.Errorf("agenttest: provision: %w", err)
	}
	if s.agents, err = s.js.KeyValue(ctx, streams.BucketAgents); err != nil {
		return err
	}
	if s.idem, err = s.js.KeyValue(ctx, streams.BucketIdempotency); err != nil {
		return err
	}
	if s.records, err = s.follow(ctx); err != nil {
		return fmt.Errorf("agenttest: watch %s: %w", streams.BucketAgents, err)
	}
	if s.auth != nil {
		if err := s.auth.start(ctx, s); err != nil {
			return err
		}
	}
	return s.useDispatcher(ctx, false)
}

// close stops everything newSuite started; it is safe on a partly built
// suite.
func (s *suite) close() {
	if s.disp != nil {
		_ = s.disp.Close()
	}
	if s.records != nil {
		s.records.stop()
	}
	if s.auth != nil {
		s.auth.close()
	}
	for _, nc := range []*nats.Conn{s.nc, s.dnc} {
		if nc != nil {
			nc.Close()
		}
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// startAgent starts the agent under test.
func (s *suite) startAgent(ctx context.Context, agent Agent) error {
	if err := agent.Start(ctx, s.env); err != nil {
		return fmt.Errorf("agenttest: start the agent: %w", err)
	}
	s.agent = agent
	if p, ok := agent.(*process); ok {
		s.gone, s.exitErr = p.exited(), p.exitErr
	}
	return nil
}

// beginStop stops the agent in the background, once, bounded by
// stopTimeout; the channel gets what Stop returned. From now on the agent
// is expected to exit.
func (s *suite) beginStop() <-chan error {
	s.stopped = true
	s.gone = nil
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		ch <- s.agent.Stop(ctx)
	}()
	return ch
}

// stopAgent stops the agent unless that has begun already.
func (s *suite) stopAgent() {
	if !s.stopped && s.agent != nil {
		<-s.beginStop()
	}
}

// exited says how the agent ended, when it is a process that has ended
// before it was asked to; "" otherwise.
func (s *suite) exited() string {
	if s.gone == nil {
		return ""
	}
	select {
	case <-s.gone:
		return s.exitErr().Error()
	default:
		return ""
	}
}

// errNotChecked fails the rules that need a registered agent when there is
// none.
var errNotChecked = errors.New("not checked: rule register found no record that decodes, so the agent is not registered")

// check runs one rule and words its outcome.
func (s *suite) check(ctx context.Context, r rule) Result {
	start := time.Now()
	var err error
	if r.id != ruleRegister && s.rec == nil {
		err = errNotChecked
	} else {
		err = r.check(ctx, s)
	}
	res := Result{Rule: r.id, Title: r.title, Passed: err == nil, Elapsed: time.Since(start)}
	if err != nil {
		msg := err.Error()
		if how := s.exited(); how != "" && err != errNotChecked {
			msg += fmt.Sprintf("; the agent had exited (%s)", how)
		}
		res.Message = fmt.Sprintf("rule %s: %s (see docs/conformance.md#%s)", r.id, msg, r.id)
	}
	return res
}

// dispatch makes sure the suite's dispatcher runs with RelayResults = relay
// and routes the agent, for a rule that calls through it.
func (s *suite) dispatch(ctx context.Context, relay bool) error {
	if err := s.useDispatcher(ctx, relay); err != nil {
		return err
	}
	return s.routed(ctx)
}

// useDispatcher makes sure the suite's dispatcher runs with RelayResults =
// relay.
func (s *suite) useDispatcher(ctx context.Context, relay bool) error {
	if s.disp != nil && s.relay == relay {
		return nil
	}
	if s.disp != nil {
		_ = s.disp.Close()
		s.disp = nil
	}
	opts := []dispatcher.Option{dispatcher.WithLogger(s.log)}
	if s.auth != nil {
		opts = append(opts, dispatcher.WithAuthorizer(s.auth.az))
	}
	d, err := dispatcher.New(s.dnc, dconfig.Config{
		Name: "agenttest", MinCallTimeout: CallTimeout, MaxCallTimeout: CallTimeout, RelayResults: relay,
		Handlers: 1, NoDurable: true, NoEvents: true,
	}, opts...)
	if err != nil {
		return fmt.Errorf("agenttest: dispatcher: %w", err)
	}
	if err := d.Start(ctx); err != nil {
		return fmt.Errorf("agenttest: dispatcher: %w", err)
	}
	s.disp, s.relay = d, relay
	return nil
}

// routed waits until the dispatcher routes the agent.
func (s *suite) routed(ctx context.Context) error {
	deadline := time.Now().Add(routeTimeout)
	for {
		changed := s.disp.Table().Changed() // before the look, so no change is missed
		if inst, ok := s.disp.Table().Lookup(s.env.AgentID); ok && inst.Entry().Routable() {
			return nil
		}
		if !wait(ctx, deadline, changed) {
			return fmt.Errorf("the dispatcher does not route the agent %v after it registered (is its record valid and ready?)", routeTimeout)
		}
	}
}

// wait waits for ch until deadline or ctx ends; it reports whether ch
// fired.
func wait(ctx context.Context, deadline time.Time, ch <-chan struct{}) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}
