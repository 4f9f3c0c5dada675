package agenttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// outputLimit is how much of a process's output Command keeps: the last
// outputLimit to 2 × outputLimit bytes.
const outputLimit = 64 << 10

// waitDelay bounds how long a process's output is still read after it
// exits (a child of it may hold the pipes open).
const waitDelay = 2 * time.Second

// Command returns the agent under test as a process: name run with args and
// this process's environment plus Env's variables (Env.Environ), so it
// reads AGENTREACH_SERVER and AGENTREACH_AGENT_ID (and, with auth,
// AGENTREACH_CREDS; an AGENTREACH_CREDS of this process is not passed on). Stop sends it SIGTERM and
// waits for it to exit: an exit status other than 0 is an error, and when
// Stop's context ends first the process is killed. Its stdout and stderr
// are kept (the last 64 KiB) for Report.Output.
//
// Run the agent's program directly, not through a launcher: the signal
// goes to the process started, and its exit status is the one checked.
// One launcher is understood, `go run [build flags] <package> [args]`:
// Start builds the package into a temporary directory first and runs the
// binary (`go run` would die of the SIGTERM without passing it on). Give
// build flags as -flag=value.
func Command(name string, args ...string) Agent {
	return &process{name: name, args: args, done: make(chan struct{})}
}

// goRun splits `go run` arguments into what to build and the program's
// arguments; ok is false for any other command.
func goRun(name string, args []string) (build, rest []string, ok bool) {
	if filepath.Base(name) != "go" || len(args) < 2 || args[0] != "run" {
		return nil, nil, false
	}
	for i, a := range args[1:] {
		if !strings.HasPrefix(a, "-") {
			return args[1 : i+2], args[i+2:], true
		}
	}
	return nil, nil, false
}

// process is an agent run as a child process.
type process struct {
	name string
	args []string
	tmp  string // where a `go run` package was built; removed by Stop
	out  tailBuffer

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error         // its exit, once done is closed

	stopOnce sync.Once
	stopErr  error
}

// Start starts the process; it does not wait for it to register.
func (p *process) Start(_ context.Context, env Env) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return ErrAlreadyStarted
	}
	name, args := p.name, p.args
	if build, rest, ok := goRun(name, args); ok {
		dir, err := os.MkdirTemp("", "agenttest-")
		if err != nil {
			return err
		}
		p.tmp = dir
		bin := filepath.Join(dir, "agent-under-test")
		out, err := exec.Command(name, append([]string{"build", "-o", bin}, build...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("go build %s (for go run): %w\n%s", strings.Join(build, " "), err, out)
		}
		name, args = bin, rest
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(inherited(), env.Environ()...)
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		if p.tmp != "" {
			_ = os.RemoveAll(p.tmp)
		}
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd = cmd
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return nil
}

// inherited is this process's environment for the agent's, without
// AGENTREACH_CREDS: the agent gets credentials only from Env (with auth),
// never ones of whoever runs the suite.
func inherited() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, EnvCreds+"=") })
}

// Stop sends SIGTERM and waits for the process to exit, or kills it when
// ctx ends first. Calling it again returns the first result.
func (p *process) Stop(ctx context.Context) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	p.stopOnce.Do(func() {
		if p.tmp != "" {
			defer os.RemoveAll(p.tmp)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			p.stopErr = fmt.Errorf("send SIGTERM to %s: %w", p.name, err)
		}
		start := time.Now()
		select {
		case <-p.done:
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-p.done
			p.stopErr = fmt.Errorf("%s did not exit within %v of SIGTERM, so it was killed", p.name, time.Since(start).Round(time.Millisecond))
			return
		}
		if p.stopErr == nil && p.waitErr != nil {
			p.stopErr = fmt.Errorf("%s exited after SIGTERM with %w", p.name, p.waitErr)
		}
	})
	return p.stopErr
}

// exited is closed when the process has ended; exitErr then says how.
func (p *process) exited() <-chan struct{} { return p.done }

// exitErr says how the process ended, once exited is closed.
func (p *process) exitErr() error {
	if p.waitErr == nil {
		return errors.New("exit status 0")
	}
	return p.waitErr
}

// Output returns the last 64 KiB (at least) of what the process printed.
func (p *process) Output() string { return p.out.String() }

// tailBuffer keeps the last outputLimit to 2 × outputLimit bytes written to
// it; it is safe for concurrent use.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*outputLimit {
		t.b = append(t.b[:0], t.b[len(t.b)-outputLimit:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Build compiles the main package pkg (a path as `go build` takes it, e.g.
// "./cmd/myagent") into the test's temporary directory and returns the
// binary, for Command. It fails the test when the build fails.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent-under-test")
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("agenttest: go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
