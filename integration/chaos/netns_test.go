//go:build chaos

package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// ownerDir holds one file per network made by a run: named by its prefix,
// holding the pid of the test process that made it.
const ownerDir = "/run/agentreach-chaos"

// ours matches the namespaces the suite makes: ch<4 hex><role>.
var ours = regexp.MustCompile(`^(ch[0-9a-f]{4})(sw|n[0-9]+)$`)

// sweep removes what a killed earlier run left behind: the namespaces of
// every network whose owner is no longer running (or, for a network made
// before owners were marked, none of whose namespaces holds a process),
// after killing any process still inside them. A network whose owner runs
// — another run of the suite beside this one — is left alone.
func sweep(t testing.TB) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	groups := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if m := ours.FindStringSubmatch(f[0]); m != nil {
			groups[m[1]] = append(groups[m[1]], f[0])
		}
	}
	pidsIn := func(ns string) []int {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		var pids []int
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	for prefix, nss := range groups {
		mark := filepath.Join(ownerDir, prefix)
		if b, err := os.ReadFile(mark); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && running(pid) {
				continue
			}
		} else {
			busy := false
			for _, ns := range nss {
				busy = busy || len(pidsIn(ns)) > 0
			}
			if busy {
				continue
			}
		}
		for _, ns := range nss {
			for _, pid := range pidsIn(ns) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("removing the leftover namespace %s: %v: %s", ns, err, out)
			}
		}
		_ = exec.Command("ip", "link", "del", prefix+"h").Run()
		_ = os.Remove(mark)
		t.Logf("removed the namespaces %v an earlier run left behind", nss)
	}
}

// running reports whether pid is a live test binary.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), ".test")
}

// network is three network namespaces, one per node, each joined by a veth
// pair to a bridge in a fourth (the switch), and a veth pair from the
// test's own namespace to the switch: addresses only between them, in a
// /24 of 10.0.0.0/8 picked at random, no route out. Isolating a node takes
// its port off the bridge, with the link left up: packets vanish, as in a
// real partition, and no connection is reset. Every namespace (and with it
// every veth) is removed when the test ends, on every exit path.
type network struct {
	t      testing.TB
	prefix string   // names: <prefix>sw, <prefix>n1 …
	subnet string   // 10.a.b
	sw     string   // the switch's namespace
	nodes  []string // the nodes' namespaces
	host   string   // the test's veth
}

func newNetwork(t testing.TB, n int) *network {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("the partition scenarios need ip (Debian's iproute2): %v", err)
	}
	sweep(t)
	id := rand.IntN(1 << 16)
	w := &network{t: t, prefix: fmt.Sprintf("ch%04x", id), subnet: fmt.Sprintf("10.%d.%d", 200+id%50, id%250)}
	// The owner's mark: a later run removes these namespaces if this
	// process died without doing it (SIGKILL, a machine's OOM killer).
	if err := os.MkdirAll(ownerDir, 0o700); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(ownerDir, w.prefix)
	if err := os.WriteFile(mark, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	w.sw = w.prefix + "sw"
	w.host = w.prefix + "h"
	var made []string
	t.Cleanup(func() {
		// Deleting a namespace deletes its veths, and with each its peer
		// (the test's own veth included).
		for _, ns := range made {
			if err := w.run("netns", "del", ns); err != nil {
				t.Errorf("removing namespace %s: %v", ns, err)
			}
		}
		_ = w.run("link", "del", w.host) // already gone with its peer
		_ = os.Remove(mark)
	})
	mk := func(ns string) {
		if err := w.run("netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		made = append(made, ns)
		w.must("-n", ns, "link", "set", "lo", "up")
	}
	mk(w.sw)
	w.must("-n", w.sw, "link", "add", "br0", "type", "bridge")
	w.must("-n", w.sw, "link", "set", "br0", "up")
	for i := range n {
		ns := fmt.Sprintf("%sn%d", w.prefix, i+1)
		mk(ns)
		w.nodes = append(w.nodes, ns)
		if v := os.Getenv("AGENTREACH_CHAOS_RTO_MAX_MS"); v != "" {
			// An experiment, off by default: cap TCP's retransmission
			// backoff in the node's namespace (Linux 6.15 and later; at least 1000), so a
			// connection stalled by an outage shorter than the routes'
			// ping budget resumes within that cap of the heal.
			if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-w", "net.ipv4.tcp_rto_max_ms="+v).CombinedOutput(); err != nil {
				t.Fatalf("tcp_rto_max_ms in %s: %v: %s", ns, err, out)
			}
		}
		w.plug(ns, "eth0", fmt.Sprintf("s%d", i+1), w.addr(i))
	}
	// The test's own end: made here, its peer moved to the switch.
	w.must("link", "add", w.host, "type", "veth", "peer", "name", w.prefix+"x")
	w.must("link", "set", w.prefix+"x", "netns", w.sw)
	w.must("-n", w.sw, "link", "set", w.prefix+"x", "master", "br0")
	w.must("-n", w.sw, "link", "set", w.prefix+"x", "up")
	w.must("addr", "add", w.subnet+".100/24", "dev", w.host)
	w.must("link", "set", w.host, "up")
	return w
}

// plug joins namespace ns to the switch: inside, dev with addr; on the
// switch, port.
func (w *network) plug(ns, dev, port, addr string) {
	tmp := w.prefix + port
	w.must("link", "add", tmp, "type", "veth", "peer", "name", port)
	w.must("link", "set", tmp, "netns", ns)
	w.must("-n", ns, "link", "set", tmp, "name", dev)
	w.must("link", "set", port, "netns", w.sw)
	w.must("-n", w.sw, "link", "set", port, "master", "br0")
	w.must("-n", w.sw, "link", "set", port, "up")
	w.must("-n", ns, "addr", "add", addr+"/24", "dev", dev)
	w.must("-n", ns, "link", "set", dev, "up")
}

// addr is node i's address.
func (w *network) addr(i int) string { return fmt.Sprintf("%s.%d", w.subnet, i+1) }

// isolate cuts node i (and everything in its namespace) off the others.
func (w *network) isolate(i int) {
	w.must("-n", w.sw, "link", "set", fmt.Sprintf("s%d", i+1), "nomaster")
}

// heal plugs node i back in.
func (w *network) heal(i int) {
	w.must("-n", w.sw, "link", "set", fmt.Sprintf("s%d", i+1), "master", "br0")
}

func (w *network) run(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (w *network) must(args ...string) {
	w.t.Helper()
	if err := w.run(args...); err != nil {
		w.t.Fatal(err)
	}
}
