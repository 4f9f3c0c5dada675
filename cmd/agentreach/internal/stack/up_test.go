package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/inspect"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

func TestUp(t *testing.T) {
	before := clitest.Goroutines()
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	url := "nats://" + listen

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr clitest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- RunUp(ctx, []string{"--nats-listen", listen, "--data-dir", dir, "--demo", "--slow-delay", "100ms", "--log-level", "warn", "--http", "off",
			"--max-payload", strconv.Itoa(4 << 20)}, &stdout, &stderr)
	}()

	clitest.WaitOutput(t, &stdout, "Agent-Reach is up") // printed once everything runs
	waitCallable(t, url)
	r := clitest.RunCmd(t, task.RunCall, "--server", url, "echo", `{"text":"hi"}`)
	if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, `"text": "hi"`) {
		t.Fatalf("call echo: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	// --max-payload raised the server's limit: 2 MiB fits.
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, []byte(`{"blob":"`+strings.Repeat("x", 2<<20)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = clitest.RunCmd(t, task.RunCall, "--server", url, "--json", "echo", "@"+big)
	var out task.CallOutput
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || r.Code != cli.ExitOK || len(out.Result) < 2<<20 {
		t.Fatalf("call echo @big.json: exit %d, %d result bytes (%v), stderr %q", r.Code, len(out.Result), err, r.Stderr)
	}
	// Broadcast and fan-out run beside the dispatcher.
	r = clitest.RunCmd(t, task.RunBroadcast, "--server", url, "--json", "echo", `{"text":"all"}`)
	var agg struct {
		Expected int  `json:"expected"`
		Complete bool `json:"complete"`
		Replies  []struct {
			Result map[string]any `json:"result"`
		} `json:"replies"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &agg); err != nil || r.Code != cli.ExitOK || !agg.Complete || agg.Expected != 2 || // the two demo echo instances

		agg.Replies[0].Result["text"] != "all" {
		t.Fatalf("broadcast echo: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	fan := filepath.Join(dir, "fan.json")
	if err := os.WriteFile(fan, []byte(`{"branches": [{"name": "e", "capability": "echo", "payload": {"text": "x"}},
		{"name": "m", "capability": "math.add", "payload": {"a": 1, "b": 2}}], "mode": "all"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = clitest.RunCmd(t, task.RunFanOut, "--server", url, fan)
	if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, `{"sum":3}`) || !strings.Contains(r.Stderr, "complete=true") {
		t.Fatalf("fanout: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = clitest.RunCmd(t, inspect.RunAgents, "--server", url, "--json")
	var entries []inspect.AgentJSON
	if err := json.Unmarshal([]byte(r.Stdout), &entries); err != nil || len(entries) != 5 { // echo ×2, slow, math, story
		t.Fatalf("agents --json: exit %d, %d entries (%v), stderr %q", r.Code, len(entries), err, r.Stderr)
	}
	for _, want := range []string{"Agent-Reach is up", url, "agentreach call --server " + url + ` echo '{"text":"hi"}'`,
		"nats -s " + url + ` req reach.task.echo '{"text":"hi"}'`, "nats -s " + url + " kv ls REACH_AGENTS"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, stdout.String())
		}
	}

	cancel()
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Fatalf("runUp exited %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runUp did not stop within 30s")
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Errorf("no JetStream store in the data dir: %v", err)
	}
	// The port is free again and nothing is left running.
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("port still taken after up stopped: %v", err)
	}
	l.Close()
	clitest.CheckNoLeaks(t, before)
}

func TestUpPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	next := fmt.Sprintf("127.0.0.1:%d", port%65535+1)
	// The error names the flag and the environment variable, which also
	// reaches `make run`; the taken port also comes from that variable.
	for _, env := range []bool{false, true} {
		args := []string{"--data-dir", t.TempDir(), "--http", "off"}
		if env {
			t.Setenv("AGENTREACH_NATS_LISTEN", l.Addr().String())
		} else {
			args = append(args, "--nats-listen", l.Addr().String())
		}
		r := clitest.RunCmd(t, RunUp, args...)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "error: "+l.Addr().String()+" is in use: move NATS with --nats-listen or "+
			"AGENTREACH_NATS_LISTEN="+next+" make run (") || !strings.Contains(r.Stderr, "a second stack also needs its own --data-dir") {
			t.Fatalf("from the environment %t: exit %d, stderr %q", env, r.Code, r.Stderr)
		}
	}
}

// upRun is `up` running in a goroutine of the test.
type upRun struct {
	stdout, stderr *clitest.SyncBuffer
	done           chan int
	cancel         context.CancelFunc
	code           int
	exited         bool
}

// startUp runs `up` with args until the test ends.
func startUp(t *testing.T, args ...string) *upRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := &upRun{stdout: new(clitest.SyncBuffer), stderr: new(clitest.SyncBuffer), done: make(chan int, 1), cancel: cancel}
	// No HTTP unless args ask for it (the last --http wins): port 8080 may be anyone's.
	args = append([]string{"--http", "off"}, args...)
	go func() { u.done <- RunUp(ctx, append(args, "--log-level", "warn"), u.stdout, u.stderr) }()
	t.Cleanup(func() { u.Stop(t) })
	return u
}

// wait waits up to timeout for up to exit and reports its exit code.
func (u *upRun) wait(timeout time.Duration) (code int, exited bool) {
	if !u.exited {
		select {
		case u.code = <-u.done:
			u.exited = true
		case <-time.After(timeout):
		}
	}
	return u.code, u.exited
}

// stop stops up and returns its exit code; it fails t when up does not
// stop within a bound.
func (u *upRun) Stop(t *testing.T) int {
	u.cancel()
	code, exited := u.wait(30 * time.Second)
	if !exited {
		t.Fatal("up did not stop within 30s")
	}
	return code
}

// TestUpDataDirLock checks that a second `up` on the data dir of a running
// one exits at once, naming the dir and the holder, without costing the
// first any durable task it accepted; and that stopping releases the dir.
func TestUpDataDirLock(t *testing.T) {
	before := clitest.Goroutines()
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	url := "nats://" + listen
	first := startUp(t, "--nats-listen", listen, "--data-dir", dir, "--demo", "--slow-delay", "500ms")
	clitest.WaitOutput(t, first.stdout, "Agent-Reach is up")

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client, err := agentkit.NewClient(nc, agentkit.WithJSON())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []string
	for i := range 30 {
		capability := "echo"
		if i%10 == 0 {
			capability = "slow" // still running when the second stack tries
		}
		id, err := client.Submit(ctx, capability, []byte(fmt.Sprintf(`{"n":%d}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}

	start := time.Now()
	second := startUp(t, "--nats-listen", "127.0.0.1:0", "--data-dir", dir, "--demo")
	code, exited := second.wait(20 * time.Second) // a safety bound; it takes milliseconds
	if !exited {
		t.Fatalf("a second up on the same --data-dir still runs after 20s; stderr:\n%s", second.stderr.String())
	}
	t.Logf("the second up exited %d after %v", code, time.Since(start))
	want := fmt.Sprintf("error: --data-dir %s is in use by process %d (another agentreach up?); stop it or choose another --data-dir",
		dir, os.Getpid())
	if code != cli.ExitFail || !strings.Contains(second.stderr.String(), want) {
		t.Fatalf("second up: exit %d, stderr %q; want %d and %q", code, second.stderr.String(), cli.ExitFail, want)
	}

	for _, id := range ids {
		if res, err := client.Wait(ctx, id); err != nil || res.Status != streams.StatusFinished {
			t.Fatalf("task %s accepted by the first stack: %v, %v", id, res, err)
		}
	}
	if code := first.Stop(t); code != cli.ExitOK {
		t.Fatalf("first up exited %d; stderr:\n%s", code, first.stderr.String())
	}

	// Released: the next up on the dir starts.
	third := startUp(t, "--nats-listen", "127.0.0.1:0", "--data-dir", dir)
	clitest.WaitOutput(t, third.stdout, "Agent-Reach is up")
	if code := third.Stop(t); code != cli.ExitOK {
		t.Fatalf("third up exited %d; stderr:\n%s", code, third.stderr.String())
	}
	nc.Close()
	clitest.CheckNoLeaks(t, before)
}
