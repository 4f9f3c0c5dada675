//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// TestNodeBounce SIGKILLs a nats-server under load and restarts it on the
// same ports and store. The heal is the node current again and every
// JetStream group led again: the groups the node led elect new leaders
// only after NATS's election timeout (4–9 s, compiled into nats-server),
// whatever Agent-Reach does, and the scenario prints how long that took.
func TestNodeBounce(t *testing.T) {
	scenario(t, "node bounce", func(s *stack) {
		n := s.c.nodes[0] // dispatcher-1's node, and agent 1's and 4's
		killed := time.Now()
		n.kill()
		n.start()
		s.c.waitHealthy(2 * time.Minute)
		back := time.Since(killed)
		natstest.WaitFor(t, 2*time.Minute, s.led)
		t.Logf("node bounce: the node current again %v after the kill, every JetStream group led %v after it",
			back.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	})
}

// TestDispatcherKill SIGKILLs a dispatcher process under load and starts
// it again.
func TestDispatcherKill(t *testing.T) {
	scenario(t, "dispatcher SIGKILL", func(s *stack) {
		d := s.dispatchers[0]
		d.kill()
		d.start()
	})
}

// TestDispatcherStop freezes a dispatcher for 10 s (SIGSTOP), then lets it
// run again (SIGCONT): the heal is the SIGCONT.
func TestDispatcherStop(t *testing.T) {
	scenario(t, "dispatcher SIGSTOP 10 s", func(s *stack) {
		d := s.dispatchers[0]
		d.signal(syscall.SIGSTOP)
		// The fault's length, not a synchronisation: a frozen process
		// for as long as a long GC pause or a stalled VM.
		time.Sleep(10 * time.Second)
		d.signal(syscall.SIGCONT)
	})
}

// TestAgentsKilledTogether kills every agent at once, waits until
// REACH_AGENTS has forgotten them all (three missed heartbeats), and starts
// them all again under the same ids together: a reconnect storm into an
// empty table.
func TestAgentsKilledTogether(t *testing.T) {
	scenario(t, "agents killed together", func(s *stack) {
		s.agents.killAll()
		natstest.WaitFor(t, time.Minute, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			kv, err := s.js.KeyValue(ctx, streams.BucketAgents)
			if err != nil {
				return err
			}
			lister, err := kv.ListKeys(ctx)
			if err != nil {
				return err
			}
			var keys []string
			for k := range lister.Keys() {
				keys = append(keys, k)
			}
			if len(keys) > 0 {
				return fmt.Errorf("REACH_AGENTS still lists %v", keys)
			}
			return nil
		})
		errs := make(chan error, len(s.agents.ids))
		for i := range s.agents.ids {
			go func() { errs <- s.agents.start(i) }()
		}
		for range s.agents.ids {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestMinorityPartition cuts node 3 off — with a dispatcher and two agents
// in its namespace — for 20 s under load, then heals the link.
func TestMinorityPartition(t *testing.T) {
	net := newNetwork(t, 3)
	scenarioOn(t, "minority partition", net, nil, func(s *stack) {
		net.isolate(2)
		s.tl.mark("node 3 cut off")
		// The fault's length: long enough for the routes' pings (1 s × 2)
		// to drop the dead routes and the minority's agent records to
		// expire (3 heartbeats).
		time.Sleep(20 * time.Second)
		net.heal(2)
		s.tl.mark("node 3 plugged in")
	})
}

// TestLeaderIsolation moves the leadership of the JetStream meta group and
// of every stream (REACH_TASKS, the buckets, the outcome streams) to node
// 3, then cuts node 3 off — with its dispatcher and two agents — for 20 s
// under load: the majority must elect new leaders before it can accept a
// task or store a heartbeat.
func TestLeaderIsolation(t *testing.T) {
	net := newNetwork(t, 3)
	scenarioOn(t, "leader isolation", net, func(s *stack) { s.leadersTo(2) }, func(s *stack) {
		net.isolate(2)
		s.tl.mark("node 3 cut off")
		// The fault's length, as the minority partition's.
		time.Sleep(20 * time.Second)
		net.heal(2)
		s.tl.mark("node 3 plugged in")
	})
}

// flaps are the flapping link's outages: some shorter than the routes'
// ping budget (1 s × 2), some longer, with 2 s of link between them.
var flaps = []time.Duration{1 * time.Second, 3 * time.Second, 7 * time.Second, 2 * time.Second, 4 * time.Second}

// TestFlappingLink takes node 3's link (its routes, and its dispatcher's
// and agents' connections) down and up again five times under load.
func TestFlappingLink(t *testing.T) {
	net := newNetwork(t, 3)
	scenarioOn(t, "flapping link", net, nil, func(s *stack) {
		for i, d := range flaps {
			if i > 0 {
				// The link's time up between two outages.
				time.Sleep(2 * time.Second)
			}
			net.isolate(2)
			s.tl.mark("node 3 cut off")
			// The outage's length.
			time.Sleep(d)
			net.heal(2)
			s.tl.mark("node 3 plugged in")
		}
	})
}
