package inspect

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// TestStatsByDimension makes known calls and reads them back from
// REACH_EVENTS by capability, agent and type; the replica's counters
// (stats without --by) count the same tasks the same way.
func TestStatsByDimension(t *testing.T) {
	url := startStack(t) // its warm-up calls each demo capability once
	srv := []string{"--server", url}
	for range 4 {
		if r := clitest.RunCmd(t, task.RunCall, append(srv, "math.add", `{"a":1,"b":2}`)...); r.Code != cli.ExitOK {
			t.Fatalf("call: %d %s", r.Code, r.Stderr)
		}
	}
	if r := clitest.RunCmd(t, task.RunCall, append(srv, "math.add", `{}`)...); r.Code != cli.ExitFail { // BIZ_REJECT: a is missing
		t.Fatalf("call math.add {}: %d %s", r.Code, r.Stderr)
	}
	rows := func(by string) map[string]eventstats.Row {
		r := clitest.RunCmd(t, RunStats, append(srv, "--by", by, "--since", "10m", "--json")...)
		var s eventstats.Summary
		if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil || r.Code != cli.ExitOK {
			t.Fatalf("stats --by %s: %d %q %s (%v)", by, r.Code, r.Stdout, r.Stderr, err)
		}
		out := map[string]eventstats.Row{}
		for _, row := range s.Rows {
			out[row.Key] = row
		}
		return out
	}
	natstest.WaitFor(t, 10*time.Second, func() error { // records reach the stream in batches
		// The warm-up may have met NO_AGENT before the agents registered:
		// rejected when the name was not yet known, failed when it was.
		if got := rows("capability")["math.add"]; got.Tasks-got.Errors["NO_AGENT"] != 6 || got.Finished != 5 || got.Errors["BIZ_REJECT"] != 1 ||
			got.Rejected+got.Failed != 1+got.Errors["NO_AGENT"] || got.Rejected < 1 {
			return fmt.Errorf("math.add %+v, want 6 tasks besides NO_AGENT, 5 finished, 1 rejected (BIZ_REJECT), NO_AGENT rejected or failed", got)
		}
		return nil
	})
	if got := rows("type")["math"]; got.Tasks != 6 {
		t.Errorf("type math: %+v, want 6 tasks", got)
	}
	var echo int64
	for key, row := range rows("agent") {
		if strings.HasPrefix(key, "echo-") {
			echo += row.Tasks
		}
	}
	if echo != 1 {
		t.Errorf("echo instances: %d tasks, want 1 (the warm-up call)", echo)
	}
	r := clitest.RunCmd(t, RunStats, append(srv, "--by", "agent")...)
	if r.Code != cli.ExitOK || !containsAll(r.Stdout, "AGENT", "TASKS", "FINISHED", "REJECTED", "FAILED", "SUCCESS", "P95", "math-", "all") {
		t.Errorf("stats --by agent: %d %q", r.Code, r.Stdout)
	}
	natstest.WaitFor(t, 10*time.Second, func() error { // one replica, since its start: the same tasks as the record
		r := clitest.RunCmd(t, RunStats, append(srv, "--json")...)
		var replicas []dispatcher.Stats
		if err := json.Unmarshal([]byte(r.Stdout), &replicas); err != nil || len(replicas) != 1 {
			return fmt.Errorf("stats --json: %d %q (%v)", r.Code, r.Stdout, err)
		}
		r = clitest.RunCmd(t, RunStats, append(srv, "--by", "capability", "--since", "10m", "--json")...)
		var s eventstats.Summary
		if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
			return fmt.Errorf("stats --by --json: %d %q (%v)", r.Code, r.Stdout, err)
		}
		got, want := replicas[0].Counts, s.Total
		if got.Tasks != want.Tasks || got.Finished != want.Finished || got.Rejected != want.Rejected || got.Failed != want.Failed ||
			got.Retries != want.Retries {
			return fmt.Errorf("the replica counts %+v, the record %+v", got, want)
		}
		return nil
	})
	r = clitest.RunCmd(t, RunStats, srv...)
	if header := strings.SplitN(r.Stdout, "\n", 2)[0]; r.Code != cli.ExitOK || !containsAll(header, "TASKS", "FINISHED", "REJECTED", "FAILED", "BROADCASTS") {
		t.Errorf("stats: %d %q", r.Code, r.Stdout)
	}
	for _, args := range [][]string{{"--by", "region"}, {"--since", "1ms"}} {
		if r := clitest.RunCmd(t, RunStats, append(srv, args...)...); r.Code != cli.ExitUsage {
			t.Errorf("stats %v: exit %d, want %d", args, r.Code, cli.ExitUsage)
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
