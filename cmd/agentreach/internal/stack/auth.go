package stack

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/document"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

const authAbout = `
Makes and manages the identities of agents, callers and dispatchers: NATS
users in the decentralised JWT model, one credentials file each. The store
(--dir) holds the operator, the system and AGENTREACH accounts, the
dispatchers' verifier key and every identity; keep it where only operators
can read it. Permissions follow from the role and the ACL (the acl key of
REACH_POLICY) and change without a restart: 'auth sync' (or 'agentreach up
--auth', which runs it) pushes every change to the servers within a second.
See docs/security.md.

Sub-commands:
  init                     make the store (operator, accounts, verifier key)
  agent NAME --type TYPE   an agent instance: NAME is its instance id; it is
    [--serves PATTERNS]    routed only the capabilities its grant covers:
                           --serves, or by default TYPE and TYPE.>
  grant NAME --serves PATTERNS
                           replace an agent's grant (routable by it once synced)
  caller NAME              a caller (application, CLI user, gateway)
  dispatcher NAME          a dispatcher (also the identity for admin commands)
  leaf NAME --carries AGENTS
                           a leaf node server's link to the cluster: it may
                           pass what the agents it carries may do, no more
                           (deploy/nats/leaf.conf, docs/operations.md)
  ls                       every identity, revoked ones marked (--json: an array)
  revoke NAME              revoke an identity: its connections are cut and its
                           calls refused once synced; every other one goes on
  token NAME               the identity's bearer token for the HTTP gateway
                           (Authorization: Bearer <token>), from its credentials
  tls                      a development CA and certificates (--out, --hosts)
  server-config            the nats-server configuration of operator mode
                           (--resolver-dir, --out), to include in the servers'
                           (--leaf: a leaf node server's, deploy/nats/leaf.conf)
  sync                     push the store and the ACL to the servers, and keep
                           doing it until stopped (--once: once); connection
                           flags name the servers and a dispatcher identity

Each new identity's credentials are written to <dir>/creds/<NAME>.creds.

Example:
  agentreach auth init
  agentreach auth agent billing-1 --type billing
  agentreach auth agent scorer-1 --type scorer --serves 'risk.*,fraud.score'
  agentreach auth caller web
  agentreach auth leaf edge-1 --carries echo-edge-1,math-edge-1
  agentreach auth revoke billing-1
  agentreach auth tls --out deploy/certs --hosts nats-1,nats-2,nats-3,leaf,localhost,127.0.0.1`

// defaultAuthDir is the store `agentreach up --auth` keeps in its default
// data directory.
var defaultAuthDir = filepath.Join(".agentreach", "auth")

// IdentityJSON is one row of `auth ls --json` and what the making
// sub-commands print with --json.
type IdentityJSON struct {
	auth.Identity
	Creds string `json:"creds,omitempty"`
}

type authCmd struct {
	cl     *cli.Cmdline
	dir    string
	asJSON bool
	stdout io.Writer
	stderr io.Writer
}

func RunAuth(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn        cli.ConnFlags
		c           = authCmd{stdout: stdout, stderr: stderr}
		typ         string
		serves      string
		carries     string
		out         string
		hosts       string
		resolverDir string
		once        bool
		leaf        bool
		seedACL     string
		leafServers string
	)
	c.cl = cli.NewCmdline("auth", "agentreach auth [flags] init | agent NAME --type TYPE [--serves PATTERNS] | grant NAME --serves PATTERNS | caller NAME | dispatcher NAME | leaf NAME --carries AGENTS | ls | revoke NAME | token NAME | tls | server-config | sync", authAbout)
	c.cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.StringVar(&c.dir, "dir", defaultAuthDir, "`directory` of the identity store ('up --auth' uses <data-dir>/auth)")
		fs.StringVar(&typ, "type", "", "agent: the agent `type`, the REACH_CAPS key it may write")
		fs.StringVar(&serves, "serves", "", "agent, grant: comma-separated capability `patterns` the agent may be routed ('*' one token, a last '>' the rest: 'risk.*,fraud.score'); default TYPE,TYPE.>")
		fs.StringVar(&carries, "carries", "", "leaf: comma-separated `names` of the agent identities behind the leaf node (its link may do what they may)")
		fs.StringVar(&out, "out", "", "tls: the `directory` of the certificates; server-config: the file (default stdout)")
		fs.StringVar(&hosts, "hosts", "localhost,127.0.0.1", "tls: comma-separated `names` and addresses the server certificate covers")
		fs.StringVar(&resolverDir, "resolver-dir", "/data/jwt", "server-config: the `directory` of the servers' account resolver, as they see it")
		fs.BoolVar(&once, "once", false, "sync: push once and exit")
		fs.BoolVar(&leaf, "leaf", false, "server-config: for a leaf node server: also the AGENTREACH account's key as AGENTREACH_ACCOUNT, which deploy/nats/leaf.conf's remote names")
		fs.StringVar(&seedACL, "seed-acl", "", "sync: store this `file` (YAML or JSON) as the acl when REACH_POLICY has none yet")
		fs.StringVar(&leafServers, "leaf-server", "", "sync: comma-separated `urls` of leaf node servers, one URL each, to push to as well (as the\nsystem account's user): their identities, revocations and ACL follow the hub's, no restart")
		c.cl.JSONFlag(fs, &c.asJSON, `print JSON: the identity made or revoked, ls an array; a failure as {"error": …}`)
	})
	c.cl.Group("Connection flags (sync)", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "sync: bound on connecting and on each push")
	})
	pos, code, ok := c.cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return c.cl.UsageError(stderr, "want a sub-command: init, agent, grant, caller, dispatcher, leaf, ls, revoke, token, tls, server-config or sync")
	}
	sub, rest := pos[0], pos[1:]
	takesName := map[string]bool{"agent": true, "grant": true, "caller": true, "dispatcher": true, "leaf": true, "revoke": true, "token": true}
	switch {
	case !takesName[sub] && !map[string]bool{"init": true, "ls": true, "tls": true, "server-config": true, "sync": true}[sub]:
		return c.cl.UsageError(stderr, "unknown sub-command %q (want init, agent, grant, caller, dispatcher, leaf, ls, revoke, token, tls, server-config or sync)", sub)
	case takesName[sub] && len(rest) != 1:
		return c.cl.UsageError(stderr, "%s: want NAME, got %d arguments", sub, len(rest))
	case !takesName[sub] && len(rest) != 0:
		return c.cl.UsageError(stderr, "%s: takes no arguments, got %q", sub, rest[0])
	case typ != "" && sub != "agent":
		return c.cl.UsageError(stderr, "--type: only for 'auth agent'")
	case serves != "" && sub != "agent" && sub != "grant":
		return c.cl.UsageError(stderr, "--serves: only for 'auth agent' and 'auth grant'")
	case carries != "" && sub != "leaf":
		return c.cl.UsageError(stderr, "--carries: only for 'auth leaf'")
	case sub == "leaf" && len(cli.SplitList(carries)) == 0:
		return c.cl.UsageError(stderr, "leaf: --carries is required: the agent identities behind the leaf node ('echo-edge-1,math-edge-1')")
	case sub == "grant" && len(cli.SplitList(serves)) == 0:
		return c.cl.UsageError(stderr, "grant: --serves is required: the capability patterns the agent may be routed ('risk.*,fraud.score')")
	case leafServers != "" && sub != "sync":
		return c.cl.UsageError(stderr, "--leaf-server: only for 'auth sync'")
	case leaf && sub != "server-config":
		return c.cl.UsageError(stderr, "--leaf: only for 'auth server-config'")
	case sub == "tls" && out == "":
		return c.cl.UsageError(stderr, "tls: --out is required: the directory to write the CA and certificates to")
	}
	var err error
	switch sub {
	case "init":
		err = c.init()
	case "agent", "caller", "dispatcher", "leaf":
		err = c.Add(auth.Identity{Name: rest[0], Role: auth.Role(sub), Type: typ, Serves: cli.SplitList(serves), Carries: cli.SplitList(carries)})
	case "grant":
		err = c.grant(rest[0], cli.SplitList(serves))
	case "ls":
		err = c.list()
	case "revoke":
		err = c.revoke(rest[0])
	case "token":
		err = c.token(rest[0])
	case "tls":
		err = c.tls(out, cli.SplitList(hosts))
	case "server-config":
		err = c.serverConfig(resolverDir, out, leaf, conn.Subjects())
	case "sync":
		conn.Log = conn.Logger(stderr)
		err = c.sync(ctx, &conn, once, seedACL, cli.SplitList(leafServers))
	}
	if errors.Is(err, auth.ErrInvalidIdentity) {
		return c.cl.UsageError(stderr, "%v", err)
	}
	if err != nil {
		return c.cl.Fail(stderr, err)
	}
	return cli.ExitOK
}

func (c *authCmd) open() (*auth.Store, error) {
	s, err := auth.Open(c.dir)
	if err != nil {
		return nil, cli.WithCode(cli.CodeNotFound, err)
	}
	return s, nil
}

func (c *authCmd) init() error {
	s, err := auth.Init(c.dir)
	if err != nil {
		return err
	}
	if c.asJSON {
		cli.WriteJSONLine(c.stdout, map[string]string{"dir": s.Dir(), "verifier": s.VerifierFile(), "system_creds": s.SystemCredsFile()})
		return nil
	}
	fmt.Fprintf(c.stdout, "identity store made in %s\n  verifier key (every dispatcher's --verifier)  %s\n  system account user (auth sync)              %s\n"+
		"Next: agentreach auth dispatcher NAME, auth agent NAME --type TYPE, auth caller NAME\n",
		s.Dir(), s.VerifierFile(), s.SystemCredsFile())
	return nil
}

func (c *authCmd) Add(id auth.Identity) error {
	s, err := c.open()
	if err != nil {
		return err
	}
	if id, err = s.Add(id); err != nil {
		return err
	}
	if c.asJSON {
		cli.WriteJSONLine(c.stdout, IdentityJSON{Identity: id, Creds: s.CredsFile(id.Name)})
		return nil
	}
	fmt.Fprintf(c.stdout, "%s %s: credentials in %s\n(connects once synced: `agentreach up --auth` and `agentreach auth sync` push it within a second)\n",
		id.Role, id.Name, s.CredsFile(id.Name))
	return nil
}

func (c *authCmd) list() error {
	s, err := c.open()
	if err != nil {
		return err
	}
	ids := s.Identities()
	if c.asJSON {
		rows := make([]IdentityJSON, len(ids))
		for i, id := range ids {
			rows[i] = IdentityJSON{Identity: id}
			if id.Active() {
				rows[i].Creds = s.CredsFile(id.Name)
			}
		}
		cli.WriteJSONLine(c.stdout, rows)
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tTYPE\tSERVES\tCREATED\tSTATUS")
	for _, id := range ids {
		status := "active"
		if !id.Active() {
			status = "revoked " + id.Revoked.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id.Name, id.Role, dash(id.Type), dash(strings.Join(append(id.Grant(), id.Carries...), ",")), id.Created.Format(time.RFC3339), status)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// grant replaces agent name's grant.
func (c *authCmd) grant(name string, serves []string) error {
	return c.change(func(s *auth.Store) (auth.Identity, error) { return s.SetServes(name, serves) }, func(id auth.Identity) string {
		return fmt.Sprintf("agent %s may be routed %s (dispatchers route by it once synced: within a second under `up --auth` or `auth sync`)",
			id.Name, strings.Join(id.Grant(), ", "))
	})
}

func (c *authCmd) revoke(name string) error {
	return c.change(func(s *auth.Store) (auth.Identity, error) { return s.Revoke(name) }, func(id auth.Identity) string {
		return fmt.Sprintf("%s %s revoked at %s: its connections are cut and its calls refused once synced (within a second under `up --auth` or `auth sync`)",
			id.Role, id.Name, id.Revoked.Format(time.RFC3339))
	})
}

// change applies do to the store and prints the identity it changed: as
// JSON, or the line done says.
func (c *authCmd) change(do func(*auth.Store) (auth.Identity, error), done func(auth.Identity) string) error {
	s, err := c.open()
	if err != nil {
		return err
	}
	id, err := do(s)
	if errors.Is(err, auth.ErrUnknownIdentity) {
		return cli.WithCode(cli.CodeNotFound, err)
	}
	if err != nil {
		return err
	}
	if c.asJSON {
		cli.WriteJSONLine(c.stdout, IdentityJSON{Identity: id})
		return nil
	}
	fmt.Fprintln(c.stdout, done(id))
	return nil
}

// token prints identity name's HTTP bearer token, derived from its
// credentials (signature.Signer.Bearer).
func (c *authCmd) token(name string) error {
	s, err := c.open()
	if err != nil {
		return err
	}
	id, ok := s.Identity(name)
	switch {
	case !ok:
		return cli.WithCode(cli.CodeNotFound, fmt.Errorf("%w: %s", auth.ErrUnknownIdentity, name))
	case !id.Active():
		return fmt.Errorf("%s was revoked at %s: it has no token", name, id.Revoked.Format(time.RFC3339))
	}
	signer, err := auth.LoadSigner(s.CredsFile(name))
	if err != nil {
		return err
	}
	if c.asJSON {
		cli.WriteJSONLine(c.stdout, map[string]string{"name": name, "token": signer.Bearer()})
		return nil
	}
	fmt.Fprintln(c.stdout, signer.Bearer())
	return nil
}

func (c *authCmd) tls(out string, hosts []string) error {
	files, err := devtls.EnsureTLS(out, hosts)
	if err != nil {
		return err
	}
	if c.asJSON {
		cli.WriteJSONLine(c.stdout, files)
		return nil
	}
	fmt.Fprintf(c.stdout, "development PKI in %s (server certificate for %s)\n  CA          %s (clients: --tls-ca)\n  server      %s, %s\n  client      %s, %s (mutual TLS: --tls-cert, --tls-key)\n",
		out, strings.Join(hosts, ", "), files.CA, files.ServerCert, files.ServerKey, files.ClientCert, files.ClientKey)
	return nil
}

func (c *authCmd) serverConfig(resolverDir, out string, leaf bool, subjects streams.Subjects) error {
	s, err := c.open()
	if err != nil {
		return err
	}
	config := s.ServerConfig
	if leaf {
		config = s.LeafServerConfig
	}
	text, err := config(resolverDir, nil, subjects)
	if err != nil {
		return err
	}
	if out == "" {
		_, err = io.WriteString(c.stdout, text)
		return err
	}
	if err := os.WriteFile(out, []byte(text), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "server configuration of operator mode written to %s\n", out)
	return nil
}

// sync runs a Syncer against the servers of conn: the system account's
// user of the store pushes, the dispatcher identity of --creds reads the ACL
// and writes the identity directory. With seedACL, that file becomes the
// acl when REACH_POLICY has none. Each of leaves is a leaf node server the
// system account's user pushes to as well; one out of reach is retried,
// and holds up neither the hub nor the others (with once, it fails the
// command).
func (c *authCmd) sync(ctx context.Context, conn *cli.ConnFlags, once bool, seedACL string, leaves []string) error {
	s, err := c.open()
	if err != nil {
		return err
	}
	var seed []byte
	if seedACL != "" {
		var name string
		if seed, name, err = document.ReadDocument(seedACL, policy.MaxSize); err != nil {
			return cli.WithCode(cli.CodeUsage, fmt.Errorf("--seed-acl: %w", err))
		}
		if _, err := policy.ParseACL(seed); err != nil {
			return document.InvalidDocument(name, err)
		}
	}
	if !conn.Signs() {
		return cli.WithCode(cli.CodeUsage, errors.New("sync: --creds must name a dispatcher identity's credentials (it writes the identity directory in REACH_POLICY)"))
	}
	app, err := conn.Connect("agentreach-auth-sync")
	if err != nil {
		return err
	}
	defer app.Close()
	sysConn := *conn
	sysConn.Creds = s.SystemCredsFile()
	sys, err := sysConn.Connect("agentreach-auth-sync-system")
	if err != nil {
		return err
	}
	defer sys.Close()
	sctx, cancel := context.WithTimeout(ctx, conn.Timeout)
	defer cancel()
	if seed != nil {
		if err := seedPolicy(sctx, app, seed, conn.Log); err != nil {
			return err
		}
	}
	syncer, err := auth.NewSyncer(sctx, s, sys, app, auth.SyncConfig{Subjects: conn.Subjects(), PushTimeout: conn.Timeout},
		auth.WithSyncLogger(conn.Log))
	if err != nil {
		return err
	}
	if err := syncer.Start(sctx); err != nil {
		return err
	}
	defer syncer.Close()
	for _, url := range leaves {
		nc, err := sysConn.ConnectTo("agentreach-auth-sync-leaf", url, nats.RetryOnFailedConnect(true))
		if err != nil {
			return err
		}
		defer nc.Close()
		if err := syncer.AddLeaf(sctx, nc); err != nil {
			if once {
				return err
			}
			conn.Log.Warn().Err(err).Str("leaf_server", url).Msg("leaf server not synced yet; retrying")
		}
	}
	if once {
		rev, _ := syncer.Synced()
		fmt.Fprintf(c.stdout, "synced revision %d of %s\n", rev, s.Dir())
		return nil
	}
	conn.Log.Info().Str("store", s.Dir()).Str("server", app.ConnectedUrlRedacted()).Msg("syncing identities")
	<-ctx.Done()
	return nil
}

// authSetup is what `up --auth` runs on: the store in the data directory
// and the identities of the stack itself.
type authSetup struct {
	store *auth.Store
	// dispatcher, cli: the names of the stack's dispatcher identity and of
	// the caller identity printed in the banner.
	dispatcher, cli string
}

// The identities `up --auth` makes for itself and for whoever calls it.
const (
	UpDispatcherIdentity = "dispatcher"
	UpCallerIdentity     = "cli"
)

// openAuth opens (or makes) the store in dir with the stack's identities:
// its dispatcher, a caller for the command line, and the demo agents.
func openAuth(dir string, demoIDs map[string]string, log zerolog.Logger) (*authSetup, error) {
	s, err := auth.Open(dir)
	if errors.Is(err, auth.ErrNoStore) {
		if s, err = auth.Init(dir); err == nil {
			log.Info().Str("dir", dir).Msg("identity store made")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--auth: %w", err)
	}
	want := map[string]auth.Identity{
		UpDispatcherIdentity: {Name: UpDispatcherIdentity, Role: auth.RoleDispatcher},
		UpCallerIdentity:     {Name: UpCallerIdentity, Role: auth.RoleCaller},
	}
	for id, typ := range demoIDs {
		want[id] = auth.Identity{Name: id, Role: auth.RoleAgent, Type: typ}
	}
	for name, id := range want {
		have, ok := s.Identity(name)
		switch {
		case !ok:
			if _, err := s.Add(id); err != nil {
				return nil, fmt.Errorf("--auth: %w", err)
			}
		case !have.Active():
			return nil, fmt.Errorf("--auth: identity %s in %s is revoked; `up --auth` needs it (use a fresh --data-dir)", name, dir)
		case have.Role != id.Role || have.Type != id.Type:
			return nil, fmt.Errorf("--auth: identity %s in %s is a %s, `up --auth` needs it to be a %s", name, dir, have.Role, id.Role)
		}
	}
	return &authSetup{store: s, dispatcher: UpDispatcherIdentity, cli: UpCallerIdentity}, nil
}

// connectAs returns the connection options of identity name of the store.
func (a *authSetup) connectAs(name string) ([]nats.Option, error) {
	return auth.ConnectOptions(a.store.CredsFile(name))
}
