package cli

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
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth"
)

// defaultServer is where the connection flags point by default: the server
// of a local `agentreach up`.
const defaultServer = "nats://127.0.0.1:4222"

// ReconnectWait is the pause between reconnect attempts to the same server.
const ReconnectWait = 2 * time.Second

// ConnFlags are the flags of every command that talks to an existing NATS
// server or cluster: where it is, how to authenticate, and the common flags.
type ConnFlags struct {
	GlobalFlags
	servers string
	// inOrder: dial --server's URLs in the order given, not shuffled.
	inOrder  bool
	User     string
	Password string
	Token    string
	Creds    string
	Nkey     string
	TLSCA    string
	TLSCert  string
	tlsKey   string
	Timeout  time.Duration
	// jsDomain is the JetStream domain of --js-domain (RegisterJSDomain).
	jsDomain string

	Log zerolog.Logger // connection events; set by the command before connect

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
func (c *ConnFlags) refused() string {
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

// Bounded returns ctx bounded by --timeout, and ended as soon as the server
// refuses the command's identity something: a JetStream request the server
// drops would otherwise wait out the whole timeout before failing.
func (c *ConnFlags) Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
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

// Register defines the connection flags; --timeout gets the command's own
// default and meaning.
func (c *ConnFlags) Register(fs *flag.FlagSet, timeout time.Duration, timeoutUsage string) {
	fs.StringVar(&c.servers, "server", defaultServer, "NATS server `urls`, comma-separated for a cluster")
	fs.BoolVar(&c.inOrder, "no-randomize", false, "dial --server's URLs in the order given (the first one first, the others as fallbacks)\ninstead of in a random order: a dispatcher beside its own node")
	fs.StringVar(&c.User, "user", "", "user `name` (with --password)")
	fs.StringVar(&c.Password, "password", "", "`password` of --user (prefer the environment variable: flags show in ps)")
	fs.StringVar(&c.Token, "token", "", "authentication `token`")
	fs.StringVar(&c.Creds, "creds", "", "user credentials `file` (JWT and seed, as made by agentreach auth or nsc); an\nagentreach identity also signs its tasks (Reach-Source, Reach-Signature)")
	fs.StringVar(&c.Nkey, "nkey", "", "nkey seed `file`")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "CA certificate `file` that verifies the server (turns TLS on)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "client certificate `file` for mutual TLS (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "client private key `file` for mutual TLS (with --tls-cert)")
	fs.DurationVar(&c.Timeout, "timeout", timeout, timeoutUsage)
	c.GlobalFlags.Register(fs)
}

// RegisterJSDomain defines --js-domain, for the commands whose JetStream
// requests follow it (JetStream): a caller or an agent connected to a leaf
// node server without JetStream names the hub's domain.
func (c *ConnFlags) RegisterJSDomain(fs *flag.FlagSet) {
	fs.StringVar(&c.jsDomain, "js-domain", "",
		"the hub's JetStream `domain` (\"hub\") when --server is a leaf node server without JetStream\n(deploy/nats/leaf.conf); empty: the server's own")
}

// JSDomain returns --js-domain: empty for the server's own JetStream.
func (c *ConnFlags) JSDomain() string { return c.jsDomain }

// JetStream returns the JetStream API on nc in --js-domain.
func (c *ConnFlags) JetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	if c.jsDomain != "" {
		return jetstream.NewWithDomain(nc, c.jsDomain)
	}
	return jetstream.New(nc)
}

// Options returns the nats.Options of a connection called name. Files are
// checked here, so a wrong path is reported before any dialling.
func (c *ConnFlags) Options(name string) ([]nats.Option, error) {
	switch {
	case c.Token != "" && (c.User != "" || c.Password != ""):
		return nil, errors.New("use either --token or --user/--password, not both")
	case c.Password != "" && c.User == "":
		return nil, errors.New("--password needs --user")
	case c.Creds != "" && c.Nkey != "":
		return nil, errors.New("use either --creds or --nkey, not both")
	case (c.TLSCert == "") != (c.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case c.Timeout <= 0:
		return nil, fmt.Errorf("--timeout must be positive, got %v", c.Timeout)
	}
	for _, f := range []struct{ flag, path string }{
		{"creds", c.Creds}, {"tls-ca", c.TLSCA}, {"tls-cert", c.TLSCert}, {"tls-key", c.tlsKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("--%s: %w", f.flag, err)
		}
	}
	log := c.Log
	if c.denied == nil {
		c.denied = &denial{ch: make(chan struct{})}
	}
	denied := c.denied
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(c.Timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
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
	if c.inOrder {
		opts = append(opts, nats.DontRandomize())
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.Creds != "" {
		// An Agent-Reach identity also reads its replies under its own
		// inbox prefix, the only one its permissions allow.
		o, err := auth.ConnectOptions(c.Creds)
		if err != nil {
			return nil, fmt.Errorf("--creds: %w", err)
		}
		opts = append(opts, o...)
	}
	if c.Nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.Nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.tlsKey))
	}
	return opts, nil
}

// Signs reports whether --creds names an Agent-Reach identity, whose tasks
// the CLI then signs (Reach-Source and Reach-Signature).
func (c *ConnFlags) Signs() bool {
	if c.Creds == "" {
		return false
	}
	_, role, err := auth.CredentialsName(c.Creds)
	return err == nil && role != ""
}

// serverList returns --server with the spaces around its commas removed.
func (c *ConnFlags) serverList() string { return strings.Join(SplitList(c.servers), ",") }

// Connect opens a connection called name to the servers of --server. Once
// connected it reconnects forever; only the first dial can fail, with a
// CONNECT error.
func (c *ConnFlags) Connect(name string) (*nats.Conn, error) {
	return c.ConnectTo(name, c.serverList())
}

// ConnectTo opens a connection called name as Connect does, to servers
// instead of --server, with extra options after the flags'.
func (c *ConnFlags) ConnectTo(name, servers string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.Options(name)
	if err != nil {
		return nil, WithCode(CodeConnect, err)
	}
	opts = append(opts, extra...)
	if servers == "" {
		return nil, WithCode(CodeConnect, errors.New("--server is empty"))
	}
	nc, err := nats.Connect(servers, opts...)
	if err != nil {
		return nil, WithCode(CodeConnect, fmt.Errorf("connect to %s: %w", servers, err))
	}
	return nc, nil
}

// CloseConn returns a stop step that flushes and closes nc.
func CloseConn(nc *nats.Conn) func(context.Context) error {
	return func(ctx context.Context) error {
		var err error
		if nc.IsConnected() {
			err = nc.FlushWithContext(ctx)
		}
		nc.Close()
		return err
	}
}
