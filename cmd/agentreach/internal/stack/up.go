package stack

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/demo"
	"github.com/agent-reach/agentreach/streams"
)

const upAbout = `
Runs a local Agent-Reach stack in one process: an embedded nats-server with
JetStream (file store in --data-dir), the buckets and streams, a dispatcher
and, with --demo, the demo agents (echo, slow, math.add; see 'agentreach demo
--help'), which reach the server over in-process pipes. Other processes
reach it at --nats-listen: agents, 'agentreach call', the nats CLI.

While it runs it holds an exclusive lock on <data-dir>/agentreach.lock (with
its process id inside): a second 'agentreach up' on the same --data-dir
exits at once, naming the holder, instead of sharing the JetStream store.
Two stacks on one machine need their own --data-dir and --nats-listen.

With --auth every process needs an identity of its own (docs/security.md):
the server runs in operator mode, identities live in <data-dir>/auth
('agentreach auth … --dir <data-dir>/auth' adds and revokes them; this process
pushes every change to the server within a second), each one's permissions
follow from its role and the acl key of REACH_POLICY (when there is none, up
writes one that lets every identity call everything), and the dispatcher
refuses a Reach-Source its caller cannot prove. The stack's dispatcher, the
demo agents and a caller "cli" for the command line get identities made
for them. With --tls the server serves TLS with a development CA and
certificates made in <data-dir>/tls; --tls-verify also requires client
certificates (mutual TLS). The banner says which flags reach it.

Ctrl-C or SIGTERM drains the demo agents, then the dispatcher, then stops the
server and releases the lock; the data directory keeps the durable state for
the next run.`

// startupTimeout bounds starting the embedded server and everything on it.
const startupTimeout = 30 * time.Second

// UpFlags are the flags of `up`.
type UpFlags struct {
	global     cli.GlobalFlags
	DataDir    string
	Listen     string
	MaxPayload int
	syncAlways bool
	Demo       bool
	Auth       bool
	TLS        bool
	TLSVerify  bool
	heartbeat  time.Duration
	storeMB    int64
	Dispatcher dispatcherFlags
	demoAgents demo.DemoFlags
}

func (f *UpFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.DataDir, "data-dir", ".agentreach", "`directory` of the JetStream file store (created if missing)")
	fs.StringVar(&f.Listen, "nats-listen", "127.0.0.1:4222", "`host:port` of the NATS client listener (port 0: any free port)")
	fs.IntVar(&f.MaxPayload, "max-payload", server.MAX_PAYLOAD_SIZE,
		"the server's max_payload: the largest message, payload and headers, in `bytes` (at most 64 MiB)")
	fs.BoolVar(&f.syncAlways, "sync-always", false,
		"fsync every JetStream write before acknowledging it (sync_interval: always).\n"+
			"By default the store fsyncs every 2 minutes, so a power loss may lose up to\n"+
			"2 minutes of acknowledged writes; always costs throughput on the durable tier")
	fs.BoolVar(&f.Demo, "demo", false, "also run the demo agents in this process")
	fs.BoolVar(&f.Auth, "auth", false, "one identity per process, permissions from the ACL, Reach-Source proven\n(identities in <data-dir>/auth; see agentreach auth)")
	fs.BoolVar(&f.TLS, "tls", false, "serve TLS with a development CA and certificates made in <data-dir>/tls")
	fs.BoolVar(&f.TLSVerify, "tls-verify", false, "with --tls: require client certificates signed by that CA (mutual TLS)")
	cli.RegisterHeartbeat(fs, &f.heartbeat)
	cli.RegisterStoreMB(fs, &f.storeMB)
	f.Dispatcher.HTTP.Register(fs, defaultHTTP)
}

func RunUp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f UpFlags
	cl := cli.NewCmdline("up", "agentreach up [flags]", upAbout)
	cl.Group("Flags", f.Register)
	cl.Group("Dispatcher flags", f.Dispatcher.Register)
	cl.Group("Demo flags (with --demo)", f.demoAgents.Register)
	cl.Group("Common flags", f.global.Register)
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	if err := f.demoAgents.Validate(); err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	if err := (streams.Topology{Heartbeat: f.heartbeat}).Validate(); err != nil {
		return cl.UsageError(stderr, "--heartbeat: %v", err)
	}
	if f.storeMB < 1 || f.storeMB > 1<<30 {
		return cl.UsageError(stderr, "--store-mb %d: want 1 MiB or more", f.storeMB)
	}
	if _, _, err := splitListen(f.Listen); err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	if f.MaxPayload <= 0 || f.MaxPayload > cli.MaxPayloadRead {
		return cl.UsageError(stderr, "--max-payload %d: want 1 to %d bytes", f.MaxPayload, cli.MaxPayloadRead)
	}
	if f.TLSVerify && !f.TLS {
		return cl.UsageError(stderr, "--tls-verify needs --tls")
	}
	if err := f.Dispatcher.HTTP.check(true); err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	if err := up(ctx, &f, stdout, f.global.Logger(stderr)); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return cli.ExitFail
	}
	return cli.ExitOK
}

// up runs the stack until ctx ends, then stops it.
func up(ctx context.Context, f *UpFlags, stdout io.Writer, log zerolog.Logger) (err error) {
	var st cli.Stopper
	defer func() {
		if serr := st.Stop(cli.StopTimeout); err == nil {
			err = serr
		}
	}()
	if err := startTracing(ctx, &st); err != nil { // off unless OTEL_* asks; stopped last, after the last span
		return err
	}
	dataDir, err := filepath.Abs(f.DataDir)
	if err == nil {
		err = os.MkdirAll(dataDir, 0o750)
	}
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	// Locked before the server opens the store, released after it stopped.
	unlock, err := lockDataDir(dataDir, log)
	if err != nil {
		return err
	}
	st.Add("data dir lock", func(context.Context) error { return unlock() })
	sec, err := f.Security(dataDir, log)
	if err != nil {
		return err
	}
	if err := f.Dispatcher.HTTP.free(); err != nil { // found out before anything starts
		return err
	}
	f.Dispatcher.HTTP.devCA, f.Dispatcher.HTTP.devHosts = filepath.Join(dataDir, "tls"), devCertHosts(f.Listen, f.Dispatcher.HTTP.addr)
	srv, err := startServer(f, dataDir, sec, log)
	if err != nil {
		return err
	}
	st.Add("nats-server", func(context.Context) error {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil
	})
	url := srv.ClientURL()
	// The dispatcher and the demo agents share this process with the
	// server, so they reach it over in-process pipes rather than loopback
	// TCP: no socket reads or writes on their side or the server's
	// (BENCHMARKS.md, routed_inproc). Everything outside the process uses url.
	// With --auth each connects as its identity.
	connect := func(name, identity string) (*nats.Conn, error) {
		opts := append(sec.tlsOptions(), nats.InProcessServer(srv), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(cli.ReconnectWait))
		if sec.auth != nil {
			o, err := sec.auth.connectAs(identity)
			if err != nil {
				return nil, err
			}
			opts = append(opts, o...)
		}
		return nats.Connect(url, opts...)
	}
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()

	nc, err := connect("agentreach-dispatcher", UpDispatcherIdentity)
	if err != nil {
		return fmt.Errorf("connect to the embedded server: %w", err)
	}
	st.Add("dispatcher connection", cli.CloseConn(nc))
	subjects := f.global.Subjects()
	if err := provision(sctx, nc, streams.Topology{Subjects: subjects, Heartbeat: f.heartbeat, MaxBytes: f.storeMB << 20}); err != nil {
		return err
	}
	var az *auth.Authorizer
	if sec.auth != nil {
		if az, err = sec.auth.start(sctx, &st, nc, srv, sec.tlsOptions(), subjects, log); err != nil {
			return err
		}
	}
	d, err := f.Dispatcher.start(sctx, nc, subjects, log, az)
	if err != nil {
		return err
	}
	st.Add("dispatcher", d.Drain)
	var agentIDs []string
	if f.Demo {
		agents, err := demo.StartDemo(sctx, &f.demoAgents, f.heartbeat, subjects, connect, f.Auth, log)
		if err != nil {
			return err
		}
		st.Add("demo agents", agents.Drain)
		agentIDs = agents.IDs()
	}
	PrintBanner(stdout, Banner{URL: url, DataDir: dataDir, Subjects: subjects, Dispatcher: d.Name(), HTTP: d.URL(), Demo: f.Demo,
		HTTPCA: f.Dispatcher.HTTP.devCAFile(), AgentIDs: agentIDs, Sec: sec})
	log.Info().Str("url", url).Str("data_dir", dataDir).Str("dispatcher", d.Name()).Str("http", d.URL()).Strs("agents", agentIDs).
		Msg("agentreach up")
	<-ctx.Done()
	log.Info().Msg("stopping: draining agents and dispatcher, then the server")
	return nil
}

// splitListen parses --nats-listen; port 0 becomes the server's "any free
// port" (-1).
func splitListen(listen string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(listen)
	if err == nil {
		port, err = strconv.Atoi(p)
	}
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("--nats-listen %q: want host:port, e.g. 127.0.0.1:4222", listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// startServer starts the embedded nats-server with JetStream in dataDir —
// in operator mode and with TLS as sec says — and waits until it takes
// connections.
func startServer(f *UpFlags, dataDir string, sec *security, log zerolog.Logger) (*server.Server, error) {
	host, port, err := splitListen(f.Listen)
	if err != nil {
		return nil, err
	}
	if port != server.RANDOM_PORT {
		// The server only logs a taken port; find out first and say so.
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("%s is in use: move NATS with %s (%w; is another `agentreach up` or nats-server running? "+
				"a second stack also needs its own --data-dir)", f.Listen, moveListener("nats-listen", host, port), err)
		}
		_ = l.Close()
	}
	opts := &server.Options{
		ServerName: "agentreach-up",
		Host:       host,
		Port:       port,
		MaxPayload: int32(f.MaxPayload),
		JetStream:  true,
		StoreDir:   dataDir,
		SyncAlways: f.syncAlways,
		NoSigs:     true, // this process handles signals and stops the server itself
	}
	if err := sec.configure(opts, dataDir, f.global.Subjects()); err != nil {
		return nil, err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	sl := cli.NewServerLogger(log)
	trace := log.GetLevel() <= zerolog.TraceLevel
	srv.SetLoggerV2(sl, trace, trace, false)
	go srv.Start()
	if err := waitReady(srv, sl.Fatal, startupTimeout); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, err
	}
	return srv, nil
}

// moveListener says how to move a listener on host:port that is taken: its
// flag, or its environment variable, which also reaches `make run`, set to
// the next port.
func moveListener(flagName, host string, port int) string {
	next := net.JoinHostPort(host, strconv.Itoa(port%65535+1))
	return fmt.Sprintf("--%s or %s=%s make run", flagName, cli.EnvName(flagName), next)
}

// waitReady waits until srv takes connections with JetStream on, the server
// reports a fatal error, or timeout passes.
func waitReady(srv *server.Server, fatal <-chan string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case msg := <-fatal:
			return fmt.Errorf("nats-server did not start: %s", msg)
		default:
		}
		if srv.ReadyForConnections(100*time.Millisecond) && srv.JetStreamEnabled() {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("nats-server did not start within " + timeout.String())
		}
	}
}

// Banner is what printBanner says.
type Banner struct {
	URL, DataDir string
	Subjects     streams.Subjects
	Dispatcher   string
	HTTP         string // the dashboard's URL, "" with --http off
	HTTPCA       string // the CA file curl needs to trust an HTTPS gateway, if the banner knows it
	Demo         bool
	AgentIDs     []string
	Sec          *security
}

// PrintBanner tells the user where the stack is and what to try. Every
// command it shows names the server (an AGENTREACH_SERVER or NATS_URL in
// the user's environment would otherwise win) and, with --tls and --auth,
// the CA, client certificate and credentials it needs.
func PrintBanner(w io.Writer, b Banner) {
	cliArgs, natsArgs := " --server "+b.URL, " -s "+b.URL
	if p := b.Subjects.Prefix; p != "" && p != streams.DefaultPrefix {
		cliArgs += " --prefix " + p
	}
	self := selfCommand()
	sec := b.Sec.banner(self, cliArgs)
	agents := "none (add --demo, or run `agentreach demo`)"
	if b.Demo {
		agents = strings.Join(b.AgentIDs, ", ")
	}
	dashboard := "off (--http off)"
	if b.HTTP != "" {
		dashboard = b.HTTP + " (HTTP API, /metrics, /healthz)"
		if b.Sec.auth != nil { // inspection is served to a bearer token only
			dashboard += fmt.Sprintf("\n              with --auth open it as %s#token=TOKEN, TOKEN from `%s auth token --dir %s %s`",
				b.HTTP, self, b.Sec.auth.store.Dir(), UpCallerIdentity)
		}
	}
	fmt.Fprintf(w, "Agent-Reach is up.\n  NATS        %s (JetStream, data in %s)\n  dispatcher  %s\n  dashboard   %s\n  agents      %s\n",
		b.URL, b.DataDir, b.Dispatcher, dashboard, agents)
	for _, l := range sec.lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintf(w, "\nTry:\n  %s call%s echo '{\"text\":\"hi\"}'\n", self, cliArgs+sec.caller)
	if b.HTTP != "" {
		bearer := ""
		if b.Sec.auth != nil { // the gateway's calls name their identity by bearer token
			bearer = fmt.Sprintf(`-H "Authorization: Bearer $(%s auth token --dir %s %s)" `, self, b.Sec.auth.store.Dir(), UpCallerIdentity)
		}
		if b.HTTPCA != "" {
			bearer = "--cacert " + b.HTTPCA + " " + bearer
		}
		fmt.Fprintf(w, "  curl %s-d '{\"text\":\"hi\"}' %sv1/call/echo\n", bearer, b.HTTP)
	}
	if b.Sec.auth == nil { // with --auth a task needs a Reach-Signature, which the nats CLI cannot make
		fmt.Fprintf(w, "  nats%s req %s '{\"text\":\"hi\"}'\n", natsArgs+sec.natsAdmin, b.Subjects.Task("echo"))
	}
	fmt.Fprintf(w, "  nats%s kv ls %s\n  %s agents%s\n\nCtrl-C stops everything.\n",
		natsArgs+sec.natsAdmin, streams.BucketAgents, self, cliArgs+sec.admin)
}

// selfCommand is how to run this binary again from the working directory:
// its relative path when it lies below it (make run: bin/agentreach), else
// "agentreach", as on $PATH (go run's binary is a temporary file).
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "agentreach"
	}
	wd, err := os.Getwd()
	if err != nil {
		return "agentreach"
	}
	rel, err := filepath.Rel(wd, exe)
	switch {
	case err != nil || filepath.Base(rel) != "agentreach" || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)):
		return "agentreach"
	case !strings.ContainsRune(rel, filepath.Separator):
		return "." + string(filepath.Separator) + rel
	}
	return rel
}
