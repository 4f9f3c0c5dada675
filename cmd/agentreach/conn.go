package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth"
)

// defaultServer is where the connection flags point by default: the server
// of a local `agentreach up`.
const defaultServer = "nats://127.0.0.1:4222"

// reconnectWait is the pause between reconnect attempts to the same server.
const reconnectWait = 2 * time.Second

// connFlags are the flags of every command that talks to an existing NATS
// server or cluster: where it is, how to authenticate, and the common flags.
type connFlags struct {
	globalFlags
	servers  string
	user     string
	password string
	token    string
	creds    string
	nkey     string
	tlsCA    string
	tlsCert  string
	tlsKey   string
	timeout  time.Duration

	log zerolog.Logger // connection events; set by the command before connect

	// denied records the first permissions violation the server reported
	// on a connection made with options; shared by copies, set up by
	// options.
	denied *denial
}

// denial is the first permissions violation reported on the command's
// connections: msg is set before ch is closed.
type denial struct {
	once sync.Once
	msg  string
	ch   chan struct{}
}

func (d *denial) record(msg string) {
	d.once.Do(func() {
		d.msg = msg
		close(d.ch)
	})
}

// refused returns the first permissions violation the server reported on
// the command's connections ("" when none).
func (c *connFlags) refused() string {
	if c.denied == nil {
		return ""
	}
	select {
	case <-c.denied.ch:
		return c.denied.msg
	default:
		return ""
	}
}

// bounded returns ctx bounded by --timeout, and ended as soon as the server
// refuses the command's identity something: a JetStream request the server
// drops would otherwise wait out the whole timeout before failing.
func (c *connFlags) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	if c.denied == nil { // no connection made: nothing to be refused
		return ctx, cancel
	}
	refused := c.denied.ch
	go func() { // ends with ctx, which the caller cancels
		select {
		case <-refused:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// register defines the connection flags; --timeout gets the command's own
// default and meaning.
func (c *connFlags) register(fs *flag.FlagSet, timeout time.Duration, timeoutUsage string) {
	fs.StringVar(&c.servers, "server", defaultServer, "NATS server `urls`, comma-separated for a cluster")
	fs.StringVar(&c.user, "user", "", "user `name` (with --password)")
	fs.StringVar(&c.password, "password", "", "`password` of --user (prefer the environment variable: flags show in ps)")
	fs.StringVar(&c.token, "token", "", "authentication `token`")
	fs.StringVar(&c.creds, "creds", "", "user credentials `file` (JWT and seed, as made by agentreach auth or nsc); an\nagentreach identity also signs its tasks (Reach-Source, Reach-Signature)")
	fs.StringVar(&c.nkey, "nkey", "", "nkey seed `file`")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "CA certificate `file` that verifies the server (turns TLS on)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "client certificate `file` for mutual TLS (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "client private key `file` for mutual TLS (with --tls-cert)")
	fs.DurationVar(&c.timeout, "timeout", timeout, timeoutUsage)
	c.globalFlags.register(fs)
}

// options returns the nats.Options of a connection called name. Files are
// checked here, so a wrong path is reported before any dialling.
func (c *connFlags) options(name string) ([]nats.Option, error) {
	switch {
	case c.token != "" && (c.user != "" || c.password != ""):
		return nil, errors.New("use either --token or --user/--password, not both")
	case c.password != "" && c.user == "":
		return nil, errors.New("--password needs --user")
	case c.creds != "" && c.nkey != "":
		return nil, errors.New("use either --creds or --nkey, not both")
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case c.timeout <= 0:
		return nil, fmt.Errorf("--timeout must be positive, got %v", c.timeout)
	}
	for _, f := range []struct{ flag, path string }{
		{"creds", c.creds}, {"tls-ca", c.tlsCA}, {"tls-cert", c.tlsCert}, {"tls-key", c.tlsKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("--%s: %w", f.flag, err)
		}
	}
	log := c.log
	if c.denied == nil {
		c.denied = &denial{ch: make(chan struct{})}
	}
	denied := c.denied
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(c.timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("NATS disconnected, reconnecting")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("server", nc.ConnectedUrlRedacted()).Msg("NATS reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				denied.record(err.Error())
			}
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("NATS error")
		}),
	}
	if c.user != "" {
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	if c.token != "" {
		opts = append(opts, nats.Token(c.token))
	}
	if c.creds != "" {
		// An Agent-Reach identity also reads its replies under its own
		// inbox prefix, the only one its permissions allow.
		o, err := auth.ConnectOptions(c.creds)
		if err != nil {
			return nil, fmt.Errorf("--creds: %w", err)
		}
		opts = append(opts, o...)
	}
	if c.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	return opts, nil
}

// signs reports whether --creds names an Agent-Reach identity, whose tasks
// the CLI then signs (Reach-Source and Reach-Signature).
func (c *connFlags) signs() bool {
	if c.creds == "" {
		return false
	}
	_, role, err := auth.CredentialsName(c.creds)
	return err == nil && role != ""
}

// serverList returns --server with the spaces around its commas removed.
func (c *connFlags) serverList() string { return strings.Join(splitList(c.servers), ",") }

// connect opens a connection called name to the servers of --server. Once
// connected it reconnects forever; only the first dial can fail, with a
// CONNECT error.
func (c *connFlags) connect(name string) (*nats.Conn, error) {
	opts, err := c.options(name)
	if err != nil {
		return nil, withCode(codeConnect, err)
	}
	servers := c.serverList()
	if servers == "" {
		return nil, withCode(codeConnect, errors.New("--server is empty"))
	}
	nc, err := nats.Connect(servers, opts...)
	if err != nil {
		return nil, withCode(codeConnect, fmt.Errorf("connect to %s: %w", servers, err))
	}
	return nc, nil
}

// closeConn returns a stop step that flushes and closes nc.
func closeConn(nc *nats.Conn) func(context.Context) error {
	return func(ctx context.Context) error {
		var err error
		if nc.IsConnected() {
			err = nc.FlushWithContext(ctx)
		}
		nc.Close()
		return err
	}
}
