package task

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/internal/natstest"
)

func TestCallStreamPrintsTheStorysChunks(t *testing.T) {
	url := startStack(t)
	srv := []string{"--server", url, "--timeout", "10s"}
	var r clitest.Result
	natstest.WaitFor(t, 20*time.Second, func() error { // the story agent registers beside echo
		r = clitest.RunCmd(t, RunCall, append(srv, "--stream", "story", `{"words": 5, "delay_ms": 1}`)...)
		if r.Code != cli.ExitOK {
			return fmt.Errorf("exit %d: %s", r.Code, r.Stderr)
		}
		return nil
	})
	if want := "Once upon a time a\n"; r.Stdout != want || !strings.Contains(r.Stderr, "status=FINISHED node=story-") {
		t.Errorf("call --stream: stdout %q (want %q), stderr %q", r.Stdout, want, r.Stderr)
	}
	r = clitest.RunCmd(t, RunCall, append(srv, "--stream", "--json", "story", `{"words": 3, "delay_ms": 1}`)...)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Code != cli.ExitOK || len(lines) != 4 {
		t.Fatalf("call --stream --json: exit %d, stdout %q", r.Code, r.Stdout)
	}
	var c StreamChunk
	if err := json.Unmarshal([]byte(lines[1]), &c); err != nil || c.Seq != "2" || string(c.Chunk) != `" upon"` {
		t.Errorf("the second line %s: %+v %v", lines[1], c, err)
	}
	var out CallOutput
	if err := json.Unmarshal([]byte(lines[3]), &out); err != nil || string(out.Result) != `"Once upon a"` {
		t.Errorf("the last line %s: %v", lines[3], err)
	}
	// The control: without --stream the same call prints the whole text.
	r = clitest.RunCmd(t, RunCall, append(srv, "story", `{"words": 3, "delay_ms": 1}`)...)
	if r.Code != cli.ExitOK || r.Stdout != "\"Once upon a\"\n" {
		t.Errorf("call: exit %d stdout %q", r.Code, r.Stdout)
	}
}
