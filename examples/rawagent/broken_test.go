package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit/agenttest"
)

// inProcess is the raw agent run in this process, with tune applied before
// it serves: a way to break it on purpose. Stop drains it, or with hardStop
// closes it at once.
type inProcess struct {
	tune     func(*agent)
	hardStop bool
	a        *agent
}

func (p *inProcess) Start(_ context.Context, env agenttest.Env) error {
	a, err := newAgent(env.ServerURL, env.AgentID, env.CredsFile)
	if err != nil {
		return err
	}
	p.tune(a)
	if err := a.serve(); err != nil {
		a.close()
		return err
	}
	p.a = a
	return nil
}

func (p *inProcess) Stop(context.Context) error {
	if p.hardStop {
		p.a.close()
		return nil
	}
	return p.a.drain()
}

// resultOf returns the result of rule in report.
func resultOf(t *testing.T, report *agenttest.Report, rule string) agenttest.Result {
	t.Helper()
	for _, r := range report.Results {
		if r.Rule == rule {
			return r
		}
	}
	t.Fatalf("no result for rule %s", rule)
	return agenttest.Result{}
}

// checkSays fails t unless the message of rule says each of want.
func checkSays(t *testing.T, report *agenttest.Report, rule string, want ...string) {
	t.Helper()
	r := resultOf(t, report, rule)
	for _, w := range want {
		if !strings.Contains(r.Message, w) {
			t.Errorf("the message of rule %s does not say %q:\n%s", rule, w, r.Message)
		}
	}
}

// The suite catches an agent that never sends ACKED and, on SIGTERM, quits
// at once instead of draining (no draining record, the tasks in flight
// dropped, the key left to expire): exactly the rules ack and drain fail,
// and their messages say what was seen.
func TestBrokenAgentFails(t *testing.T) {
	agent := &inProcess{hardStop: true, tune: func(a *agent) {
		a.publish = func(m *nats.Msg) error {
			if m.Header.Get(hStatus) == "ACKED" {
				return nil
			}
			return a.nc.PublishMsg(m)
		}
	}}
	report, err := agenttest.Check(t.Context(), agent)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, r := range report.Failed() {
		failed = append(failed, r.Rule)
		t.Log(r.Message)
	}
	if !slices.Equal(failed, []string{"ack", "drain"}) {
		t.Fatalf("failed rules %v, want [ack drain]", failed)
	}
	checkSays(t, report, "ack", "rule ack: no ACKED, PROCESSING or result within 1s", "saw FINISHED after", "docs/conformance.md#ack") // 1.5 s and whatever a loaded machine adds
	checkSays(t, report, "drain", `rule drain: no put with "status": "draining"`, "got no result", "saw nothing", "docs/conformance.md#drain")
}

// An agent that heartbeats every 2 s instead of the bucket's 1 s fails
// register (its heartbeat_ms) and heartbeat (its gaps).
func TestSlowHeartbeatFails(t *testing.T) {
	agent := &inProcess{tune: func(a *agent) { a.heartbeat = 2 * time.Second }}
	report, err := agenttest.Check(t.Context(), agent, agenttest.Only("register", "heartbeat"))
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Failed()) != 2 {
		t.Fatalf("failed %v, want register and heartbeat", report.Failed())
	}
	checkSays(t, report, "register", `"heartbeat_ms" is 2000, want 1000`)
	checkSays(t, report, "heartbeat", "no two gaps in a row between puts are within 1.5s", "the gaps were 2")
}
