package bench

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

// env is a nats-server on loopback with the Agent-Reach topology
// provisioned, and every connection opened to it. close stops all of it.
type env struct {
	srv  *server.Server // embedded, or
	proc *serverProcess // in a process of its own
	url  string
	dir  string
	topo streams.Topology

	// identity, when set, gives the options (credentials, TLS) of the
	// identity a connection named name uses: the security scenario's
	// servers admit identities only.
	identity func(name string) ([]nats.Option, error)

	mu    sync.Mutex
	conns []*nats.Conn
}

// startEnv starts a JetStream server in a temporary directory and
// provisions topo on it. The server is embedded, or with ownProcess a
// process of its own, whose CPU and memory can be measured apart.
func startEnv(ctx context.Context, topo streams.Topology, ownProcess bool) (*env, error) {
	dir, err := os.MkdirTemp("", "agentreach-bench-")
	if err != nil {
		return nil, err
	}
	return startEnvIn(ctx, &env{dir: dir, topo: topo}, ownProcess, serverOptions(dir))
}

// startEnvIn starts e's server (with opts when embedded) and provisions
// e.topo; on an error it closes e.
func startEnvIn(ctx context.Context, e *env, ownProcess bool, opts *server.Options) (*env, error) {
	var err error
	dir := e.dir
	if ownProcess {
		e.proc, err = startServerProcess(dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		e.url = e.proc.url
	} else {
		// The server's goroutines (and every client connection's), started
		// from here, carry the nats-server label, for the CPU breakdown.
		var s *server.Server
		labelled(ctx, compServer, func(context.Context) { s, err = natstest.Start(opts) })
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("embedded server: %w", err)
		}
		e.srv, e.url = s, s.ClientURL()
	}
	nc, err := e.connect("provision")
	if err != nil {
		e.close()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = streams.Provision(pctx, js, e.topo)
		cancel()
	}
	if err != nil {
		e.close()
		return nil, fmt.Errorf("provision: %w", err)
	}
	return e, nil
}

// connect opens a connection that close will close, with opts added to
// the defaults.
func (e *env) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	if e.identity != nil {
		id, err := e.identity(name)
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
func (e *env) connectInProcess(ctx context.Context, name string) (*nats.Conn, error) {
	if e.srv == nil {
		return nil, fmt.Errorf("connect %s in-process: the nats-server runs in a process of its own", name)
	}
	return e.connect(name, nats.InProcessServer(labelledServer{ctx, e.srv}))
}

// labelledServer opens in-process connections to s whose server-side
// goroutines carry the nats-server label, whoever dials.
type labelledServer struct {
	ctx context.Context
	s   *server.Server
}

func (l labelledServer) InProcessConn() (conn net.Conn, err error) {
	labelled(l.ctx, compServer, func(context.Context) { conn, err = l.s.InProcessConn() })
	return conn, err
}

// connectN opens n connections.
func (e *env) connectN(name string, n int) ([]*nats.Conn, error) {
	out := make([]*nats.Conn, n)
	for i := range out {
		nc, err := e.connect(fmt.Sprintf("%s-%d", name, i))
		if err != nil {
			return nil, err
		}
		out[i] = nc
	}
	return out, nil
}

// js returns a JetStream context on a new connection.
func (e *env) js(name string, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, *nats.Conn, error) {
	nc, err := e.connect(name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, opts...)
	return js, nc, err
}

// close closes every connection, shuts the server down and removes its
// store. Calling it again does nothing.
func (e *env) close() {
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
	if e.proc != nil {
		e.proc.stop()
		e.proc = nil
	}
	_ = os.RemoveAll(e.dir)
}
