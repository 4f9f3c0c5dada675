package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agent-reach/agentreach/internal/natstest"
)

// childServerEnv, set to a store directory, makes a process run a bench
// nats-server instead of its own work (see ServeChild).
const childServerEnv = "AGENTREACH_BENCH_NATS_DIR"

// ServerOptions are every bench server's options: loopback, a free port,
// JetStream stored in dir.
func ServerOptions(dir string) *server.Options {
	opts := natstest.Options(dir)
	opts.JetStreamMaxMemory = 1 << 30
	opts.JetStreamMaxStore = 8 << 30
	return opts
}

// ServeChild turns this process into a bench nats-server when it was
// started as one by a scenario that measures the server apart from itself
// (registry): it prints the server's client URL, serves until its standard
// input closes — when the scenario ends or its process dies — and exits.
// Otherwise it returns at once. Programs that run scenarios call it first
// thing in main (agentreach does) or TestMain.
func ServeChild() {
	dir := os.Getenv(childServerEnv)
	if dir == "" {
		return
	}
	if err := serveChild(dir, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench nats-server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveChild(dir string, in io.Reader, out io.Writer) error {
	s, err := natstest.Start(ServerOptions(dir))
	if err != nil {
		return err
	}
	defer natstest.Stop(s)
	if _, err := fmt.Fprintln(out, s.ClientURL()); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	return nil
}

// serverProcess is a bench nats-server in a process of its own: this
// program's executable, started with childServerEnv.
type serverProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
}

// startServerProcess starts a server process storing into dir and waits
// for its client URL.
func startServerProcess(dir string) (*serverProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The argument keeps a test binary whose TestMain does not call
	// ServeChild from running its tests again: it runs none and exits.
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childServerEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProcess{cmd: cmd, stdin: stdin}
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		got <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case p.url = <-got:
	case <-time.After(15 * time.Second):
	}
	if !strings.HasPrefix(p.url, "nats://") {
		p.Stop()
		return nil, fmt.Errorf("server process %s did not report its URL (got %q); a program running scenarios must call bench.ServeChild first", exe, p.url)
	}
	return p, nil
}

// Pid returns the process id.
func (p *serverProcess) Pid() int { return p.cmd.Process.Pid }

// Stop ends the process: it closes its input, waits up to 10 s, then
// kills it.
func (p *serverProcess) Stop() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
