package agenttest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/agent-reach/agentreach/agentkit/agenttest"
)

// Check an agent process against two of the rules; a CI job for an agent
// in any language runs all of them (or `agentreach conformance -- <agent>`).
// The agent here is the agentkit conformance agent of this repository.
func ExampleCheck() {
	dir, err := os.MkdirTemp("", "agenttest-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "goagent")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/goagent").CombinedOutput(); err != nil {
		fmt.Printf("go build: %v\n%s", err, out)
		return
	}

	report, err := agenttest.Check(context.Background(), agenttest.Command(bin), agenttest.Only("register", "ack"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range report.Results {
		if r.Passed {
			fmt.Println("PASS", r.Rule)
		} else {
			fmt.Println("FAIL", r.Message)
		}
	}
	// Output:
	// PASS register
	// PASS ack
}
