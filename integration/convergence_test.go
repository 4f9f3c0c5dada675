package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Issue 26, "everyone vanishes at once": REACH_AGENTS cannot take
// heartbeats for longer than a record's TTL while every agent is up and
// subscribed. The dispatcher keeps routing from its table, no agent leaves
// it, and no call is answered NO_AGENT. Two shapes of the fault:
// a 3-node cluster that loses its quorum (two nodes stopped, the
// dispatcher, agents and callers on the third) and a single file-backed
// server stopped and restarted on the same port.

// convergenceRun is a dispatcher, three agents and callers calling echo
// back to back, all on connections to url that reconnect forever.
type convergenceRun struct {
	t *testing.T
	d *dispatcher.Dispatcher
	// Sampled every 10 ms: the fewest instances routed, and how many
	// samples saw a stale one.
	minRoutes atomic.Int64
	staleSeen atomic.Int64
	ok        atomic.Int64
	codes     sync.Map // error code → *atomic.Int64
	first     sync.Map // error code → the first such error's text
	done      chan struct{}
	wg        sync.WaitGroup
}

const convergenceHB = 500 * time.Millisecond

// The agents heartbeat on connections to hbURL that wait hbWait before
// reconnecting: their first put after the fault heals comes after the
// store expired their records, as with thousands of agents reconnecting
// with jitter, or a heartbeat due a whole interval later.
func startConvergenceRun(t *testing.T, st *Stack, url, hbURL string, hbWait time.Duration) *convergenceRun {
	t.Helper()
	connect := func(url string, wait time.Duration) *nats.Conn {
		// Only the server named: no failing over to another node.
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(wait), nats.Timeout(10*time.Second),
			nats.IgnoreDiscoveredServers())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	fast := 50 * time.Millisecond
	r := &convergenceRun{t: t, done: make(chan struct{})}
	r.d = st.dispatcherOn(connect(url, fast), config.Config{AckTimeout: time.Second})
	for i := range 3 {
		a, err := agentkit.New(connect(url, fast), agentkit.Config{Type: "echo", ID: fmt.Sprintf("echo-%d", i+1), Heartbeat: st.Heartbeat},
			agentkit.WithoutSignals(), agentkit.WithLogger(st.log), agentkit.WithHeartbeatConn(connect(hbURL, hbWait)))
		if err != nil {
			t.Fatal(err)
		}
		_ = a.Handle("echo", func(_ context.Context, q *agentkit.Request) (any, error) { return q.Data, nil })
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = a.Drain(ctx)
		})
	}
	WaitRoutable(t, "echo", 3, r.d)
	c, err := agentkit.NewClient(connect(url, fast))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				select {
				case <-r.done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := c.Call(ctx, "echo", map[string]int{"n": 1})
				cancel()
				if err == nil {
					r.ok.Add(1)
					continue
				}
				code := "transport"
				var se *streams.Error
				if errors.As(err, &se) {
					code = string(se.Code)
				}
				if strings.Contains(err.Error(), "no dispatcher is listening") {
					// The client's own view: it reconnected before the
					// dispatcher subscribed again. Not the routing table.
					code = "no_dispatcher"
				}
				if _, seen := r.first.LoadOrStore(code, err.Error()); !seen {
					r.t.Logf("first %s: %v", code, err)
				}
				n, _ := r.codes.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				// After an error a caller waits 20 ms, so counts are
				// proportional to how long the errors lasted.
				select {
				case <-r.done:
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if r.ok.Load() < 50 {
			return errors.New("calls not flowing yet")
		}
		return nil
	})
	r.minRoutes.Store(3)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.done:
				return
			case <-tick.C:
			}
			routes := r.d.Table().Candidates("echo")
			if n := int64(routes.Len()); n < r.minRoutes.Load() {
				r.minRoutes.Store(n)
			}
			if routes == nil {
				continue
			}
			for _, inst := range routes.Instances {
				if inst.Stale() {
					r.staleSeen.Add(1)
					break
				}
			}
		}
	}()
	return r
}

func (r *convergenceRun) count(code string) int64 {
	if n, ok := r.codes.Load(code); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

func (r *convergenceRun) summary() string {
	s := fmt.Sprintf("fewest routed %d, stale in %d samples; calls: %d ok", r.minRoutes.Load(), r.staleSeen.Load(), r.ok.Load())
	r.codes.Range(func(k, v any) bool {
		s += fmt.Sprintf(", %d %s", v.(*atomic.Int64).Load(), k)
		return true
	})
	return s
}

// heal waits until every agent is routed, fresh (heartbeating again), and
// calls flow; it returns how long that took from healed.
func (r *convergenceRun) heal(healed time.Time) time.Duration {
	r.t.Helper()
	natstest.WaitFor(r.t, 30*time.Second, func() error {
		routes := r.d.Table().Candidates("echo")
		if routes.Len() != 3 {
			return fmt.Errorf("%d instances routed", routes.Len())
		}
		for _, inst := range routes.Instances {
			if inst.Stale() || !inst.Entry().Updated.After(healed) {
				return fmt.Errorf("%s has not heartbeat since the fault healed", inst.ID)
			}
		}
		return nil
	})
	converged := time.Since(healed)
	before := r.ok.Load()
	natstest.WaitFor(r.t, 10*time.Second, func() error {
		if r.ok.Load() < before+50 {
			return errors.New("calls not flowing after the fault healed")
		}
		return nil
	})
	return converged
}

// check fails the test if the table ever routed fewer than the three
// live agents. NO_AGENT answers are logged, not failed: besides the table,
// the dispatcher passes over, for one heartbeat interval, an instance a
// delivery found without a subscription (its agent had not re-subscribed
// yet after the restart).
func (r *convergenceRun) check() {
	r.t.Helper()
	if n := r.minRoutes.Load(); n < 3 {
		r.t.Fatalf("the table routed only %d of the 3 live agents at one point (%s)", n, r.summary())
	}
}

func (r *convergenceRun) stop() {
	close(r.done)
	r.wg.Wait()
}

func TestRoutingSurvivesRegistryQuorumLoss(t *testing.T) {
	nodes := newRestartableCluster(t, 3)
	st := runStack(t, convergenceHB, natstest.Options(t.TempDir())) // only its log and helpers; the cluster serves
	natstest.Provision(t, natstest.Connect(t, nodes.servers[0]), streams.Topology{Heartbeat: convergenceHB, Replicas: 3})
	// Everyone on n1, which stays up, but the heartbeats, which go
	// through n2; n2 and n3 go.
	r := startConvergenceRun(t, st, nodes.servers[0].ClientURL(), nodes.servers[1].ClientURL(), 4*convergenceHB)
	nodes.stop(1)
	nodes.stop(2)
	down := time.Now()
	okBefore := r.ok.Load()
	// The fault: no quorum, so REACH_AGENTS takes no heartbeat, for
	// twice the record TTL.
	<-time.After(6 * convergenceHB)
	duringOK := r.ok.Load() - okBefore
	nodes.start(1)
	nodes.start(2)
	healed := time.Now()
	converged := r.heal(healed)
	r.stop()
	t.Logf("quorum lost for %v (TTL %v): %d calls answered during it; table fresh %v after the nodes restarted; totals: %s",
		healed.Sub(down).Round(time.Millisecond), 3*convergenceHB, duringOK, converged.Round(time.Millisecond), r.summary())
	r.check()
}

func TestRoutingSurvivesServerRestart(t *testing.T) {
	opts := natstest.Options(t.TempDir())
	opts.Port = natstest.FreePort(t)
	st := runStack(t, convergenceHB, opts)
	natstest.Provision(t, st.Conn(), streams.Topology{Heartbeat: convergenceHB}) // file store: records outlive the restart
	r := startConvergenceRun(t, st, st.Server.ClientURL(), st.Server.ClientURL(), 4*convergenceHB)
	natstest.Stop(st.Server)
	down := time.Now()
	// The fault: the server is gone for twice the record TTL.
	<-time.After(6 * convergenceHB)
	s, err := natstest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natstest.Stop(s) })
	healed := time.Now()
	converged := r.heal(healed)
	r.stop()
	t.Logf("server down %v (TTL %v): table fresh %v after the restart; totals: %s",
		healed.Sub(down).Round(time.Millisecond), 3*convergenceHB, converged.Round(time.Millisecond), r.summary())
	r.check()
}

// restartableCluster is a JetStream cluster on loopback whose nodes can
// be stopped and started again with their stores.
type restartableCluster struct {
	t       *testing.T
	opts    []*server.Options
	servers []*server.Server
}

func newRestartableCluster(t *testing.T, n int) *restartableCluster {
	t.Helper()
	c := &restartableCluster{t: t, opts: make([]*server.Options, n), servers: make([]*server.Server, n)}
	ports := make([]int, n)
	var routes []*url.URL
	for i := range ports {
		for ports[i] == 0 || contains(ports[:i], ports[i]) {
			ports[i] = natstest.FreePort(t)
		}
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	for i := range n {
		o := natstest.Options(t.TempDir())
		o.Port = natstest.FreePort(t)
		o.ServerName = fmt.Sprintf("n%d", i+1)
		o.Cluster = server.ClusterOpts{Name: "reach-conv", Host: "127.0.0.1", Port: ports[i]}
		o.Routes = routes
		c.opts[i] = o
		c.start(i)
	}
	t.Cleanup(func() {
		for _, s := range c.servers {
			if s != nil {
				natstest.Stop(s)
			}
		}
	})
	natstest.WaitFor(t, 20*time.Second, func() error {
		for _, s := range c.servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n {
				return nil
			}
		}
		return errors.New("no JetStream meta leader seeing every peer yet")
	})
	return c
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (c *restartableCluster) start(i int) {
	c.t.Helper()
	s, err := natstest.Start(c.opts[i])
	if err != nil {
		c.t.Fatal(err)
	}
	c.servers[i] = s
}

func (c *restartableCluster) stop(i int) {
	natstest.Stop(c.servers[i])
	c.servers[i] = nil
}
