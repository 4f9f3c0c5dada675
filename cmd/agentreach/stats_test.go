package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// TestStatsByDimension makes known calls and reads them back from
// REACH_EVENTS by capability, agent and type.
func TestStatsByDimension(t *testing.T) {
	url := startStack(t) // its warm-up calls each demo capability once
	srv := []string{"--server", url}
	for range 4 {
		if r := runCmd(t, runCall, append(srv, "math.add", `{"a":1,"b":2}`)...); r.code != exitOK {
			t.Fatalf("call: %d %s", r.code, r.stderr)
		}
	}
	if r := runCmd(t, runCall, append(srv, "math.add", `{}`)...); r.code != exitFail { // BIZ_REJECT: a is missing
		t.Fatalf("call math.add {}: %d %s", r.code, r.stderr)
	}
	rows := func(by string) map[string]eventstats.Row {
		r := runCmd(t, runStats, append(srv, "--by", by, "--since", "10m", "--json")...)
		var s eventstats.Summary
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != exitOK {
			t.Fatalf("stats --by %s: %d %q %s (%v)", by, r.code, r.stdout, r.stderr, err)
		}
		out := map[string]eventstats.Row{}
		for _, row := range s.Rows {
			out[row.Key] = row
		}
		return out
	}
	natstest.WaitFor(t, 10*time.Second, func() error { // records reach the stream in batches
		// The warm-up may have met NO_AGENT before the agents registered.
		if got := rows("capability")["math.add"]; got.Tasks-got.Errors["NO_AGENT"] != 6 || got.Finished != 5 || got.Errors["BIZ_REJECT"] != 1 {
			return fmt.Errorf("math.add %+v, want 6 tasks besides NO_AGENT, 5 succeeded, 1 BIZ_REJECT", got)
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
	r := runCmd(t, runStats, append(srv, "--by", "agent")...)
	if r.code != exitOK || !containsAll(r.stdout, "AGENT", "TASKS", "SUCCESS", "P95", "math-", "all") {
		t.Errorf("stats --by agent: %d %q", r.code, r.stdout)
	}
	for _, args := range [][]string{{"--by", "region"}, {"--since", "1ms"}} {
		if r := runCmd(t, runStats, append(srv, args...)...); r.code != exitUsage {
			t.Errorf("stats %v: exit %d, want %d", args, r.code, exitUsage)
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
