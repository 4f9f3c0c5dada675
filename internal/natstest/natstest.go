// Package natstest starts embedded nats-servers for tests: one helper, port
// -1 (or FreePort's, where the port must be known before the start or kept
// across a restart), a temporary store, shut down by t.Cleanup. It also
// holds the bounded polling helper every test uses instead of sleeping, and
// LogBuffer, the sink for a logger whose lines a test reads.
package natstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// Options returns server options for a loopback server on a random port with
// JetStream in dir.
func Options(dir string) *server.Options {
	return &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		NoLog:     true,
		NoSigs:    true,
		JetStream: true,
		StoreDir:  dir,
		// A reservation too, not memory used: room for the memory
		// topology's limits (about 210 MiB) twice over — concurrent
		// provisioning reserves a stream being created more than once.
		JetStreamMaxMemory: 512 << 20,
		// Reservations, not disk used: room for the file topology's limits
		// (about 2.9 GiB) and a few streams of a test's own.
		JetStreamMaxStore: 4 << 30,
	}
}

// RunServer starts an embedded JetStream server in a temporary directory and
// shuts it down when the test ends.
func RunServer(tb testing.TB) *server.Server {
	tb.Helper()
	return RunServerWith(tb, Options(tb.TempDir()))
}

// RunServerWith starts an embedded server with opts and shuts it down when
// the test ends. Shutting it down earlier is harmless.
func RunServerWith(tb testing.TB, opts *server.Options) *server.Server {
	tb.Helper()
	s, err := Start(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { Stop(s) })
	return s
}

// Start starts an embedded server with opts and waits until it takes
// connections; for code without a testing.TB (examples, benchmarks).
func Start(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natstest: new server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("natstest: server not ready in 10s")
	}
	return s, nil
}

// Stop shuts s down and waits for it; stopping twice is harmless.
func Stop(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// Connect opens a client connection to s that is closed when the test ends.
func Connect(tb testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	// The connect (a TLS handshake included) gets 10 s, not nats.go's 2:
	// a test beside a busy machine's other work still connects. Later
	// options may set another.
	nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.Timeout(10 * time.Second)}, opts...)...)
	if err != nil {
		tb.Fatalf("natstest: connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Provision creates the Agent-Reach topology (in memory) on the server nc is
// connected to.
func Provision(tb testing.TB, nc *nats.Conn, topo streams.Topology) {
	tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("natstest: jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := streams.Provision(ctx, js, topo); err != nil {
		tb.Fatalf("natstest: provision: %v", err)
	}
}

// WaitFor polls cond every 10 ms until it returns nil or timeout passes, then
// fails the test with cond's last error.
func WaitFor(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	if err := Poll(timeout, cond); err != nil {
		tb.Fatal(err)
	}
}

// Poll calls cond every 10 ms until it returns nil or timeout passes, and
// returns cond's last error wrapped with the time waited.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natstest: still failing after %v: %w", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RunCluster starts an n-node JetStream cluster on loopback, each node with
// its own store, and shuts it down when the test ends. It returns once the
// cluster has a JetStream meta leader that sees every node online, so an
// R(n) asset can be placed at once.
func RunCluster(tb testing.TB, n int) []*server.Server {
	tb.Helper()
	ports := make([]int, n)
	for i := range ports {
		for ports[i] == 0 || slices.Contains(ports[:i], ports[i]) {
			ports[i] = FreePort(tb)
		}
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	servers := make([]*server.Server, n)
	for i := range n {
		opts := Options(tb.TempDir())
		opts.ServerName = fmt.Sprintf("n%d", i+1)
		opts.Cluster = server.ClusterOpts{Name: "reach-test", Host: "127.0.0.1", Port: ports[i]}
		opts.Routes = routes
		servers[i] = RunServerWith(tb, opts)
	}
	WaitFor(tb, 20*time.Second, func() error {
		for _, s := range servers {
			if !s.JetStreamIsLeader() {
				continue
			}
			// A leader alone is not enough: placing an R3 stream needs
			// every peer online with its stats reported to the leader.
			if peers := s.JetStreamClusterPeers(); len(peers) < n {
				return fmt.Errorf("JetStream meta leader %s sees %d of %d peers online", s.Name(), len(peers), n)
			}
			return nil
		}
		return fmt.Errorf("no JetStream meta leader yet")
	})
	return servers
}

// ClusterURL joins the client URLs of servers for a client that fails over.
func ClusterURL(servers []*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// FreePort returns a loopback TCP port that is free now, for a server whose
// address must be known before it starts (a cluster's routes) or must stay
// the same across a restart. Where the kernel says which ports it hands out
// by itself (Linux's ip_local_port_range), the port is picked below that
// range: a port inside it can be given to another socket — a listener on
// port 0 or the local end of any outgoing connection — between this check
// and the server binding it, and the server then never becomes ready.
func FreePort(tb testing.TB) int {
	tb.Helper()
	if low := ephemeralLow(); low > firstPort+100 {
		for range 100 {
			p := firstPort + rand.IntN(low-firstPort)
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
				_ = l.Close()
				return p
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// firstPort is the lowest port FreePort picks: above the well-known ports
// and the registered ones most services use.
const firstPort = 10000

// ephemeralLow returns the lowest port the kernel assigns by itself, or 0
// when it is not known.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(fields[0])
	return n
}
