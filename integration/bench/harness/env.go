package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Env is a nats-server on loopback with the Agent-Reach topology
// provisioned, and every connection opened to it. close stops all of it.
type Env struct {
	srv  *server.Server // embedded, or
	Proc *serverProcess // in a process of its own
	url  string
	Dir  string
	Topo streams.Topology

	// Identity, when set, gives the options (credentials, TLS) of the
	// identity a connection named name uses: the security scenario's
	// servers admit identities only.
	Identity func(name string) ([]nats.Option, error)

	mu    sync.Mutex
	conns []*nats.Conn
}

// StartEnv starts a JetStream server in a temporary directory and
// provisions topo on it. The server is embedded, or with ownProcess a
// process of its own, whose CPU and memory can be measured apart.
func StartEnv(ctx context.Context, topo streams.Topology, ownProcess bool) (*Env, error) {
	dir, err := os.MkdirTemp("", "agentreach-bench-")
	if err != nil {
		return nil, err
	}
	return StartEnvIn(ctx, &Env{Dir: dir, Topo: topo}, ownProcess, ServerOptions(dir))
}

// StartEnvIn starts e's server (with opts when embedded) and provisions
// e.topo; on an error it closes e.
func StartEnvIn(ctx context.Context, e *Env, ownProcess bool, opts *server.Options) (*Env, error) {
	var err error
	dir := e.Dir
	if ownProcess {
		e.Proc, err = startServerProcess(dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		e.url = e.Proc.url
	} else {
		// The server's goroutines (and every client connection's), started
		// from here, carry the nats-server label, for the CPU breakdown.
		var s *server.Server
		Labelled(ctx, CompServer, func(context.Context) { s, err = natstest.Start(opts) })
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("embedded server: %w", err)
		}
		e.srv, e.url = s, s.ClientURL()
	}
	nc, err := e.Connect("provision")
	if err != nil {
		e.Close()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = streams.Provision(pctx, js, e.Topo)
		cancel()
	}
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("provision: %w", err)
	}
	return e, nil
}

// Connect opens a connection that close will close, with opts added to
// the defaults.
func (e *Env) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	if e.Identity != nil {
		id, err := e.Identity(name)
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", name, err)
		}
		opts = append(id, opts...)
	}
	nc, err := nats.Connect(e.url, append([]nats.Option{nats.Name("bench-" + name), nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	e.mu.Lock()
	e.conns = append(e.conns, nc)
	e.mu.Unlock()
	return nc, nil
}

// connectInProcess opens a connection that close will close, on an
// in-process pipe to the embedded server rather than loopback TCP. The
// server's goroutines for it carry the nats-server label; ctx must carry
// the dialer's own label, which the connection's goroutines get.
func (e *Env) connectInProcess(ctx context.Context, name string) (*nats.Conn, error) {
	if e.srv == nil {
		return nil, fmt.Errorf("connect %s in-process: the nats-server runs in a process of its own", name)
	}
	return e.Connect(name, nats.InProcessServer(labelledServer{ctx, e.srv}))
}

// labelledServer opens in-process connections to s whose server-side
// goroutines carry the nats-server label, whoever dials.
type labelledServer struct {
	ctx context.Context
	s   *server.Server
}

func (l labelledServer) InProcessConn() (conn net.Conn, err error) {
	Labelled(l.ctx, CompServer, func(context.Context) { conn, err = l.s.InProcessConn() })
	return conn, err
}

// ConnectN opens n connections.
func (e *Env) ConnectN(name string, n int) ([]*nats.Conn, error) {
	out := make([]*nats.Conn, n)
	for i := range out {
		nc, err := e.Connect(fmt.Sprintf("%s-%d", name, i))
		if err != nil {
			return nil, err
		}
		out[i] = nc
	}
	return out, nil
}

// js returns a JetStream context on a new connection.
func (e *Env) JS(name string, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, *nats.Conn, error) {
	nc, err := e.Connect(name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, opts...)
	return js, nc, err
}

// Close closes every connection, shuts the server down and removes its
// store. Calling it again does nothing.
func (e *Env) Close() {
	e.mu.Lock()
	conns := e.conns
	e.conns = nil
	e.mu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
	if e.srv != nil {
		natstest.Stop(e.srv)
		e.srv = nil
	}
	if e.Proc != nil {
		e.Proc.Stop()
		e.Proc = nil
	}
	_ = os.RemoveAll(e.Dir)
}
