//go:build chaos

package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/internal/natstest"
)

// bins holds the paths of the binaries the suite runs.
var bins struct{ natsServer, agentreach string }

func TestMain(m *testing.M) {
	if id := os.Getenv(envChildAgent); id != "" {
		if err := runChildAgent(id); err != nil {
			fmt.Fprintln(os.Stderr, "agent", id+":", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir := os.Getenv("AGENTREACH_CHAOS_BIN")
	if dir == "" {
		tmp, err := os.MkdirTemp("", "chaos-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer os.RemoveAll(tmp)
		// The nats-server of the module's pinned github.com/nats-io/nats-server/v2.
		for _, b := range [][2]string{
			{"nats-server", "github.com/nats-io/nats-server/v2"},
			{"agentreach", "github.com/agent-reach/agentreach/cmd/agentreach"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(tmp, b[0]), b[1])
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "building", b[1]+":", err)
				return 2
			}
		}
		dir = tmp
	}
	bins.natsServer = filepath.Join(dir, "nats-server")
	bins.agentreach = filepath.Join(dir, "agentreach")
	for _, p := range []string{bins.natsServer, bins.agentreach} {
		if _, err := os.Stat(p); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
	}
	return m.Run()
}

// proc is a child process the test can kill, stop and restart. Its output
// goes to a log file in the test's temp dir (printed when the test fails).
type proc struct {
	t     testing.TB
	name  string
	bin   string
	args  []string
	log   string
	ready string // a line containing this marks it ready; "" means at once
	ns    string // the network namespace it runs in; "" means the test's

	mu        sync.Mutex
	readyLine string
	cmd       *exec.Cmd
	exited    chan struct{}
	readyCh   chan struct{}
}

func newProc(t testing.TB, dir, name, ready, bin string, args ...string) *proc {
	if keep := os.Getenv("AGENTREACH_CHAOS_LOGS"); keep != "" {
		// Logs kept after the run, one directory per test.
		dir = filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p := &proc{t: t, name: name, bin: bin, args: args, ready: ready, log: filepath.Join(dir, name+".log")}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			if b, err := os.ReadFile(p.log); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				if len(lines) > 40 {
					lines = lines[len(lines)-40:]
				}
				t.Logf("last lines of %s:\n%s", p.name, strings.Join(lines, "\n"))
			}
		}
	})
	return p
}

// start runs the process and waits (bounded) until it prints its ready line.
func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(f, "---- start %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	if p.ns != "" {
		// ip netns exec enters the namespace and execs the binary: the
		// process signalled is the binary itself.
		cmd = exec.Command("ip", append([]string{"netns", "exec", p.ns, p.bin}, p.args...)...)
	}
	// The kernel kills the child if the test process dies first: no
	// exit path leaves a server or a dispatcher running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	readyCh := make(chan struct{})
	go func() {
		defer f.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := p.ready == ""
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f, line)
			if !seen && strings.Contains(line, p.ready) {
				seen = true
				p.mu.Lock()
				p.readyLine = line
				p.mu.Unlock()
				close(readyCh)
			}
		}
		_, _ = io.Copy(f, pr)
	}()
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited, p.readyCh = cmd, exited, readyCh
	p.mu.Unlock()
	if p.ready == "" {
		return
	}
	select {
	case <-readyCh:
	case <-exited:
		p.t.Fatalf("%s exited before it was ready (log %s)", p.name, p.log)
	case <-time.After(60 * time.Second):
		p.t.Fatalf("%s not ready within 60 s (log %s)", p.name, p.log)
	}
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		p.t.Fatalf("%s: not running", p.name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// kill SIGKILLs the process (continuing it first if stopped) and waits
// until it is gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	<-exited
}

// node is one nats-server of the cluster.
type node struct {
	*proc
	name               string
	host               string
	port, cport, hport int
	dir                string
}

func (n *node) url() string { return fmt.Sprintf("nats://%s:%d", n.host, n.port) }

// healthy reports nil when the node's /healthz says it is current
// (JetStream on, every asset it holds caught up).
func (n *node) healthy() error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s:%d/healthz", n.host, n.hport))
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: healthz %d %s", n.name, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// cluster is three nats-server processes with deploy/nats/common.conf's
// settings where they apply on loopback: R3 JetStream with sync_interval
// always in the hub's domain, cluster ping_interval 1 s and ping_max 2.
// TLS, operator mode and the leaf node listener are left out: they change
// nothing the faults exercise.
type cluster struct {
	t     testing.TB
	nodes []*node
}

const nodeConf = `server_name: %s
listen: %s:%d
http: %s:%d
max_payload: 1MB
lame_duck_grace_period: "10s"
lame_duck_duration: "30s"
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 4GB
  sync_interval: always
  domain: hub
}
cluster {
  name: agentreach
  listen: %s:%d
  routes: [%s]
  ping_interval: "1s"
  ping_max: 2
}
# Everyone without credentials is "app", in an account of its own with
# JetStream; the system account is there for the JetStream meta group's
# stepdown (the leader-isolation scenario moves every leader to one node).
accounts {
  APP: { jetstream: enabled, users: [{user: app, password: app}] }
  SYS: { users: [{user: sys, password: sys}] }
}
system_account: SYS
no_auth_user: app
`

// newCluster starts the cluster on loopback (net nil) or with node i in
// net's namespace i at its own address.
func newCluster(t testing.TB, net *network) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t}
	used := map[int]bool{}
	free := func() int {
		for {
			p := natstest.FreePort(t)
			if !used[p] {
				used[p] = true
				return p
			}
		}
	}
	for i := range 3 {
		n := &node{name: fmt.Sprintf("n%d", i+1)}
		if net == nil {
			n.host, n.port, n.cport, n.hport = "127.0.0.1", free(), free(), free()
		} else {
			n.host, n.port, n.cport, n.hport = net.addr(i), 4222, 6222, 8222
		}
		c.nodes = append(c.nodes, n)
	}
	var routes []string
	for _, n := range c.nodes {
		routes = append(routes, fmt.Sprintf("nats-route://%s:%d", n.host, n.cport))
	}
	for i, n := range c.nodes {
		n.dir = filepath.Join(dir, n.name)
		conf := filepath.Join(dir, n.name+".conf")
		body := fmt.Sprintf(nodeConf, n.name, n.host, n.port, n.host, n.hport, filepath.Join(n.dir, "jetstream"),
			n.host, n.cport, strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		n.proc = newProc(t, dir, n.name, "Server is ready", bins.natsServer, "-c", conf)
		if net != nil {
			n.proc.ns = net.nodes[i]
		}
	}
	for _, n := range c.nodes {
		n.start()
	}
	c.waitHealthy(60 * time.Second)
	return c
}

// waitHealthy waits (bounded) until every node is current.
func (c *cluster) waitHealthy(timeout time.Duration) {
	c.t.Helper()
	natstest.WaitFor(c.t, timeout, func() error {
		for _, n := range c.nodes {
			if err := n.healthy(); err != nil {
				return err
			}
		}
		return nil
	})
}

// metaLeader names the node that leads the JetStream meta group, as node
// i's monitoring endpoint sees it ("" while there is none).
func (c *cluster) metaLeader(i int) (string, error) {
	n := c.nodes[i]
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://%s:%d/jsz", n.host, n.hport))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var jsz struct {
		Meta struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return "", fmt.Errorf("%s /jsz: %w", n.name, err)
	}
	return jsz.Meta.Leader, nil
}

// sysURL is node i's client URL for the system account.
func (c *cluster) sysURL(i int) string {
	n := c.nodes[i]
	return fmt.Sprintf("nats://sys:sys@%s:%d", n.host, n.port)
}

// urls lists every node's client URL, from node first onwards.
func (c *cluster) urls(first int) []string {
	var u []string
	for i := range c.nodes {
		u = append(u, c.nodes[(first+i)%len(c.nodes)].url())
	}
	return u
}

// jszStreams is what the suite reads of a node's
// /jsz?accounts=true&streams=true: the meta leader, and each stream's
// leader and state as the node's replica holds it.
type jszStreams struct {
	Meta struct {
		Leader string `json:"leader"`
	} `json:"meta_cluster"`
	Accounts []struct {
		Streams []struct {
			Name    string `json:"name"`
			Cluster struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
			State struct {
				Msgs     uint64 `json:"messages"`
				FirstSeq uint64 `json:"first_seq"`
				LastSeq  uint64 `json:"last_seq"`
			} `json:"state"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

// streamViews is how each node sees the named streams: its replica's
// messages and sequences and the leader it knows, from its /jsz. A ledger
// that finds tasks without an outcome prints it, to tell a failed read from
// a stream that lost entries.
func (c *cluster) streamViews(names ...string) []string {
	var out []string
	hc := http.Client{Timeout: 2 * time.Second}
	for _, n := range c.nodes {
		resp, err := hc.Get(fmt.Sprintf("http://%s:%d/jsz?accounts=true&streams=true", n.host, n.hport))
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", n.name, err))
			continue
		}
		var jsz jszStreams
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		if err != nil {
			out = append(out, fmt.Sprintf("%s /jsz: %v", n.name, err))
			continue
		}
		for _, a := range jsz.Accounts {
			for _, s := range a.Streams {
				for _, want := range names {
					if s.Name == want {
						out = append(out, fmt.Sprintf("%s sees %s: %d messages, sequences %d–%d, leader %q",
							n.name, s.Name, s.State.Msgs, s.State.FirstSeq, s.State.LastSeq, s.Cluster.Leader))
					}
				}
			}
		}
	}
	return out
}
