package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/document"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/internal/natstest"
)

const demoFlow = `
name: demo.flow
params: {big: 10}
steps:
  - name: add
    call: math.add
    input: {a: $input.a, b: $input.b}
  - name: big
    when: {field: $steps.add.result.sum, op: gt, value: $params.big}
    call: echo
    input: {note: big, sum: $steps.add.result.sum}
  - name: check
    call: math.add
    input: {a: $steps.add.result.sum}
    on_failure: skip
output: {sum: $steps.add.result.sum}
`

func TestWorkflowAndRunsCommands(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("flow.yaml", demoFlow)
	bad := file("bad.yaml", strings.Replace(demoFlow, "op: gt", "op: above", 1))
	shadow := file("shadow.yaml", "name: echo\nsteps:\n  - {name: a, call: math.add}\n")

	// Validation needs no server, and names the step and field.
	r := clitest.RunCmd(t, document.RunWorkflow, "validate", good)
	if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, "a valid workflow demo.flow (3 steps)") {
		t.Fatalf("validate: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
	r = clitest.RunCmd(t, document.RunWorkflow, "validate", bad)
	if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, `step "big" (steps[1]).when.op: "above" is not a comparison`) {
		t.Fatalf("validate bad: exit %d, %q", r.Code, r.Stderr)
	}

	url := startStack(t)
	srv := []string{"--server", url, "--timeout", "10s"}
	wf := func(args ...string) clitest.Result {
		return clitest.RunCmd(t, document.RunWorkflow, append(append([]string{}, srv...), args...)...)
	}
	runs := func(args ...string) clitest.Result {
		return clitest.RunCmd(t, document.RunRuns, append(append([]string{}, srv...), args...)...)
	}

	if r := wf("put", bad); r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "is not a comparison") {
		t.Fatalf("put bad: exit %d, %q", r.Code, r.Stderr)
	}
	if r := wf("put", good); r.Code != cli.ExitOK || !strings.Contains(r.Stdout, "put workflow demo.flow (revision") || strings.Contains(r.Stderr, "warning") {
		t.Fatalf("put: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := wf("put", shadow); r.Code != cli.ExitOK || !strings.Contains(r.Stderr, "warning: workflow echo shadows the capability echo of instance echo-") {
		t.Fatalf("put a workflow named like a capability: exit %d, %q", r.Code, r.Stderr)
	}
	if r := wf("rm", "echo"); r.Code != cli.ExitOK || !strings.Contains(r.Stdout, "removed workflow echo") {
		t.Fatalf("rm: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := wf("rm", "echo"); r.Code != cli.ExitFail || !strings.Contains(r.Stderr, `holds no workflow "echo"`) {
		t.Fatalf("rm again: exit %d, %q", r.Code, r.Stderr)
	}
	if r := wf("ls"); r.Code != cli.ExitOK || !strings.Contains(r.Stdout, "demo.flow") || !strings.Contains(r.Stdout, "add,big,check") {
		t.Fatalf("ls: exit %d, %q", r.Code, r.Stdout)
	}
	if r := wf("show", "demo.flow"); r.Code != cli.ExitOK || !strings.Contains(r.Stdout, "call: math.add") || !strings.Contains(r.Stdout, "$steps.add.result.sum") {
		t.Fatalf("show: exit %d, %q", r.Code, r.Stdout)
	}

	// A call runs it as soon as the dispatcher has the definition.
	var out struct {
		Result map[string]any `json:"result"`
		Meta   cli.CallMeta   `json:"meta"`
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		r := clitest.RunCmd(t, task.RunCall, append(append([]string{}, srv...), "--json", "demo.flow", `{"a": 7, "b": 8}`)...)
		return json.Unmarshal([]byte(r.Stdout), &out)
	})
	if out.Result["sum"] != 15.0 || out.Meta.Status != "FINISHED" {
		t.Fatalf("call demo.flow: %+v", out)
	}
	// A durable run is recorded in REACH_RUNS step by step.
	r = clitest.RunCmd(t, task.RunSubmit, append(append([]string{}, srv...), "--json", "--wait", "demo.flow", `{"a": 7, "b": 8}`)...)
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.Result["sum"] != 15.0 {
		t.Fatalf("submit --wait demo.flow: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
	id := out.Meta.RequestID

	natstest.WaitFor(t, 10*time.Second, func() error {
		r := runs("ls", "--workflow", "demo.flow", "--status", "finished")
		if !strings.Contains(r.Stdout, id) {
			return os.ErrNotExist
		}
		return nil
	})
	r = runs("show", id)
	for _, want := range []string{
		"workflow      demo.flow (version", "tier          durable", "status        finished, outcome result",
		"add    done     math.add    math-",
		"big    done", "when $steps.add.result.sum (15) gt $params.big (10) → true",
		"check  skipped", "skipped: it failed: BIZ_REJECT", `error BIZ_REJECT: math.add needs field "b"`,
		"big    when_true  $steps.add.result.sum (15) gt $params.big (10) → true",
		`check  skip       step check failed (BIZ_REJECT: math.add needs field "b"): on_failure skips it`,
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("runs show lacks %q:\n%s", want, r.Stdout)
		}
	}
	r = runs("--json", "show", id)
	var rec struct {
		Steps []struct {
			Name, Status string
		} `json:"steps"`
		Decisions []struct{ Kind string } `json:"decisions"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rec); err != nil || len(rec.Steps) != 3 || len(rec.Decisions) != 2 {
		t.Fatalf("runs show --json: %v, %+v", err, rec)
	}
	if r := runs("show", "no-such-run"); r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "holds no run no-such-run") {
		t.Fatalf("runs show of no run: exit %d, %q", r.Code, r.Stderr)
	}
	if r := runs("ls", "--status", "lost"); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, `unknown status "lost"`) {
		t.Fatalf("runs ls --status lost: exit %d, %q", r.Code, r.Stderr)
	}
}

// The example workflows the README runs stay valid.
func TestExampleWorkflowsValidate(t *testing.T) {
	files, err := filepath.Glob("../../examples/workflows/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example workflows: %v", err)
	}
	for _, f := range files {
		if r := clitest.RunCmd(t, document.RunWorkflow, "validate", f); r.Code != cli.ExitOK {
			t.Errorf("%s: exit %d, %q", f, r.Code, r.Stderr)
		}
	}
}
