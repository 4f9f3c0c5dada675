package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/demo"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/inspect"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/stack"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// startStack runs an embedded server with the topology, and the dispatcher
// and demo commands against it, until the test ends. It returns the URL.
func startStack(t *testing.T) string {
	t.Helper()
	return clitest.StartStack(t, stack.RunDispatcher, demo.Run, task.RunCall)
}

func TestCommands(t *testing.T) {
	url := startStack(t)
	srv := []string{"--server", url, "--timeout", "10s"}
	call := func(t *testing.T, args ...string) clitest.Result {
		t.Helper()
		return clitest.RunCmd(t, task.RunCall, append(append([]string{}, srv...), args...)...)
	}

	t.Run("call echo", func(t *testing.T) {
		r := call(t, "echo", `{"text":"hi"}`)
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		if want := "{\n  \"text\": \"hi\"\n}\n"; r.Stdout != want {
			t.Fatalf("stdout %q, want %q", r.Stdout, want)
		}
		for _, want := range []string{"status=FINISHED", "node=echo-", "attempt=1", "request_id=", "orchestration_id="} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr %q lacks %q", r.Stderr, want)
			}
		}
	})

	t.Run("call with a requirement nobody meets names the instances passed over", func(t *testing.T) {
		r := call(t, "--header", `Reach-Require={"labels":{"engine":"postgres"}}`, "echo", `{}`)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "error: NO_AGENT") ||
			!strings.Contains(r.Stderr, "excluded echo-") || !strings.Contains(r.Stderr, "declares nothing: cannot show label engine") {
			t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
		}
	})

	t.Run("call echo --json", func(t *testing.T) {
		r := call(t, "--json", "echo", `{"text":"hi","n":[1,2]}`)
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		var out struct {
			Result map[string]any `json:"result"`
			Meta   cli.CallMeta   `json:"meta"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
			t.Fatalf("stdout %q: %v", r.Stdout, err)
		}
		if out.Result["text"] != "hi" || out.Meta.Status != "FINISHED" || out.Meta.Attempt != 1 ||
			out.Meta.RequestID == "" || !strings.HasPrefix(out.Meta.Node, "echo-") {
			t.Fatalf("got %+v", out)
		}
	})

	t.Run("call slow", func(t *testing.T) {
		r := call(t, "slow", `{"job":7}`)
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		var out demo.SlowResult
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
			t.Fatal(err)
		}
		if out.SleptMS != 200 || out.Input.(map[string]any)["job"] != 7.0 {
			t.Fatalf("got %+v", out)
		}
	})

	t.Run("call math.add", func(t *testing.T) {
		r := call(t, "math.add", `{"a":1,"b":2}`)
		if r.Code != cli.ExitOK || strings.Join(strings.Fields(r.Stdout), "") != `{"sum":3}` {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
	})

	t.Run("call unicast", func(t *testing.T) {
		first := call(t, "--json", "echo", `{}`)
		var out struct{ Meta cli.CallMeta }
		if err := json.Unmarshal([]byte(first.Stdout), &out); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			r := call(t, "--json", "--agent", out.Meta.Node, "echo", `{}`)
			var again struct{ Meta cli.CallMeta }
			if err := json.Unmarshal([]byte(r.Stdout), &again); err != nil || again.Meta.Node != out.Meta.Node {
				t.Fatalf("unicast to %s answered by %+v (%v)", out.Meta.Node, again.Meta, err)
			}
		}
	})

	errTests := []struct {
		name string
		args []string
		code string
	}{
		{"unknown capability", []string{"nope", `{"text":"hi"}`}, "NO_AGENT"},
		{"unknown instance", []string{"--agent", "ghost-1", "echo", `{}`}, "NO_AGENT"},
		{"business rejection", []string{"math.add", `{"a":1}`}, "BIZ_REJECT"},
		{"malformed input", []string{"math.add", `{"a":"one","b":2}`}, "BAD_REQUEST"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, tt.args...)
			if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "error: "+tt.code+": ") {
				t.Fatalf("exit %d, stderr %q; want %d and error: %s", r.Code, r.Stderr, cli.ExitFail, tt.code)
			}
			r = call(t, append([]string{"--json"}, tt.args...)...)
			var out task.CallOutput
			if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || r.Code != cli.ExitFail ||
				out.Error == nil || out.Error.Code != streams.Code(tt.code) || out.Meta == nil || out.Meta.RequestID == "" {
				t.Fatalf("--json: exit %d, stdout %q (%v)", r.Code, r.Stdout, err)
			}
		})
	}

	t.Run("a mistyped capability gets the nearest one offered", func(t *testing.T) {
		// The dispatcher (call) and the fan-out service (broadcast) suggest
		// it, once.
		hint := "no routable instance offers ecoh; did you mean echo?"
		r := call(t, "ecoh", `{}`)
		if r.Code != cli.ExitFail || !strings.HasSuffix(r.Stderr, "error: NO_AGENT: "+hint+"\n") || strings.Count(r.Stderr, "did you mean") != 1 {
			t.Fatalf("call: exit %d, stderr %q", r.Code, r.Stderr)
		}
		r = clitest.RunCmd(t, task.RunBroadcast, append(append([]string{}, srv...), "--json", "ecoh", `{}`)...)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, hint) || !strings.Contains(r.Stdout, hint) {
			t.Fatalf("broadcast: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		// Nothing near: no guess; an unknown instance of a known capability
		// is no typo of the capability.
		for _, args := range [][]string{{"zzzzzz", `{}`}, {"--agent", "ghost-1", "echo", `{}`}} {
			if r := call(t, args...); r.Code != cli.ExitFail || strings.Contains(r.Stderr, "did you mean") {
				t.Fatalf("call %v: exit %d, stderr %q", args, r.Code, r.Stderr)
			}
		}
	})

	t.Run("payload from a file and from stdin", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "task.json")
		if err := os.WriteFile(file, []byte(`{"text":"from a file"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		r := call(t, "echo", "@"+file)
		if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, `"text": "from a file"`) {
			t.Fatalf("@file: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		clitest.SetPayloadInput(t, `{"text":"piped"}`)
		r = call(t, "echo", "-")
		if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, `"text": "piped"`) {
			t.Fatalf("stdin: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		clitest.SetPayloadInput(t, `{"text":"piped durable"}`)
		r = clitest.RunCmd(t, task.RunSubmit, append(append([]string{}, srv...), "--wait", "echo", "-")...)
		if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, `"text": "piped durable"`) {
			t.Fatalf("submit stdin: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
	})

	t.Run("bad payload sources", func(t *testing.T) {
		dir := t.TempDir()
		broken := filepath.Join(dir, "broken.json")
		if err := os.WriteFile(broken, []byte(`{"text":`), 0o600); err != nil {
			t.Fatal(err)
		}
		missing := filepath.Join(dir, "missing.json")
		for _, tt := range []struct{ arg, stdin, stderr string }{
			{arg: "@" + missing, stderr: "open " + missing + ": no such file or directory"},
			{arg: "@" + broken, stderr: "payload from file " + broken + " is not valid JSON"},
			{arg: "-", stdin: "", stderr: "payload from stdin is empty: want a JSON value"},
			{arg: "-", stdin: "nope", stderr: "payload from stdin is not valid JSON"},
		} {
			clitest.SetPayloadInput(t, tt.stdin)
			if r := call(t, "echo", tt.arg); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, tt.stderr) {
				t.Errorf("%s: exit %d, stderr %q; want %d and %q", tt.arg, r.Code, r.Stderr, cli.ExitUsage, tt.stderr)
			}
		}
	})

	t.Run("payload over max_payload", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "big.json")
		big := `{"blob":"` + strings.Repeat("x", 2<<20) + `"}`
		if err := os.WriteFile(file, []byte(big), 0o600); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("error: PAYLOAD_TOO_LARGE: payload from file %s is %d bytes: with the task's headers that is more than "+
			"the server's max_payload of %d bytes", file, len(big), 1<<20)
		for _, run := range []cli.RunFunc{task.RunCall, task.RunSubmit} {
			r := clitest.RunCmd(t, run, append(append([]string{}, srv...), "echo", "@"+file)...)
			if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", r.Code, r.Stderr, cli.ExitFail, want)
			}
			r = clitest.RunCmd(t, run, append(append([]string{}, srv...), "--json", "echo", "@"+file)...)
			var out task.CallOutput
			if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || r.Code != cli.ExitFail ||
				out.Error == nil || out.Error.Code != streams.CodePayloadTooLarge || !strings.Contains(out.Error.Message, strconv.Itoa(len(big))) {
				t.Fatalf("--json: exit %d, stdout %.300q (%v)", r.Code, r.Stdout, err)
			}
		}
	})

	t.Run("stats and breakers", func(t *testing.T) {
		for _, run := range []cli.RunFunc{inspect.RunStats, inspect.RunBreakers} {
			r := clitest.RunCmd(t, run, append(append([]string{}, srv...), "--json")...)
			var replies []json.RawMessage
			if err := json.Unmarshal([]byte(r.Stdout), &replies); err != nil || r.Code != cli.ExitOK || len(replies) != 1 {
				t.Fatalf("--json: exit %d, stdout %q (%v), stderr %q; want an array of one reply", r.Code, r.Stdout, err, r.Stderr)
			}
		}
		r := clitest.RunCmd(t, inspect.RunBreakers, srv...)
		if header := strings.SplitN(r.Stdout, "\n", 2)[0]; r.Code != cli.ExitOK || !strings.HasSuffix(header, "LATENCY (MOVING AVG)") {
			t.Fatalf("breakers: exit %d, header %q", r.Code, header)
		}
		r = clitest.RunCmd(t, inspect.RunBreakers, "--help")
		for _, want := range []string{"LATENCY (MOVING AVG) is the replica's moving geometric average", "weighs 0.05",
			"by a factor\nof e every 5 s", "reads - (with\n--json latency_ms 0) until the instance has 5 samples"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("breakers --help lacks %q", want)
			}
		}
	})

	t.Run("server from the environment", func(t *testing.T) {
		t.Setenv("AGENTREACH_SERVER", url)
		if r := clitest.RunCmd(t, task.RunCall, "echo", `{}`); r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
	})

	t.Run("agents --json", func(t *testing.T) {
		r := clitest.RunCmd(t, inspect.RunAgents, append(srv, "--json")...)
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		var entries []inspect.AgentJSON
		if err := json.Unmarshal([]byte(r.Stdout), &entries); err != nil {
			t.Fatalf("stdout %q: %v", r.Stdout, err)
		}
		types := map[string]int{}
		for _, e := range entries {
			types[e.Type]++
			if e.Updated.IsZero() || e.Revision == 0 || e.Status != "ready" || e.HeartbeatMS != 5000 {
				t.Errorf("entry %+v", e)
			}
		}
		if types["echo"] != 2 || types["slow"] != 1 || types["math"] != 1 || types["story"] != 1 || len(entries) != 5 {
			t.Fatalf("agent types %v, want 2 echo, 1 slow, 1 math, 1 story", types)
		}
	})

	t.Run("agents table", func(t *testing.T) {
		r := clitest.RunCmd(t, inspect.RunAgents, srv...)
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		if r.Code != cli.ExitOK || len(lines) != 6 {
			t.Fatalf("exit %d, stdout:\n%s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
		}
		for _, col := range []string{"ID", "TYPE", "CAPABILITIES", "ACTIVE/MAX", "STATUS", "HEARTBEAT AGE"} {
			if !strings.Contains(lines[0], col) {
				t.Errorf("header %q lacks %s", lines[0], col)
			}
		}
		if !strings.Contains(r.Stdout, "math.add") || !strings.Contains(r.Stdout, "0/8") {
			t.Errorf("table:\n%s", r.Stdout)
		}
	})
}

// TestNoDispatcher checks that stats and breakers fail when no dispatcher
// answers, instead of printing an empty table.
func TestNoDispatcher(t *testing.T) {
	s := natstest.RunServer(t)
	for _, tt := range []struct {
		run  cli.RunFunc
		verb string
	}{{inspect.RunStats, "stats"}, {inspect.RunBreakers, "breakers"}} {
		r := clitest.RunCmd(t, tt.run, "--server", s.ClientURL(), "--gather", "200ms")
		if want := "error: no dispatcher answered on reach.api." + tt.verb + " within 200ms"; r.Code != cli.ExitFail ||
			!strings.Contains(r.Stderr, want) || r.Stdout != "" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want %d and %q", tt.verb, r.Code, r.Stdout, r.Stderr, cli.ExitFail, want)
		}
	}
}

func TestCallNoServer(t *testing.T) {
	// A port nobody listens on: connecting fails at once.
	r := clitest.RunCmd(t, task.RunCall, "--server", "nats://127.0.0.1:1", "--timeout", "2s", "echo", "{}")
	if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "error: connect to nats://127.0.0.1:1") {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
}
