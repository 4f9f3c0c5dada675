package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit/agenttest"
)

// brokenAgent is the raw agent, in process, with two faults: it never
// sends ACKED, and on Stop it quits at once instead of draining (no
// draining record, the tasks in flight dropped, the key left to expire).
type brokenAgent struct{ a *agent }

func (b *brokenAgent) Start(_ context.Context, env agenttest.Env) error {
	a, err := newAgent(env.ServerURL, env.AgentID)
	if err != nil {
		return err
	}
	a.publish = func(m *nats.Msg) error {
		if m.Header.Get(hStatus) == "ACKED" {
			return nil
		}
		return a.nc.PublishMsg(m)
	}
	if err := a.serve(); err != nil {
		a.close()
		return err
	}
	b.a = a
	return nil
}

func (b *brokenAgent) Stop(context.Context) error {
	b.a.close()
	return nil
}

// The suite catches an agent that breaks the protocol: exactly the rules
// ack and drain fail, and their messages say what was seen.
func TestBrokenAgentFails(t *testing.T) {
	report, err := agenttest.Check(t.Context(), &brokenAgent{})
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
	for rule, want := range map[string][]string{
		"ack":   {"rule ack: no ACKED, PROCESSING or result within 1s", "saw FINISHED after 1.5", "docs/conformance.md#ack"},
		"drain": {"rule drain: no put with \"status\": \"draining\"", "got no result", "saw nothing", "docs/conformance.md#drain"},
	} {
		for _, r := range report.Results {
			if r.Rule != rule {
				continue
			}
			for _, w := range want {
				if !strings.Contains(r.Message, w) {
					t.Errorf("the message of rule %s does not say %q:\n%s", rule, w, r.Message)
				}
			}
		}
	}
}
