package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/dispatcher/gateway/a2a"
	"github.com/agent-reach/agentreach/dispatcher/gateway/console"
	"github.com/agent-reach/agentreach/dispatcher/gateway/mcp"
	"github.com/agent-reach/agentreach/dispatcher/metrics"
)

// Defaults of Config.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	// writeSlack is what WriteTimeout leaves a call for writing its answer.
	writeSlack = 2 * time.Second
)

// Config configures a Gateway. The zero value means all defaults.
type Config struct {
	// MaxBody bounds a request body; default the NATS server's
	// max_payload (a larger body could not travel anyway): 413 beyond it.
	MaxBody int64
	// ReadHeaderTimeout bounds reading a request's headers (a slow client
	// is disconnected); default 5 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (408
	// beyond it); default 30 s.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from its headers to the end of its
	// answer, and so the calls it makes (each gets WriteTimeout - 2 s at
	// most); default the dispatcher's overall Deadline + 5 s.
	WriteTimeout time.Duration
	// IdleTimeout bounds a keep-alive connection's wait for its next
	// request; default 2 min.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block; default 64 KiB.
	MaxHeaderBytes int
	// TLS, when set, makes Listen serve HTTPS (HTTP/1.1 and HTTP/2) with
	// its certificates (Certificates or GetCertificate); nil serves plain
	// HTTP. A plain HTTP request to an HTTPS gateway gets 400.
	TLS *tls.Config
	// Hosts are the names (host names or IP addresses, without a port)
	// that a request's Host header may name besides those always
	// accepted: localhost, a loopback IP, the address the request arrived
	// on and the host given to Listen (the host of URL). Any other Host
	// is answered 421 Misdirected Request, so that a web page whose name
	// its owner makes resolve to this gateway (DNS rebinding) cannot use
	// it. Give here the names clients dial when they are none of those (a
	// gateway behind a proxy or in a container, reached by a service or
	// DNS name). Hosts {"*"} (AnyHost) turns the check off: unsafe
	// wherever a browser can reach the gateway. Default none.
	Hosts []string
}

// Option configures a Gateway.
type Option func(*Gateway)

// WithLogger sets the gateway's logger; the default discards.
func WithLogger(l zerolog.Logger) Option { return func(g *Gateway) { g.log = l } }

// WithIdentifier makes every request pass id (see Identifier); without
// one the gateway identifies nobody.
func WithIdentifier(id Identifier) Option { return func(g *Gateway) { g.identifier = id } }

// WithMetrics serves m at /metrics and reads the durable streams' counts
// through its StreamCounter; without it /metrics answers 404.
func WithMetrics(m *metrics.Metrics) Option { return func(g *Gateway) { g.metrics = m } }

// WithStats serves the aggregate of agg (kept from REACH_EVENTS) at
// /v1/stats and on the dashboard; without it they show the replica's
// counters only.
func WithStats(agg *eventstats.Aggregator) Option { return func(g *Gateway) { g.stats = agg } }

// WithConsole serves the operator console's routes (/v1/console/...:
// dead letters and review entries, browsed and acted on) beside the
// gateway's own.
func WithConsole(c *console.Console) Option { return func(g *Gateway) { g.console = c } }

// Gateway is the HTTP side of one dispatcher replica. Create it with New,
// bind it with Listen, stop it with Shutdown (idempotent); or mount
// Handler in a server of your own. Its methods are safe for concurrent
// use.
type Gateway struct {
	nc         *nats.Conn
	d          *dispatcher.Dispatcher
	js         jetstream.JetStream
	cfg        Config
	log        zerolog.Logger
	identifier Identifier
	metrics    *metrics.Metrics
	stats      *eventstats.Aggregator
	console    *console.Console
	counter    *metrics.StreamCounter
	a2a        *a2a.Server // the A2A binding (docs/a2a.md)
	handler    http.Handler
	mcp        *mcp.Server            // the MCP endpoint at /mcp (mcp.go)
	hosts      hostSet                // Config.Hosts; nil: any Host (host.go)
	listenHost atomic.Pointer[string] // the host given to Listen

	draining atomic.Bool
	mu       sync.Mutex
	srv      *http.Server
	ln       net.Listener
	served   chan struct{} // closed when Serve has returned
	stopOnce sync.Once
	stopErr  error
}

// New returns a gateway that routes through d (started) and reaches the
// streams over nc (normally d's connection).
func New(nc *nats.Conn, d *dispatcher.Dispatcher, cfg Config, opts ...Option) (*Gateway, error) {
	if nc == nil || d == nil {
		return nil, fmt.Errorf("%w: nil connection or dispatcher", ErrInvalidConfig)
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = nc.MaxPayload()
	}
	setDefault(&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDefault(&cfg.ReadTimeout, DefaultReadTimeout)
	setDefault(&cfg.WriteTimeout, d.Config().Deadline+5*time.Second)
	setDefault(&cfg.IdleTimeout, DefaultIdleTimeout)
	setDefault(&cfg.MaxHeaderBytes, DefaultMaxHeaderBytes)
	switch {
	case cfg.MaxBody < 1:
		return nil, fmt.Errorf("%w: MaxBody must be at least 1 byte, got %d", ErrInvalidConfig, cfg.MaxBody)
	case cfg.ReadHeaderTimeout < 0 || cfg.ReadTimeout < 0 || cfg.IdleTimeout < 0:
		return nil, fmt.Errorf("%w: timeouts must not be negative", ErrInvalidConfig)
	case cfg.WriteTimeout <= writeSlack:
		return nil, fmt.Errorf("%w: WriteTimeout must be more than %v, got %v", ErrInvalidConfig, writeSlack, cfg.WriteTimeout)
	case cfg.MaxHeaderBytes < 1024:
		return nil, fmt.Errorf("%w: MaxHeaderBytes must be at least 1024, got %d", ErrInvalidConfig, cfg.MaxHeaderBytes)
	case cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil:
		return nil, fmt.Errorf("%w: TLS has no certificate", ErrInvalidConfig)
	}
	hosts, err := newHostSet(cfg.Hosts)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	g := &Gateway{nc: nc, d: d, js: js, cfg: cfg, log: zerolog.Nop(), hosts: hosts}
	for _, o := range opts {
		o(g)
	}
	if g.metrics != nil {
		g.counter = g.metrics.Streams()
	}
	if g.counter == nil {
		g.counter = metrics.NewStreamCounter(js, d.Config().Subjects, metrics.DefaultStreamsEvery)
	}
	a2aCfg := a2a.Config{MaxBody: cfg.MaxBody, CallTimeout: cfg.WriteTimeout - writeSlack}
	if g.identifier != nil {
		a2aCfg.Identify = g.identifier.Identify
	}
	if g.a2a, err = a2a.New(d, a2aCfg); err != nil {
		return nil, err
	}
	g.startMCP()
	g.handler = g.checkHost(g.routes())
	return g, nil
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Handler returns the gateway's routes, for a server of the caller's own
// (with the Host check of Config.Hosts).
func (g *Gateway) Handler() http.Handler { return g.handler }

// Listen binds addr (host:port; port 0 picks a free one) and serves on it,
// HTTPS when Config.TLS is set, until Shutdown. A taken port is an error
// at once.
func (g *Gateway) Listen(addr string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.srv != nil {
		return errors.New("gateway: already listening")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g.ln = ln
	// The host as given, or as the listener names every interface (the
	// host of URL: a browser that opens http://0.0.0.0:8080/ sends it).
	host := hostOf(addr)
	if host == "" {
		host = hostOf(ln.Addr().String())
	}
	g.listenHost.Store(&host)
	g.srv = &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout,
		ReadTimeout:       g.cfg.ReadTimeout,
		WriteTimeout:      g.cfg.WriteTimeout,
		IdleTimeout:       g.cfg.IdleTimeout,
		MaxHeaderBytes:    g.cfg.MaxHeaderBytes,
		ErrorLog:          nil,
		TLSConfig:         g.cfg.TLS.Clone(),
	}
	srv, https := g.srv, g.cfg.TLS != nil
	g.served = make(chan struct{})
	go func() {
		defer close(g.served)
		serve := srv.Serve
		if https {
			serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
		}
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error().Err(err).Msg("http server stopped")
		}
	}()
	g.log.Info().Str("addr", ln.Addr().String()).Bool("https", https).Msg("http gateway listening")
	return nil
}

// Addr returns the address Listen bound, nil before.
func (g *Gateway) Addr() net.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		return nil
	}
	return g.ln.Addr()
}

// URL returns the base URL of the address Listen bound, "https://…/" with
// TLS and "http://…/" without; "" before.
func (g *Gateway) URL() string {
	addr := g.Addr()
	if addr == nil {
		return ""
	}
	if g.cfg.TLS != nil {
		return "https://" + addr.String() + "/"
	}
	return "http://" + addr.String() + "/"
}

// Shutdown stops taking connections, lets the requests in progress finish
// (or ctx end, which closes them), and waits for the server to stop.
// /healthz answers 503 "draining" from the first call on. Calling it again
// returns the first result.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.draining.Store(true)
	g.stopOnce.Do(func() {
		defer g.a2a.Close()
		g.mcp.Close() // its notification streams would hold the shutdown
		g.mu.Lock()
		srv, served := g.srv, g.served
		g.mu.Unlock()
		if srv == nil {
			return
		}
		if err := srv.Shutdown(ctx); err != nil {
			g.stopErr = fmt.Errorf("gateway: shutdown: %w", err)
			_ = srv.Close()
		}
		<-served
	})
	return g.stopErr
}
