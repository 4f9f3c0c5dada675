package agenttest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit/agenttest"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// The agentkit conformance agent keeps every rule.
func TestGoAgentConforms(t *testing.T) {
	agenttest.Run(t, agenttest.Command(agenttest.Build(t, "../../examples/goagent")))
}

// Stop reports how a process ended: a non-zero exit status after SIGTERM
// is an error, and a process that ignores SIGTERM is killed when Stop's
// context ends.
func TestCommandStop(t *testing.T) {
	// A process that exits is given all the time a loaded machine may
	// need: Stop returns as soon as it has exited.
	tests := []struct {
		name, script string
		within       time.Duration
		want         string
	}{
		{"clean", `trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done`, 30 * time.Second, ""},
		{"exit status", `trap 'exit 3' TERM; echo ready; while :; do sleep 0.05; done`, 30 * time.Second, "exited after SIGTERM with exit status 3"},
		{"ignores SIGTERM", `trap '' TERM; echo ready; while :; do sleep 0.05; done`, 500 * time.Millisecond, "did not exit within"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := agenttest.Command("sh", "-c", tt.script)
			if err := p.Start(t.Context(), agenttest.Env{}); err != nil {
				t.Fatal(err)
			}
			natstest.WaitFor(t, 5*time.Second, func() error { // the trap is set
				if out := p.(interface{ Output() string }).Output(); out != "ready\n" {
					return fmt.Errorf("output %q", out)
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(t.Context(), tt.within)
			defer cancel()
			err := p.Stop(ctx)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Stop: %v, want %q", err, tt.want)
			}
			if again := p.Stop(ctx); fmt.Sprint(again) != fmt.Sprint(err) {
				t.Fatalf("a second Stop returned %v, want the first result %v", again, err)
			}
		})
	}
}

// Only refuses a rule that does not exist before starting anything.
func TestOnlyUnknownRule(t *testing.T) {
	_, err := agenttest.Check(t.Context(), agenttest.Command("false"), agenttest.Only("ack", "dance"))
	if !errors.Is(err, agenttest.ErrUnknownRule) || !strings.Contains(err.Error(), `"dance"`) {
		t.Fatalf("Check: %v, want ErrUnknownRule naming \"dance\"", err)
	}
}
