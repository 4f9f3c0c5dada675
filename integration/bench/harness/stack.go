package harness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
)

// agentSet is a group of agentkit agents, each on two connections of its
// own (work and heartbeat), as separate processes would be.
type agentSet struct {
	Agents []*agentkit.Agent
	Conns  []*nats.Conn
}

// StartAgents starts n agents serving capabilities; agent i is named
// "<prefix>-<i>" (type "bench") and runs handler(i) for each of them, with
// maxConc slots shared among them; configure, when given, adjusts each
// agent's Config first.
func (r *Run) StartAgents(e *Env, capabilities []string, prefix string, n, maxConc int, handler func(i int) agentkit.Handler, configure ...func(*agentkit.Config)) (*agentSet, error) {
	set := &agentSet{}
	var err error
	Labelled(r.Ctx, CompAgents, func(context.Context) {
		err = r.addAgents(e, set, capabilities, prefix, n, maxConc, handler, configure)
	})
	if err != nil {
		set.Stop()
		return nil, err
	}
	return set, nil
}

func (r *Run) addAgents(e *Env, set *agentSet, capabilities []string, prefix string, n, maxConc int, handler func(i int) agentkit.Handler, configure []func(*agentkit.Config)) error {
	for i := range n {
		nc, err := e.Connect(fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			return err
		}
		hb, err := e.Connect(fmt.Sprintf("%s-%d-hb", prefix, i))
		if err != nil {
			return err
		}
		set.Conns = append(set.Conns, nc, hb)
		cfg := agentkit.Config{
			Type: "bench", ID: fmt.Sprintf("%s-%d", prefix, i), MaxConcurrent: maxConc,
			Heartbeat: e.Topo.HeartbeatInterval(), DrainTimeout: 100 * time.Millisecond,
		}
		for _, f := range configure {
			f(&cfg)
		}
		a, err := agentkit.New(nc, cfg, agentkit.WithoutSignals(), agentkit.WithHeartbeatConn(hb), agentkit.WithLogger(zerolog.Nop()))
		for _, c := range capabilities {
			if err == nil {
				err = a.Handle(c, handler(i))
			}
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(r.Ctx, 10*time.Second)
			err = a.Start(ctx)
			cancel()
		}
		if err != nil {
			return fmt.Errorf("agent %d: %w", i, err)
		}
		set.Agents = append(set.Agents, a)
	}
	return nil
}

// Stop drains every agent (in-flight handlers get 100 ms, then their
// context ends), which deletes their records, and closes their connections.
func (s *agentSet) Stop() {
	var wg sync.WaitGroup
	for _, a := range s.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = a.Drain(ctx)
		}()
	}
	wg.Wait()
	for _, nc := range s.Conns {
		nc.Close()
	}
	s.Agents, s.Conns = nil, nil
}

// Dispatch is a dispatcher on a connection of its own.
type Dispatch struct {
	D  *dispatcher.Dispatcher
	NC *nats.Conn
}

// StartDispatcher starts a dispatcher on a connection of its own (with
// inProcess, on an in-process pipe to the embedded server, as `agentreach
// up` runs it); its goroutines carry the dispatcher label.
func (r *Run) StartDispatcher(e *Env, cfg config.Config, inProcess bool, opts ...dispatcher.Option) (ds *Dispatch, err error) {
	Labelled(r.Ctx, CompDispatch, func(ctx context.Context) { ds, err = r.newDispatcher(ctx, e, cfg, inProcess, opts) })
	return ds, err
}

// newDispatcher starts a dispatcher; ctx carries its profiling label.
func (r *Run) newDispatcher(ctx context.Context, e *Env, cfg config.Config, inProcess bool, opts []dispatcher.Option) (*Dispatch, error) {
	var nc *nats.Conn
	var err error
	if inProcess {
		nc, err = e.connectInProcess(ctx, "dispatcher")
	} else {
		nc, err = e.Connect("dispatcher")
	}
	if err != nil {
		return nil, err
	}
	d, err := dispatcher.New(nc, cfg, opts...)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = d.Start(ctx)
		cancel()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	return &Dispatch{D: d, NC: nc}, nil
}

// WaitRoutable waits until the dispatcher routes capability to n instances.
func (r *Run) WaitRoutable(ds *Dispatch, capability string, n int) error {
	if !r.Poll(10*time.Second, func() bool { return ds.D.Table().Candidates(capability).Len() == n }) {
		if err := r.Ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("dispatcher routes %s to %d instances after 10s, want %d",
			capability, ds.D.Table().Candidates(capability).Len(), n)
	}
	return nil
}

// Stop drains the dispatcher (up to 3 s) and closes its connection.
func (ds *Dispatch) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = ds.D.Drain(ctx) // an error means tasks were still waiting: closing the connection ends them
	ds.NC.Close()
}

// EchoStack is overheadAgents echo agents behind one dispatcher.
type EchoStack struct {
	r      *Run
	e      *Env
	agents *agentSet
	ds     *Dispatch
}

// StartEcho starts overheadAgents echo agents behind one dispatcher with
// cfg (on an in-process connection with inProcess) and waits until the
// dispatcher routes to all of them.
func (r *Run) StartEcho(e *Env, cfg config.Config, inProcess bool) (*EchoStack, error) {
	agents, err := r.StartAgents(e, []string{EchoCapability}, "echo", OverheadAgents, 1024, func(int) agentkit.Handler {
		return func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }
	})
	if err != nil {
		return nil, err
	}
	s := &EchoStack{r: r, e: e, agents: agents}
	if err := s.Restart(cfg, inProcess); err != nil {
		agents.Stop()
		return nil, err
	}
	return s, nil
}

// Restart replaces the dispatcher (if any) with one configured by cfg, on
// an in-process connection with inProcess, and waits until it routes to
// every agent.
func (s *EchoStack) Restart(cfg config.Config, inProcess bool) error {
	if s.ds != nil {
		s.ds.Stop()
		s.ds = nil
	}
	ds, err := s.r.StartDispatcher(s.e, cfg, inProcess)
	if err != nil {
		return err
	}
	s.ds = ds
	return s.r.WaitRoutable(ds, EchoCapability, OverheadAgents)
}

// Stop stops the dispatcher and the agents.
func (s *EchoStack) Stop() {
	if s.ds != nil {
		s.ds.Stop()
	}
	s.agents.Stop()
}
