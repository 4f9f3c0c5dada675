package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
)

// agentSet is a group of agentkit agents, each on two connections of its
// own (work and heartbeat), as separate processes would be.
type agentSet struct {
	agents []*agentkit.Agent
	conns  []*nats.Conn
}

// startAgents starts n agents serving capabilities; agent i is named
// "<prefix>-<i>" and runs handler(i) for each of them, with maxConc slots
// shared among them.
func (r *run) startAgents(e *env, capabilities []string, prefix string, n, maxConc int, handler func(i int) agentkit.Handler) (*agentSet, error) {
	set := &agentSet{}
	var err error
	labelled(r.ctx, compAgents, func(context.Context) { err = r.addAgents(e, set, capabilities, prefix, n, maxConc, handler) })
	if err != nil {
		set.stop()
		return nil, err
	}
	return set, nil
}

func (r *run) addAgents(e *env, set *agentSet, capabilities []string, prefix string, n, maxConc int, handler func(i int) agentkit.Handler) error {
	for i := range n {
		nc, err := e.connect(fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			return err
		}
		hb, err := e.connect(fmt.Sprintf("%s-%d-hb", prefix, i))
		if err != nil {
			return err
		}
		set.conns = append(set.conns, nc, hb)
		a, err := agentkit.New(nc, agentkit.Config{
			Type: "bench", ID: fmt.Sprintf("%s-%d", prefix, i), MaxConcurrent: maxConc,
			Heartbeat: e.topo.HeartbeatInterval(), DrainTimeout: 100 * time.Millisecond,
		}, agentkit.WithoutSignals(), agentkit.WithHeartbeatConn(hb), agentkit.WithLogger(zerolog.Nop()))
		for _, c := range capabilities {
			if err == nil {
				err = a.Handle(c, handler(i))
			}
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
			err = a.Start(ctx)
			cancel()
		}
		if err != nil {
			return fmt.Errorf("agent %d: %w", i, err)
		}
		set.agents = append(set.agents, a)
	}
	return nil
}

// stop drains every agent (in-flight handlers get 100 ms, then their
// context ends), which deletes their records, and closes their connections.
func (s *agentSet) stop() {
	var wg sync.WaitGroup
	for _, a := range s.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = a.Drain(ctx)
		}()
	}
	wg.Wait()
	for _, nc := range s.conns {
		nc.Close()
	}
	s.agents, s.conns = nil, nil
}

// dispatch is a dispatcher on a connection of its own.
type dispatch struct {
	d  *dispatcher.Dispatcher
	nc *nats.Conn
}

// startDispatcher starts a dispatcher on a connection of its own (with
// inProcess, on an in-process pipe to the embedded server, as `agentreach
// up` runs it); its goroutines carry the dispatcher label.
func (r *run) startDispatcher(e *env, cfg dispatcher.Config, inProcess bool, opts ...dispatcher.Option) (ds *dispatch, err error) {
	labelled(r.ctx, compDispatch, func(ctx context.Context) { ds, err = r.newDispatcher(ctx, e, cfg, inProcess, opts) })
	return ds, err
}

// newDispatcher starts a dispatcher; ctx carries its profiling label.
func (r *run) newDispatcher(ctx context.Context, e *env, cfg dispatcher.Config, inProcess bool, opts []dispatcher.Option) (*dispatch, error) {
	var nc *nats.Conn
	var err error
	if inProcess {
		nc, err = e.connectInProcess(ctx, "dispatcher")
	} else {
		nc, err = e.connect("dispatcher")
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
	return &dispatch{d: d, nc: nc}, nil
}

// waitRoutable waits until the dispatcher routes capability to n instances.
func (r *run) waitRoutable(ds *dispatch, capability string, n int) error {
	if !r.poll(10*time.Second, func() bool { return ds.d.Table().Candidates(capability).Len() == n }) {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("dispatcher routes %s to %d instances after 10s, want %d",
			capability, ds.d.Table().Candidates(capability).Len(), n)
	}
	return nil
}

// stop drains the dispatcher (up to 3 s) and closes its connection.
func (ds *dispatch) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = ds.d.Drain(ctx) // an error means tasks were still waiting: closing the connection ends them
	ds.nc.Close()
}

// echoStack is overheadAgents echo agents behind one dispatcher.
type echoStack struct {
	r      *run
	e      *env
	agents *agentSet
	ds     *dispatch
}

// startEcho starts overheadAgents echo agents behind one dispatcher with
// cfg (on an in-process connection with inProcess) and waits until the
// dispatcher routes to all of them.
func (r *run) startEcho(e *env, cfg dispatcher.Config, inProcess bool) (*echoStack, error) {
	agents, err := r.startAgents(e, []string{echoCapability}, "echo", overheadAgents, 1024, func(int) agentkit.Handler {
		return func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }
	})
	if err != nil {
		return nil, err
	}
	s := &echoStack{r: r, e: e, agents: agents}
	if err := s.restart(cfg, inProcess); err != nil {
		agents.stop()
		return nil, err
	}
	return s, nil
}

// restart replaces the dispatcher (if any) with one configured by cfg, on
// an in-process connection with inProcess, and waits until it routes to
// every agent.
func (s *echoStack) restart(cfg dispatcher.Config, inProcess bool) error {
	if s.ds != nil {
		s.ds.stop()
		s.ds = nil
	}
	ds, err := s.r.startDispatcher(s.e, cfg, inProcess)
	if err != nil {
		return err
	}
	s.ds = ds
	return s.r.waitRoutable(ds, echoCapability, overheadAgents)
}

// stop stops the dispatcher and the agents.
func (s *echoStack) stop() {
	if s.ds != nil {
		s.ds.stop()
	}
	s.agents.stop()
}
