package deploy

// Static validation of the deploy/ folder: there is no Docker engine in CI,
// so these tests check what can be checked without one.
//
//   - What deploy/setup.sh makes (certificates, identities, the servers'
//     operator mode) is made again in a temporary directory (setup_test.go).
//   - The NATS configs go through the real nats-server config parser (the
//     version this module depends on), with the compose file's mounts
//     mapped to that directory, and a single embedded node started from
//     nats-1.conf (cluster removed) serves the Agent-Reach flows with the
//     stack's identities, TLS and JetStream settings.
//   - docker-compose.yml is loaded with compose-go, the loader of Docker
//     Compose itself (schema, interpolation, consistency), and
//     cross-checked against the NATS configs, the identities, the
//     Dockerfile and the agentreach CLI surface.
//   - The Dockerfile is checked line by line.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// The agentreach CLI surface the compose file may use.
var (
	agentreachSubcommands = []string{"up", "dispatcher", "demo", "agents", "call", "auth", "policy"}
	// Every flag can also come from AGENTREACH_<FLAG_NAME_UPPER_SNAKE>.
	agentreachFlags = []string{"server", "creds", "creds-dir", "nkey", "tls-ca", "tls-cert", "tls-key",
		"replicas", "heartbeat", "verifier", "dir", "seed-acl", "http", "http-cert", "http-key", "js-domain", "no-randomize", "leaf-server"}
	// The flags of up the image's ENV may set.
	upFlags = []string{"data-dir", "nats-listen", "http", "http-tls", "http-cert", "http-key", "max-payload", "max-in-flight"}
	// The role of the identity each subcommand runs as.
	subcommandRole = map[string]auth.Role{
		"dispatcher": auth.RoleDispatcher, "demo": auth.RoleAgent, "agents": auth.RoleDispatcher,
		"call": auth.RoleCaller, "auth": auth.RoleDispatcher,
	}
)

const (
	// The leaf node server's compose service and config (nats/leaf.conf),
	// and the hub's leafnode port.
	leafService = "leaf"
	leafPort    = 7422

	composeFile = "docker-compose.yml"
	dockerfile  = "Dockerfile"
	natsConfDir = "nats"
	// What the compose healthchecks ask of every NATS node.
	healthzPathQuery = "/healthz?js-enabled-only=true"
	// Where the NATS configs live in the nats containers.
	natsConfMount = "/etc/nats"
)

var natsNodes = []string{"nats-1", "nats-2", "nats-3"}

// ---------------------------------------------------------------- helpers

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// natsServerMinor returns "2.15" for the nats-server version in ../go.mod.
func natsServerMinor(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`github\.com/nats-io/nats-server/v2 v(\d+\.\d+)\.`).FindStringSubmatch(readFile(t, filepath.Join("..", "go.mod")))
	if m == nil {
		t.Fatal("../go.mod does not require github.com/nats-io/nats-server/v2")
	}
	return m[1]
}

// natsTree lays out what a NATS node's container sees, under a temporary
// root: every mount of its compose service (bind mounts from deploy/ or from
// what setup.sh made, named volumes as empty directories), with every
// container path in the configs rewritten below the root. It returns the
// root; the container path p is then root+p.
func natsTree(t *testing.T, g *generated, node string) string {
	t.Helper()
	p, _ := loadCompose(t)
	svc := service(t, p, node)
	root := t.TempDir()
	var mounts []string
	for _, v := range svc.Volumes {
		if !strings.HasPrefix(v.Target, "/") {
			t.Fatalf("service %s: volume %s: want an absolute container path", node, v.Target)
		}
		dst := filepath.Join(root, v.Target)
		mounts = append(mounts, v.Target)
		if !isBind(v) {
			if err := os.MkdirAll(dst, 0o700); err != nil { // a named volume
				t.Fatal(err)
			}
			continue
		}
		copyTree(t, g.source(v.Source), dst)
	}
	// Generated files inside a mounted repository directory (nats/auth.conf).
	for _, rel := range generatedDirs {
		if host, ok := containerPathOf(svc, rel); ok {
			copyTree(t, g.source(rel), filepath.Join(root, host))
		}
	}
	// Every absolute path in the configs is inside one of the mounts.
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	confs, _ := filepath.Glob(filepath.Join(root, natsConfMount, "*.conf"))
	for _, c := range confs {
		text := readFile(t, c)
		for _, m := range mounts {
			text = strings.ReplaceAll(text, `"`+m+`/`, `"`+root+m+`/`)
		}
		if err := os.WriteFile(c, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// containerPathOf returns where the deploy/ file rel appears in the
// service's container, through a bind mount of a directory holding it.
func containerPathOf(svc types.ServiceConfig, rel string) (string, bool) {
	for _, v := range svc.Volumes {
		if !isBind(v) {
			continue
		}
		if r, ok := strings.CutPrefix(rel, filepath.Clean(v.Source)+"/"); ok {
			return filepath.Join(v.Target, r), true
		}
	}
	return "", false
}

// copyTree copies the file or directory src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// loadNATSConfig parses the config of node as its container sees it.
func loadNATSConfig(t *testing.T, g *generated, node string) (*server.Options, string) {
	t.Helper()
	root := natsTree(t, g, node)
	path := filepath.Join(root, natsConfMount, node+".conf")
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses %s.conf: %v", node, err)
	}
	if opts.AccountResolver != nil {
		t.Cleanup(opts.AccountResolver.Close)
	}
	return opts, root
}

// ---------------------------------------------------------------- NATS configs

func TestNATSConfigs(t *testing.T) {
	g := setup(t)
	operator, sys, _, err := g.store.Trust(nil, streams.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	var first *server.Options
	for _, node := range natsNodes {
		t.Run(node, func(t *testing.T) {
			opts, root := loadNATSConfig(t, g, node)
			if opts.ServerName != node {
				t.Errorf("server_name = %q, want %q (unique per node, equal to the compose service)", opts.ServerName, node)
			}
			if opts.Port != 4222 {
				t.Errorf("client port = %d, want 4222", opts.Port)
			}
			if opts.HTTPPort != 8222 {
				t.Errorf("monitoring port = %d, want 8222", opts.HTTPPort)
			}

			// JetStream, file store, fsync always.
			if !opts.JetStream {
				t.Error("jetstream is not enabled")
			}
			if opts.StoreDir == "" {
				t.Error("jetstream store_dir is not set")
			}
			if !opts.SyncAlways {
				t.Error("jetstream sync_interval is not \"always\"")
			}

			// Cluster: every node routes to all three.
			if opts.Cluster.Name == "" || opts.Cluster.Port == 0 {
				t.Errorf("cluster name/port missing: %+v", opts.Cluster)
			}
			// Dead routes found in seconds, not after TCP gives up.
			if opts.Cluster.PingInterval <= 0 || opts.Cluster.PingInterval > 5*time.Second || opts.Cluster.MaxPingsOut < 1 {
				t.Errorf("cluster ping_interval %v, ping_max %d: a dead route must be dropped within seconds",
					opts.Cluster.PingInterval, opts.Cluster.MaxPingsOut)
			}
			var hosts []string
			for _, r := range opts.Routes {
				if r.Port() != strconv.Itoa(opts.Cluster.Port) {
					t.Errorf("route %s: port %s, but the cluster listens on %d", r, r.Port(), opts.Cluster.Port)
				}
				hosts = append(hosts, r.Hostname())
			}
			sort.Strings(hosts)
			if !slices.Equal(hosts, natsNodes) {
				t.Errorf("routes go to %v, want %v", hosts, natsNodes)
			}

			// TLS on the client port and mutual TLS on the route port, with
			// the certificates setup.sh makes, valid for every node name.
			switch {
			case opts.TLSConfig == nil:
				t.Error("no TLS on the client port")
			case opts.TLSConfig.Certificates == nil || opts.TLSConfig.MinVersion < tls.VersionTLS12:
				t.Errorf("client TLS without a certificate or below TLS 1.2: %+v", opts.TLSConfig)
			}
			if c := opts.Cluster.TLSConfig; c == nil || c.ClientAuth != tls.RequireAndVerifyClientCert {
				t.Error("no mutual TLS on the route port (cluster { tls { verify: true } })")
			} else if leaf := c.Certificates[0].Leaf; leaf != nil && leaf.VerifyHostname(node) != nil {
				t.Errorf("the route certificate does not name %s", node)
			}

			// Operator mode: no users or passwords, the store's operator and
			// system account, a full resolver on the data volume.
			if len(opts.Users) > 0 || len(opts.Nkeys) > 0 || len(opts.Accounts) > 0 {
				t.Errorf("users, nkeys or accounts in the config (%d, %d, %d): identities belong in the account JWT", len(opts.Users), len(opts.Nkeys), len(opts.Accounts))
			}
			if len(opts.TrustedOperators) != 1 || opts.TrustedOperators[0].Subject != operator.Subject {
				t.Errorf("trusted operators %v, want the store's operator %s", opts.TrustedOperators, operator.Subject)
			}
			if opts.SystemAccount != sys {
				t.Errorf("system_account = %q, want the store's %s", opts.SystemAccount, sys)
			}
			res, ok := opts.AccountResolver.(*server.DirAccResolver)
			switch {
			case !ok:
				t.Errorf("account resolver %T: want the full one (type: full), which takes account updates at run time", opts.AccountResolver)
			case !strings.HasPrefix(filepath.Clean(opts.StoreDir), filepath.Join(root, "data")):
				t.Errorf("JetStream store %s is not on the data volume", opts.StoreDir)
			}
			_ = res
			if !strings.Contains(readFile(t, filepath.Join(root, natsConfMount, "auth.conf")), `dir: "/`) ||
				!strings.Contains(readFile(t, filepath.Join(root, natsConfMount, "auth.conf")), `"`+root+`/data/jwt"`) {
				t.Error("the account resolver's dir is not /data/jwt on the node's data volume")
			}

			// The hub of leaf nodes: JetStream in the domain agents at the
			// edge name, a leafnode port with mutual TLS.
			if opts.JetStreamDomain != auth.HubDomain {
				t.Errorf("jetstream domain %q, want %q (auth.HubDomain: agents behind a leaf node use it)", opts.JetStreamDomain, auth.HubDomain)
			}
			if opts.LeafNode.Port != leafPort {
				t.Errorf("leafnodes listen port %d, want %d", opts.LeafNode.Port, leafPort)
			}
			if c := opts.LeafNode.TLSConfig; c == nil || c.ClientAuth != tls.RequireAndVerifyClientCert {
				t.Error("no mutual TLS on the leafnode port (leafnodes { tls { verify: true } })")
			}

			// The nodes differ only in server_name.
			if first == nil {
				first = opts
				return
			}
			if opts.Cluster.Name != first.Cluster.Name || filepath.Base(opts.StoreDir) != filepath.Base(first.StoreDir) ||
				opts.SyncAlways != first.SyncAlways || len(opts.Routes) != len(first.Routes) || opts.SystemAccount != first.SystemAccount {
				t.Errorf("%s differs from %s in more than server_name", node, natsNodes[0])
			}
		})
	}
}

// commentAbove returns the comment block directly above the first line of
// text containing needle.
func commentAbove(t *testing.T, text, needle string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !strings.Contains(l, needle) || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		var block []string
		for j := i - 1; j >= 0 && strings.HasPrefix(strings.TrimSpace(lines[j]), "#"); j-- {
			block = append(block, lines[j])
		}
		return strings.Join(block, "\n")
	}
	t.Fatalf("no line contains %q", needle)
	return ""
}

func TestNATSConfigComments(t *testing.T) {
	text := readFile(t, filepath.Join(natsConfDir, "common.conf"))
	for needle, wants := range map[string][]string{
		"sync_interval: always":  {"2 minutes", "power loss", "throughput"},
		"include ./auth.conf":    {"agentreach auth server-config", "agentreach auth sync", "no restart", "allow_responses", "ACL"},
		"tls {":                  {"agentreach auth tls --out deploy/certs"},
		"listen: 0.0.0.0:4222":   {"Clients"},
		"no_advertise: true":     {"gossip"},
		"lame_duck_grace_period": {"SIGUSR2"},
	} {
		doc := commentAbove(t, text, needle)
		for _, want := range wants {
			if !strings.Contains(doc, want) {
				t.Errorf("the comment above %q should mention %q; got:\n%s", needle, want, doc)
			}
		}
	}
}

// permitted mirrors the server's rule for a literal subject: allowed by
// some allow entry (or no allow list), and by no deny entry.
func permitted(p jwt.Permission, subject string) bool {
	ok := len(p.Allow) == 0
	for _, f := range p.Allow {
		if server.SubjectMatchesFilter(subject, f) {
			ok = true
		}
	}
	for _, f := range p.Deny {
		if server.SubjectMatchesFilter(subject, f) {
			ok = false
		}
	}
	return ok
}

// TestNATSPermissions checks what the identities setup.sh makes may do
// once auth-sync pushed the ACL of acl.yaml: the templates of their
// signing keys in the account JWT.
func TestNATSPermissions(t *testing.T) {
	g := setup(t)
	token, _, err := g.store.AccountJWT(g.acl, streams.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	perms := map[string]jwt.Permissions{}
	for _, id := range g.store.Identities() {
		scope, ok := ac.SigningKeys.GetScope(id.SigningKey)
		us, isUser := scope.(*jwt.UserScope)
		if !ok || !isUser {
			t.Fatalf("the account JWT has no scoped signing key for %s", id.Name)
		}
		perms[id.Name] = us.Template.Permissions
	}
	if !slices.Contains(ac.DefaultPermissions.Pub.Deny, ">") || !slices.Contains(ac.DefaultPermissions.Sub.Deny, ">") {
		t.Error("a user of the account key itself may do something: deny it everything")
	}
	type check struct {
		identity, op, subject string
		want                  bool
	}
	checks := []check{
		// dispatcher: the routing core, every bucket and stream, callers' inboxes.
		{"dispatcher", "sub", "reach.task.echo", true},
		{"dispatcher", "sub", "reach.broadcast.echo", true},
		{"dispatcher", "sub", "reach.fanout", true},
		{"dispatcher", "sub", "reach.api.agents", true},
		{"dispatcher", "sub", "_INBOX.dispatcher.abc", true},
		{"dispatcher", "sub", "_INBOX.cli.abc", false},
		{"dispatcher", "sub", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.REACH_TASKS.dispatcher", true},
		{"dispatcher", "pub", "reach.agent.echo-1", true},
		{"dispatcher", "pub", "reach.result.cli.r1", true},
		{"dispatcher", "pub", "reach.dlq.echo", true},
		{"dispatcher", "pub", "reach.review.echo", true},
		{"dispatcher", "pub", "reach.event.echo", true},
		{"dispatcher", "pub", "_INBOX.cli.abc", true},
		{"dispatcher", "pub", "$JS.API.STREAM.CREATE.REACH_TASKS", true},
		{"dispatcher", "pub", "$JS.ACK.REACH_TASKS.dispatcher.1.1.1.1.0", true},
		{"dispatcher", "pub", "$KV.REACH_POLICY.acl", true},
		{"dispatcher", "pub", "reach.task.echo", false},
		{"dispatcher", "pub", "$SYS.REQ.SERVER.PING", false},
		{"dispatcher", "pub", "other.subject", false},

		// agent echo-1: its deliveries, its own records, replies via allow_responses.
		{"echo-1", "sub", "reach.agent.echo-1", true},
		{"echo-1", "sub", "reach.agent.echo-2", false},
		{"echo-1", "sub", "_INBOX.echo-1.abc", true},
		{"echo-1", "sub", "_INBOX.cli.abc", false},
		{"echo-1", "sub", "reach.task.echo", false},
		{"echo-1", "pub", "$KV.REACH_AGENTS.echo-1", true},
		{"echo-1", "pub", "$KV.REACH_AGENTS.echo-2", false},
		{"echo-1", "pub", "$KV.REACH_CAPS.echo", true},
		{"echo-1", "pub", "$KV.REACH_CAPS.math", false},
		{"echo-1", "pub", "$KV.REACH_IDEMPOTENCY.echo.cli.key1", true},
		{"echo-1", "pub", "$KV.REACH_IDEMPOTENCY.echo.sub.cli.key1", true},
		{"echo-1", "pub", "$KV.REACH_IDEMPOTENCY.echo.key1", false},
		{"echo-1", "pub", "$KV.REACH_IDEMPOTENCY.math.add.cli.key1", false},
		{"echo-1", "pub", "$JS.API.STREAM.INFO.KV_REACH_AGENTS", true},
		{"echo-1", "pub", "$JS.API.STREAM.INFO.KV_REACH_IDEMPOTENCY", true},
		{"echo-1", "pub", "$JS.API.DIRECT.GET.KV_REACH_IDEMPOTENCY.$KV.REACH_IDEMPOTENCY.echo.cli.key1", true},
		{"echo-1", "pub", "$JS.API.DIRECT.GET.KV_REACH_IDEMPOTENCY.$KV.REACH_IDEMPOTENCY.math.add.cli.key1", false},
		{"echo-1", "pub", "$JS.API.DIRECT.GET.KV_REACH_IDEMPOTENCY", false},
		{"echo-1", "pub", "$JS.API.STREAM.MSG.GET.KV_REACH_IDEMPOTENCY", false},
		{"echo-1", "pub", "$JS.API.CONSUMER.CREATE.KV_REACH_IDEMPOTENCY.c1.$KV.REACH_IDEMPOTENCY.echo.cli.key1", false},
		{"echo-1", "pub", "$JS.FC.KV_REACH_IDEMPOTENCY.x", false},
		{"echo-1", "pub", "$KV.REACH_POLICY.acl", false},
		{"echo-1", "pub", "$JS.API.STREAM.DELETE.REACH_TASKS", false},
		{"echo-1", "pub", "$JS.API.STREAM.PURGE.KV_REACH_AGENTS", false},
		{"echo-1", "pub", "$JS.API.CONSUMER.DELETE.REACH_TASKS.dispatcher", false},
		{"echo-1", "pub", "reach.result.echo-1.r1", false},
		{"echo-1", "pub", "reach.agent.echo-2", false},
		{"echo-1", "pub", "reach.task.echo", false}, // acl.yaml grants it nothing
		{"echo-1", "pub", "_INBOX.cli.abc", false},  // only as a response

		// caller cli: what acl.yaml grants it, its replies, results.
		{"cli", "pub", "reach.task.echo", true},
		{"cli", "pub", "reach.task.math.add", true},
		{"cli", "pub", "reach.task.payment.execute", false},
		{"cli", "pub", "reach.broadcast.echo", true},
		{"cli", "pub", "reach.submit.echo", true},
		{"cli", "pub", "reach.fanout", true},
		{"cli", "pub", "reach.agent.echo-1", false},
		{"cli", "pub", "reach.api.breakers", false},
		{"cli", "pub", "$KV.REACH_AGENTS.echo-1", false},
		{"cli", "pub", "$JS.API.STREAM.DELETE.REACH_TASKS", false},
		{"cli", "sub", "_INBOX.cli.abc", true},
		{"cli", "sub", "_INBOX.dispatcher.abc", false},
		{"cli", "sub", "reach.result.cli.r1", true},
		{"cli", "sub", "reach.result.echo-1.r1", false}, // another caller's result
		{"cli", "sub", "reach.result.>", false},
		{"cli", "pub", "$JS.API.DIRECT.GET.REACH_RESULTS.reach.result.cli.r1", true},
		{"cli", "pub", "$JS.API.DIRECT.GET.REACH_RESULTS.reach.result.echo-1.r1", false},
		{"cli", "pub", "$JS.API.DIRECT.GET.REACH_RESULTS", false},
		{"cli", "pub", "$JS.API.STREAM.MSG.GET.REACH_RESULTS", false},
		{"cli", "pub", "$JS.API.STREAM.INFO.REACH_RESULTS", false},
		{"cli", "sub", "reach.dlq.echo", true},
		{"cli", "sub", "reach.dlq.payment", false},
		{"cli", "sub", "reach.agent.echo-1", false},
		{"cli", "sub", "reach.task.echo", false},
	}
	for _, c := range checks {
		p, ok := perms[c.identity]
		if !ok {
			t.Fatalf("identity %q missing from %s", c.identity, setupScript)
		}
		sp := p.Pub
		if c.op == "sub" {
			sp = p.Sub
		}
		if got := permitted(sp, c.subject); got != c.want {
			verb := map[string]string{"pub": "publish to", "sub": "subscribe to"}[c.op]
			t.Errorf("%q may %s %q: got %v, want %v", c.identity, verb, c.subject, got, c.want)
		}
	}
	// An agent answers ACKED, PROCESSING…, FINISHED on the reply subject.
	r := perms["echo-1"].Resp
	switch {
	case r == nil:
		t.Error("agent echo-1 lacks allow_responses: it could not reply to deliveries")
	case r.MaxMsgs < 3:
		t.Errorf("agent allow_responses max = %d, want >= 3 (ACKED, PROCESSING, FINISHED)", r.MaxMsgs)
	case r.Expires < 2*time.Minute:
		t.Errorf("agent allow_responses expires = %v, want >= 2m (per-call timeouts reach 120 s)", r.Expires)
	}
}

// ---------------------------------------------------------------- live smoke test

// errRecorder collects a connection's asynchronous errors (permission
// violations arrive that way).
type errRecorder chan error

func (e errRecorder) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	select {
	case e <- err:
	default:
	}
}

// expect waits for an asynchronous error mentioning want.
func (e errRecorder) expect(t *testing.T, who, want string) {
	t.Helper()
	select {
	case err := <-e:
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got async error %v, want one about %q", who, err, want)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("%s: expected a permissions violation for %q, got none", who, want)
	}
}

func (e errRecorder) none(t *testing.T, who string) {
	t.Helper()
	for {
		select {
		case err := <-e:
			t.Errorf("%s: unexpected async error: %v", who, err)
		default:
			return
		}
	}
}

// TestNATSConfigServesAgentReach starts one embedded node from nats-1.conf
// (same operator mode, TLS and JetStream settings; cluster and fixed ports
// removed), runs the syncer as auth-sync does, and runs every role's basic
// flow against it as the identities setup.sh makes.
func TestNATSConfigServesAgentReach(t *testing.T) {
	g := setup(t)
	opts, root := loadNATSConfig(t, g, "nats-1")
	opts.Cluster = server.ClusterOpts{}
	opts.Routes, opts.RoutesStr = nil, ""
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.HTTPHost, opts.HTTPPort = "127.0.0.1", -1
	opts.LeafNode.Host, opts.LeafNode.Port = "127.0.0.1", -1
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server refuses nats-1.conf: %v", err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("embedded server from nats-1.conf did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The compose healthcheck URL answers 200 once JetStream is on.
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + s.MonitorAddr().String() + healthzPathQuery)
	if err != nil {
		t.Fatalf("GET %s: %v", healthzPathQuery, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s = %d, want 200", healthzPathQuery, resp.StatusCode)
	}

	ca := filepath.Join(root, "etc/agentreach/certs/ca.pem")
	connect := func(creds string) (*nats.Conn, errRecorder) {
		t.Helper()
		rec := make(errRecorder, 16)
		o, err := auth.ConnectOptions(creds)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(s.ClientURL(), append(o, nats.RootCAs(ca), nats.Timeout(2*time.Second), nats.ErrorHandler(rec.handler))...)
		if err != nil {
			t.Fatalf("connect as %s: %v", creds, err)
		}
		t.Cleanup(nc.Close)
		return nc, rec
	}
	if nc, err := nats.Connect(s.ClientURL(), nats.RootCAs(ca), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client without credentials connected")
	}
	plain, _ := auth.ConnectOptions(g.store.CredsFile("cli"))
	if nc, err := nats.Connect(strings.Replace(s.ClientURL(), "tls://", "nats://", 1), append(plain, nats.Timeout(2*time.Second))...); err == nil {
		nc.Close()
		t.Error("a client without TLS connected")
	}
	dnc, dErr := connect(g.store.CredsFile("dispatcher"))

	// dispatcher: provisions every bucket and stream; auth-sync seeds the
	// ACL and pushes the identities.
	djs, err := jetstream.New(dnc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, djs, streams.Topology{}); err != nil {
		t.Fatalf("dispatcher cannot provision the topology in account %s: %v", auth.AccountName, err)
	}
	policyKV, err := djs.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registry.PutPolicy(ctx, policyKV, policy.KeyACL, []byte(readFile(t, aclFile))); err != nil {
		t.Fatalf("the dispatcher identity cannot store %s: %v", aclFile, err)
	}
	snc, sErr := connect(g.store.SystemCredsFile())
	syncer, err := auth.NewSyncer(ctx, g.store, snc, dnc, auth.SyncConfig{})
	if err == nil {
		err = syncer.Start(ctx)
	}
	if err != nil {
		t.Fatalf("auth sync: %v", err)
	}
	defer syncer.Close()
	anc, aErr := connect(g.store.CredsFile("echo-1"))
	pnc, pErr := connect(g.store.CredsFile("cli"))
	if _, err := dnc.QueueSubscribe("reach.task.>", "dispatchers", func(m *nats.Msg) {
		_ = m.Respond(append([]byte("handled "), m.Data...))
	}); err != nil {
		t.Fatal(err)
	}

	// agent: registers in REACH_AGENTS, uses the idempotency store, answers
	// deliveries with several replies.
	ajs, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := ajs.KeyValue(ctx, streams.BucketAgents)
	if err != nil {
		t.Fatalf("agent cannot open %s: %v", streams.BucketAgents, err)
	}
	rec := `{"id":"echo-1","type":"echo","capabilities":["echo"],"max_concurrent":8,"weight":100,"active":0,"status":"ready","heartbeat_ms":5000,"version":"1.0.0"}`
	if _, err := agents.Put(ctx, "echo-1", []byte(rec)); err != nil {
		t.Errorf("agent cannot put its record: %v", err)
	}
	idem, err := ajs.KeyValue(ctx, streams.BucketIdempotency)
	if err != nil {
		t.Fatalf("agent cannot open %s: %v", streams.BucketIdempotency, err)
	}
	if _, err := idem.Put(ctx, "echo.cli.key1", []byte(`{"ok":true}`)); err != nil {
		t.Errorf("agent cannot store an idempotent result: %v", err)
	}
	if _, err := idem.Get(ctx, "echo.cli.key1"); err != nil {
		t.Errorf("agent cannot read an idempotent result: %v", err)
	}
	statuses := []string{"ACKED", "PROCESSING", "FINISHED"}
	if _, err := anc.Subscribe("reach.agent.echo-1", func(m *nats.Msg) {
		for _, st := range statuses {
			r := nats.NewMsg(m.Reply)
			r.Header.Set("Reach-Status", st)
			if st == "FINISHED" {
				r.Data = m.Data
			}
			_ = anc.PublishMsg(r)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := anc.Flush(); err != nil {
		t.Fatal(err)
	}

	// dispatcher → agent delivery, three replies on the dispatcher's inbox.
	inbox := dnc.NewRespInbox()
	replies, err := dnc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	delivery := nats.NewMsg("reach.agent.echo-1")
	delivery.Reply = inbox
	delivery.Header.Set("Reach-Capability", "echo")
	delivery.Data = []byte(`{"text":"hi"}`)
	if err := dnc.PublishMsg(delivery); err != nil {
		t.Fatal(err)
	}
	for _, want := range statuses {
		m, err := replies.NextMsg(2 * time.Second)
		if err != nil {
			t.Errorf("dispatcher: no %s reply from the agent (allow_responses?): %v", want, err)
			break
		}
		if got := m.Header.Get("Reach-Status"); got != want {
			t.Errorf("agent reply status = %q, want %q", got, want)
		}
	}

	// caller: direct tier, durable tier, results.
	if m, err := pnc.Request("reach.task.echo", []byte(`{"text":"hi"}`), 2*time.Second); err != nil {
		t.Errorf("caller cli cannot call reach.task.echo: %v", err)
	} else if string(m.Data) != `handled {"text":"hi"}` {
		t.Errorf("caller got %q", m.Data)
	}
	pjs, err := jetstream.New(pnc)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := pjs.Publish(ctx, "reach.submit.echo", []byte(`{"text":"hi"}`), jetstream.WithMsgID("cli.r1"))
	if err != nil {
		t.Errorf("caller cannot submit a durable task: %v", err)
	} else if ack.Stream != streams.StreamTasks {
		t.Errorf("reach.submit.echo landed in %q, want %s", ack.Stream, streams.StreamTasks)
	}
	results, err := pnc.SubscribeSync("reach.result.cli.r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := pnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := djs.Publish(ctx, "reach.result.cli.r1", []byte(`{"ok":true}`)); err != nil {
		t.Errorf("dispatcher cannot publish a durable result: %v", err)
	}
	if _, err := results.NextMsg(2 * time.Second); err != nil {
		t.Errorf("caller did not receive reach.result.cli.r1: %v", err)
	}

	// sys: system account requests.
	if _, err := snc.Request("$SYS.REQ.SERVER.PING", nil, 2*time.Second); err != nil {
		t.Errorf("sys cannot ping the servers: %v", err)
	}

	// Denials come back as asynchronous permission violations.
	for _, d := range []struct {
		nc   *nats.Conn
		rec  errRecorder
		who  string
		do   func(*nats.Conn) error
		want string
	}{
		{pnc, pErr, "cli", func(nc *nats.Conn) error { _, err := nc.SubscribeSync("reach.agent.>"); return err }, "reach.agent.>"},
		{pnc, pErr, "cli", func(nc *nats.Conn) error { _, err := nc.SubscribeSync("_INBOX.dispatcher.>"); return err }, "_INBOX.dispatcher.>"},
		{anc, aErr, "echo-1", func(nc *nats.Conn) error { return nc.Publish("reach.result.r1", nil) }, "reach.result.r1"},
		{anc, aErr, "echo-1", func(nc *nats.Conn) error { return nc.Publish("$KV.REACH_AGENTS.echo-2", nil) }, "REACH_AGENTS.echo-2"},
		{anc, aErr, "echo-1", func(nc *nats.Conn) error { return nc.Publish("$JS.API.STREAM.DELETE.REACH_TASKS", nil) }, "STREAM.DELETE"},
	} {
		if err := d.do(d.nc); err != nil {
			t.Fatal(err)
		}
		if err := d.nc.Flush(); err != nil && !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatal(err)
		}
		d.rec.expect(t, d.who, d.want)
	}
	for who, rec := range map[string]errRecorder{"dispatcher": dErr, "cli": pErr, "sys": sErr} {
		rec.none(t, who)
	}
	if _, err := djs.Stream(ctx, streams.StreamTasks); err != nil {
		t.Errorf("REACH_TASKS should survive the agent's delete attempt: %v", err)
	}
}

// ---------------------------------------------------------------- docker-compose.yml

// loadCompose loads the compose file with compose-go, the loader of Docker
// Compose itself: YAML (a key given twice is an error), the compose
// specification's schema, interpolation, normalisation and the
// consistency checks (depends_on, networks, named volumes declared). Every
// profile is on, paths stay as written (relative to deploy/), and no
// variable comes from the environment: it returns the ${VAR} names the
// file refers to.
func loadCompose(t *testing.T) (*types.Project, []string) {
	t.Helper()
	vars := map[string]bool{}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  ".",
		ConfigFiles: []types.ConfigFile{{Filename: composeFile}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.ResolvePaths = false
		o.Profiles = []string{"*"}
		o.Interpolate.LookupValue = func(name string) (string, bool) {
			vars[name] = true
			return "", false
		}
	})
	if err != nil {
		t.Fatalf("docker compose would refuse %s: %v", composeFile, err)
	}
	return p, sortedKeys(vars)
}

// TestComposeLoaderRefuses shows that the checks left to compose-go are
// made: the shipped file with one change each — a service with neither
// image nor build, a fixed container_name on a replicated dispatcher, a
// depends_on naming no service, an undeclared named volume — is refused by
// the loader; the shipped file itself (the control) loads.
func TestComposeLoaderRefuses(t *testing.T) {
	shipped := readFile(t, composeFile)
	load := func(body string) error {
		_, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
			WorkingDir:  ".",
			ConfigFiles: []types.ConfigFile{{Filename: composeFile, Content: []byte(body)}},
			Environment: types.Mapping{},
		}, func(o *loader.Options) {
			o.ResolvePaths = false
			o.Profiles = []string{"*"}
			o.SkipResolveEnvironment = true
		})
		return err
	}
	if err := load(shipped); err != nil {
		t.Fatalf("the shipped %s: %v", composeFile, err)
	}
	for name, edit := range map[string][2]string{
		"neither image nor build":       {"    image: natsio/nats-box:latest\n", ""},
		"container_name on 2 replicas":  {"  dispatcher-1:\n", "  dispatcher-1:\n    container_name: dispatcher\n    deploy:\n      replicas: 2\n"},
		"depends_on an unknown service": {"      auth-sync:\n        condition: service_started\n", "      auth-synk:\n        condition: service_started\n"},
		"an undeclared volume":          {"      - nats-3-data:/data\n", "      - nats-4-data:/data\n"},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(shipped, edit[0]) {
				t.Fatalf("%s no longer holds %q: update the test", composeFile, edit[0])
			}
			if err := load(strings.Replace(shipped, edit[0], edit[1], 1)); err == nil {
				t.Errorf("the loader accepts the file with %s", name)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// service returns the compose service name; the test fails without it.
func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	svc, ok := p.Services[name]
	if !ok {
		t.Fatalf("no compose service %s", name)
	}
	return svc
}

// envOf returns a service's environment.
func envOf(svc types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range svc.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// flagValue returns the value of --name (as "--name v" or "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func isAgentreach(svc types.ServiceConfig) bool {
	return strings.HasPrefix(svc.Image, "agentreach") || (svc.Build != nil && strings.HasSuffix(svc.Build.Dockerfile, "deploy/Dockerfile"))
}

func isNATS(svc types.ServiceConfig) bool { return strings.HasPrefix(svc.Image, "nats:") }

// isBind reports whether v is a bind mount of a deploy/ path.
func isBind(v types.ServiceVolumeConfig) bool {
	return v.Type == types.VolumeTypeBind && strings.HasPrefix(v.Source, ".")
}

func TestCompose(t *testing.T) {
	g := setup(t)
	p, vars := loadCompose(t)
	if len(vars) > 0 {
		t.Errorf("%s reads %v from the environment: the stack needs no secrets there (identities are credentials files)", composeFile, vars)
	}
	for _, want := range append(slices.Clone(natsNodes), "dispatcher-1", "dispatcher-2", "dispatcher-3", leafService, "demo", "auth-sync") {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("service %q is missing", want)
		}
	}
	usedVolumes := map[string]bool{}
	hostPorts := map[string]string{}

	for _, name := range sortedKeys(p.Services) {
		svc := p.Services[name]
		profiled := len(svc.Profiles) > 0
		// compose-go has refused a service with neither image nor build.
		if b := svc.Build; b != nil {
			ctxDir := filepath.Join(".", b.Context)
			if st, err := os.Stat(ctxDir); err != nil || !st.IsDir() {
				t.Errorf("service %s: build context %q is not a directory (relative to deploy/)", name, b.Context)
			}
			if b.Dockerfile != "" {
				if _, err := os.Stat(filepath.Join(ctxDir, b.Dockerfile)); err != nil {
					t.Errorf("service %s: dockerfile %q not found in context %q", name, b.Dockerfile, b.Context)
				}
			}
		}
		if !profiled && svc.Restart == "" {
			t.Errorf("service %s: set a restart policy", name)
		}

		// compose-go has checked that every target exists.
		for dep, d := range svc.DependsOn {
			target := p.Services[dep]
			switch {
			case d.Condition == types.ServiceConditionHealthy && target.HealthCheck == nil:
				t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			case !profiled && len(target.Profiles) > 0:
				t.Errorf("service %s (always started) depends on %s, which only starts with a profile", name, dep)
			}
		}

		for _, v := range svc.Volumes {
			switch {
			case v.Type == types.VolumeTypeVolume:
				usedVolumes[v.Source] = true // declared: compose-go checks
			case !isBind(v):
				t.Errorf("service %s: mount %s %q: bind deploy/ paths (./…) or named volumes only", name, v.Type, v.Source)
			default:
				if _, err := os.Stat(g.source(v.Source)); err != nil {
					t.Errorf("service %s: bind mount source %q does not exist (relative to deploy/) and %s does not make it", name, v.Source, setupScript)
				}
				if !v.ReadOnly {
					t.Errorf("service %s: bind mount %s is writable: mount configuration and credentials :ro", name, v.Source)
				}
			}
		}

		for _, port := range svc.Ports {
			host := port.HostIP + ":" + port.Published
			if other, dup := hostPorts[host]; dup {
				t.Errorf("services %s and %s both publish %s", other, name, host)
			}
			hostPorts[host] = name
			if port.HostIP != "127.0.0.1" {
				t.Errorf("service %s publishes %s on %q: loopback only (127.0.0.1)", name, port.Published, port.HostIP)
			}
		}
	}
	for _, v := range sortedKeys(p.Volumes) {
		if !usedVolumes[v] {
			t.Errorf("volume %q is declared but no service mounts it", v)
		}
	}
}

// hostPath maps a container path to the deploy/ path behind a bind mount.
func hostPath(svc types.ServiceConfig, containerPath string) (string, bool) {
	for _, v := range svc.Volumes {
		if !isBind(v) {
			continue
		}
		if containerPath == v.Target {
			return filepath.Clean(v.Source), true
		}
		if rest, ok := strings.CutPrefix(containerPath, v.Target+"/"); ok {
			return filepath.Join(v.Source, rest), true
		}
	}
	return "", false
}

// namedVolumeAt reports whether a named volume holds containerPath.
func namedVolumeAt(svc types.ServiceConfig, containerPath string) bool {
	for _, v := range svc.Volumes {
		if v.Type != types.VolumeTypeVolume {
			continue
		}
		if containerPath == v.Target || strings.HasPrefix(containerPath, strings.TrimSuffix(v.Target, "/")+"/") {
			return true
		}
	}
	return false
}

func TestComposeNATSServices(t *testing.T) {
	g := setup(t)
	p, _ := loadCompose(t)
	minor := natsServerMinor(t)
	var nodes []string
	for _, name := range sortedKeys(p.Services) {
		svc := p.Services[name]
		if !isNATS(svc) || name == leafService { // the leaf: TestComposeLeaf
			continue
		}
		nodes = append(nodes, name)
		t.Run(name, func(t *testing.T) {
			if img := svc.Image; !strings.HasPrefix(img, "nats:"+minor) {
				t.Errorf("image %q: use nats:%s-… to match the nats-server v%s the tests parse the configs with", img, minor, minor)
			}
			args := svc.Command
			conf, ok := flagValue(args, "config")
			if !ok {
				t.Fatalf("command %q has no --config", args)
			}
			if conf != natsConfMount+"/"+name+".conf" {
				t.Fatalf("--config %s: want %s/%s.conf", conf, natsConfMount, name)
			}
			host, ok := hostPath(svc, conf)
			if !ok {
				t.Fatalf("--config %s is not inside a bind mount", conf)
			}
			if rel, err := filepath.Rel(natsConfDir, host); err != nil || strings.HasPrefix(rel, "..") {
				t.Fatalf("--config %s maps to %s, outside deploy/%s", conf, host, natsConfDir)
			}
			if _, ok := containerPathOf(svc, authConf); !ok {
				t.Errorf("%s (made by %s) is not mounted beside the configs that include it", authConf, setupScript)
			}
			opts, root := loadNATSConfig(t, g, name)
			if opts.ServerName != name {
				t.Errorf("%s sets server_name %q; name it after the service", host, opts.ServerName)
			}
			for _, r := range opts.Routes {
				if _, ok := p.Services[r.Hostname()]; !ok {
					t.Errorf("route %s: %s is not a compose service", r, r.Hostname())
				}
			}
			if store, _ := strings.CutPrefix(opts.StoreDir, root); !namedVolumeAt(svc, store) {
				t.Errorf("JetStream store_dir %s is not on a named volume: data would not survive a container re-create", store)
			}
			if !namedVolumeAt(svc, "/data/jwt") {
				t.Error("the account resolver's /data/jwt is not on a named volume: pushed account JWTs would not survive a re-create")
			}
			for _, f := range []string{"ca.pem", "server.pem", "server-key.pem"} {
				if p, ok := hostPath(svc, "/etc/agentreach/certs/"+f); !ok || !strings.HasPrefix(p, "certs/") {
					t.Errorf("/etc/agentreach/certs/%s is not mounted from deploy/certs (made by %s)", f, setupScript)
				}
			}
			if len(envOf(svc)) > 0 {
				t.Errorf("environment %v: a NATS node needs none (no passwords)", sortedKeys(envOf(svc)))
			}

			var test string
			if svc.HealthCheck != nil {
				test = strings.Join(svc.HealthCheck.Test, " ")
			}
			if !strings.Contains(test, healthzPathQuery) {
				t.Errorf("healthcheck %q should query %s", test, healthzPathQuery)
			}
			if m := regexp.MustCompile(`https?://[^ "]+`).FindString(test); m != "" {
				u, err := url.Parse(m)
				if err != nil || u.Port() != strconv.Itoa(opts.HTTPPort) {
					t.Errorf("healthcheck URL %s: port should be the monitoring port %d", m, opts.HTTPPort)
				}
			}

			var published []int
			for _, port := range svc.Ports {
				published = append(published, int(port.Target))
			}
			if !slices.Contains(published, opts.Port) {
				t.Errorf("ports %v do not publish the client port %d", published, opts.Port)
			}
		})
	}
	if !slices.Equal(nodes, natsNodes) {
		t.Errorf("NATS services = %v, want %v", nodes, natsNodes)
	}
}

// credsOf returns the identity whose credentials the container path file
// of svc is, with the host file behind it.
func credsOf(t *testing.T, g *generated, svc types.ServiceConfig, file string) (auth.Identity, string, bool) {
	t.Helper()
	host, ok := hostPath(svc, file)
	if !ok {
		return auth.Identity{}, "", false
	}
	id, ok := g.identity(t, g.source(host))
	return id, host, ok
}

func TestComposeAgentreachServices(t *testing.T) {
	g := setup(t)
	p, _ := loadCompose(t)
	heartbeats := map[string]string{}
	// The node each dispatcher dials first: one dispatcher per node.
	dispatcherNode := map[string]string{}
	demoAgents := map[string]bool{}
	for _, id := range g.store.Identities() {
		if id.Role == auth.RoleAgent {
			demoAgents[id.Name] = false
		}
	}
	seen := 0
	for _, name := range sortedKeys(p.Services) {
		svc := p.Services[name]
		if !isAgentreach(svc) {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			args := []string(svc.Command)
			if len(args) == 0 {
				t.Fatal("no command: say which agentreach subcommand runs")
			}
			sub := args[0]
			if !slices.Contains(agentreachSubcommands, sub) {
				t.Fatalf("agentreach subcommand %q is not one of %v", sub, agentreachSubcommands)
			}
			if sub == "auth" && (len(args) < 2 || args[1] != "sync") {
				t.Fatalf("agentreach auth %v: the stack runs only auth sync", args[1:])
			}
			for _, a := range args[1:] {
				if !strings.HasPrefix(a, "-") {
					continue
				}
				flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if !strings.HasPrefix(a, "--") || !slices.Contains(agentreachFlags, flag) {
					t.Errorf("unknown flag %q; agentreach has --%s", a, strings.Join(agentreachFlags, ", --"))
				}
			}
			svcEnv := envOf(svc)
			for k := range svcEnv {
				flag, ok := strings.CutPrefix(k, "AGENTREACH_")
				if f := strings.ToLower(strings.ReplaceAll(flag, "_", "-")); !ok || !slices.Contains(agentreachFlags, f) {
					t.Errorf("environment %s matches no flag (--%s)", k, f)
				}
			}
			value := func(flag string) string {
				if v, ok := flagValue(args, flag); ok {
					return v
				}
				return svcEnv["AGENTREACH_"+strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))]
			}

			// --server: every NATS node over TLS, no credentials in the URL.
			srv := value("server")
			if srv == "" {
				t.Error("no --server / AGENTREACH_SERVER")
			}
			var hosts []string
			first := ""
			for _, s := range strings.Split(srv, ",") {
				u, err := url.Parse(strings.TrimSpace(s))
				if err != nil {
					t.Errorf("server URL %q: %v", s, err)
					continue
				}
				if u.Scheme != "tls" || u.Port() != "4222" {
					t.Errorf("server URL %q: want tls://<node>:4222", s)
				}
				if u.User != nil {
					t.Errorf("server URL %q carries credentials; pass --creds", s)
				}
				if !isNATS(p.Services[u.Hostname()]) {
					t.Errorf("server URL %q: %s is not a NATS service", s, u.Hostname())
				}
				hosts = append(hosts, u.Hostname())
			}
			if len(hosts) > 0 {
				first = hosts[0]
			}
			sort.Strings(hosts)
			switch {
			case sub == "demo":
				// The demo agents run at the edge, behind the leaf node
				// server, on the hub's JetStream.
				if !slices.Equal(hosts, []string{leafService}) || value("js-domain") != auth.HubDomain {
					t.Errorf("demo --server %v --js-domain %q: want the leaf node server %s and the hub's domain %q",
						hosts, value("js-domain"), leafService, auth.HubDomain)
				}
			case !slices.Equal(hosts, natsNodes):
				t.Errorf("--server lists %v, want all of %v so clients fail over", hosts, natsNodes)
			}
			if ca, ok := hostPath(svc, value("tls-ca")); !ok || ca != "certs/ca.pem" {
				t.Errorf("--tls-ca %q is not deploy/certs/ca.pem (made by %s)", value("tls-ca"), setupScript)
			}

			// Credentials: an identity of the right role, none shared across
			// roles, never a password.
			want := subcommandRole[sub]
			if sub == "demo" {
				dir := value("creds-dir")
				if dir == "" || value("creds") != "" {
					t.Fatal("demo runs one identity per agent: --creds-dir, not --creds")
				}
				for id := range demoAgents {
					got, host, ok := credsOf(t, g, svc, dir+"/"+id+".creds")
					if !ok || got.Role != auth.RoleAgent {
						t.Errorf("demo agent %s: %s/%s.creds is not its agent identity's credentials (%s)", id, dir, id, host)
						continue
					}
					demoAgents[id] = true
				}
			} else if id, host, ok := credsOf(t, g, svc, value("creds")); !ok {
				t.Errorf("--creds %q is no identity's credentials of %s (%s)", value("creds"), setupScript, host)
			} else if id.Role != want {
				t.Errorf("agentreach %s runs as %s %s, want a %s", sub, id.Role, id.Name, want)
			}
			for _, k := range []string{"AGENTREACH_USER", "AGENTREACH_PASSWORD", "AGENTREACH_TOKEN"} {
				if svcEnv[k] != "" {
					t.Errorf("%s: identities are credentials files, not passwords", k)
				}
			}

			if hb := value("heartbeat"); hb != "" {
				if _, err := time.ParseDuration(hb); err != nil {
					t.Errorf("heartbeat %q: %v", hb, err)
				}
				heartbeats[name] = hb
			}

			switch sub {
			case "dispatcher":
				r, err := strconv.Atoi(value("replicas"))
				if err != nil || r < 1 || r > len(natsNodes) {
					t.Errorf("dispatcher --replicas %q: want 1..%d (3 on this cluster)", value("replicas"), len(natsNodes))
				} else if r != len(natsNodes) {
					t.Errorf("dispatcher --replicas %d: use %d (R3 on a 3-node cluster)", r, len(natsNodes))
				}
				// Beside its own node: dials it first, the others only as
				// fallbacks (not shuffled), and starts once it is healthy.
				if !slices.Contains(args, "--no-randomize") && svcEnv["AGENTREACH_NO_RANDOMIZE"] != "true" {
					t.Error("dispatcher without --no-randomize: it would dial a random node, not its own first")
				}
				if other, dup := dispatcherNode[first]; dup {
					t.Errorf("dispatchers %s and %s both dial %s first", other, name, first)
				}
				dispatcherNode[first] = name
				if d, ok := svc.DependsOn[first]; !ok || d.Condition != types.ServiceConditionHealthy {
					t.Errorf("dispatcher does not wait for its node %s to be healthy", first)
				}
				if v, ok := hostPath(svc, value("verifier")); !ok || filepath.Clean(g.source(v)) != filepath.Clean(g.store.VerifierFile()) {
					t.Errorf("--verifier %q is not the store's verifier key: the dispatchers would not check Reach-Source or the ACL", value("verifier"))
				}
				checkGateway(t, g, svc, value)
			case "auth":
				dir, ok := hostPath(svc, value("dir"))
				if !ok || filepath.Clean(g.source(dir)) != filepath.Clean(g.store.Dir()) {
					t.Errorf("auth sync --dir %q is not the store setup.sh makes", value("dir"))
				}
				if acl, ok := hostPath(svc, value("seed-acl")); !ok || acl != aclFile {
					t.Errorf("auth sync --seed-acl %q is not deploy/%s", value("seed-acl"), aclFile)
				}
				// The leaf node server follows the store too: pushed to
				// directly, since the hub's pushes do not reach it.
				if u, err := url.Parse(value("leaf-server")); err != nil || u.Scheme != "tls" || u.Hostname() != leafService || u.Port() != "4222" {
					t.Errorf("auth sync --leaf-server %q: want tls://%s:4222, or a revoked identity keeps its connection at the edge", value("leaf-server"), leafService)
				}
			}
		})
	}
	if seen == 0 {
		t.Error("no agentreach services found")
	}
	if nodes := sortedKeys(dispatcherNode); !slices.Equal(nodes, natsNodes) {
		t.Errorf("dispatchers dial %v first (%v), want one beside each node of %v", nodes, dispatcherNode, natsNodes)
	}
	for id, runs := range demoAgents {
		if !runs {
			t.Errorf("%s makes agent %s, which no service runs as", setupScript, id)
		}
	}
	var distinct []string
	for _, hb := range heartbeats {
		if !slices.Contains(distinct, hb) {
			distinct = append(distinct, hb)
		}
	}
	if len(distinct) > 1 {
		t.Errorf("heartbeat differs between services %v: REACH_AGENTS expires records after 3 × the dispatchers' heartbeat", heartbeats)
	}

	// nats-box authenticates like any other client: an identity, the CA, and
	// its own inbox prefix.
	if nb, ok := p.Services["nats-box"]; ok {
		e := envOf(nb)
		id, _, ok := credsOf(t, g, nb, e["NATS_CREDS"])
		if !ok {
			t.Errorf("nats-box NATS_CREDS %q is no identity's credentials", e["NATS_CREDS"])
		} else if v, _ := flagValue(nb.Command, "inbox-prefix"); v != auth.InboxPrefix(id.Name) {
			t.Errorf("nats-box --inbox-prefix %q: %s may read replies only under %s", v, id.Name, auth.InboxPrefix(id.Name))
		}
		if ca, ok := hostPath(nb, e["NATS_CA"]); !ok || ca != "certs/ca.pem" {
			t.Errorf("nats-box NATS_CA %q is not deploy/certs/ca.pem", e["NATS_CA"])
		}
	}
}

// checkGateway checks a dispatcher's HTTP gateway: on every interface of
// its container, published on the host's loopback, over HTTPS with a
// certificate setup.sh makes that the stack's CA signed for localhost (the
// host's curl --cacert deploy/certs/ca.pem https://localhost:8080/healthz).
func checkGateway(t *testing.T, g *generated, svc types.ServiceConfig, value func(string) string) {
	t.Helper()
	host, port, err := net.SplitHostPort(value("http"))
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("--http %q: want 0.0.0.0:<port>, so the published port reaches it", value("http"))
	}
	published := false
	for _, p := range svc.Ports {
		published = published || strconv.Itoa(int(p.Target)) == port
	}
	if !published {
		t.Errorf("the gateway's port %s is not published", port)
	}
	cert, certOK := hostPath(svc, value("http-cert"))
	key, keyOK := hostPath(svc, value("http-key"))
	if !certOK || !keyOK {
		t.Fatalf("--http-cert %q and --http-key %q are not bind-mounted files: the stack runs TLS, the gateway too", value("http-cert"), value("http-key"))
	}
	pair, err := tls.LoadX509KeyPair(g.source(cert), g.source(key))
	if err != nil {
		t.Fatalf("--http-cert, --http-key: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	ca, ok := hostPath(svc, value("tls-ca"))
	roots := x509.NewCertPool()
	if !ok || !roots.AppendCertsFromPEM([]byte(readFile(t, g.source(ca)))) {
		t.Fatalf("--tls-ca %q: no CA certificate", value("tls-ca"))
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"}); err != nil {
		t.Errorf("the gateway's certificate %s does not serve https://localhost with the stack's CA: %v", cert, err)
	}
}

// ---------------------------------------------------------------- Dockerfile

func TestDockerfile(t *testing.T) {
	text := readFile(t, dockerfile)
	var froms []string
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, l)
		if strings.HasPrefix(l, "FROM ") {
			froms = append(froms, l)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, got FROM lines %q", froms)
	}
	builder := regexp.MustCompile(`^FROM golang:(\d+\.\d+)\S* AS (\S+)$`).FindStringSubmatch(froms[0])
	if builder == nil {
		t.Fatalf("first stage %q: want FROM golang:<version> AS <name>", froms[0])
	}
	goMod := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(readFile(t, filepath.Join("..", "go.mod")))
	if goMod == nil || goMod[1] != builder[1] {
		t.Errorf("builder golang:%s does not match go.mod's go directive %v", builder[1], goMod)
	}
	final := froms[len(froms)-1]
	if !strings.Contains(final, "gcr.io/distroless/static") && !strings.Contains(final, "alpine") {
		t.Errorf("runtime stage %q: want distroless static or alpine", final)
	}

	for _, want := range []string{
		"CGO_ENABLED=0",
		"go build -trimpath -o /agentreach ./cmd/agentreach",
		"COPY go.mod go.sum ./",
		"COPY --from=" + builder[2] + " /agentreach /agentreach",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q", dockerfile, want)
		}
	}
	if i, j := strings.Index(text, "CGO_ENABLED=0"), strings.Index(text, "go build"); i > j {
		t.Errorf("CGO_ENABLED=0 must be set before go build")
	}
	last := lines[len(lines)-1]
	for _, l := range lines {
		if strings.HasPrefix(l, "ENTRYPOINT") {
			last = l
		}
	}
	var entry []string
	if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(last, "ENTRYPOINT"))), &entry); err != nil || !slices.Equal(entry, []string{"/agentreach"}) {
		t.Errorf("want ENTRYPOINT [\"/agentreach\"] (exec form), got %q", last)
	}

	// The runtime image runs up by default, its variables are flags of up,
	// and it exposes the ports they listen on.
	var cmd []string
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "CMD ") }); i < 0 ||
		json.Unmarshal([]byte(strings.TrimPrefix(lines[i], "CMD ")), &cmd) != nil || !slices.Equal(cmd, []string{"up"}) {
		t.Errorf(`want CMD ["up"] (exec form): the image runs a whole stack by default`)
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(AGENTREACH_[A-Z_]+)=(\S+)`).FindAllStringSubmatch(strings.Join(lines[slices.Index(lines, final):], "\n"), -1) {
		env[m[1]] = m[2]
		if f := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(m[1], "AGENTREACH_"), "_", "-")); !slices.Contains(upFlags, f) {
			t.Errorf("ENV %s matches no flag of agentreach up (--%s)", m[1], f)
		}
	}
	exposed := regexp.MustCompile(`(?m)^EXPOSE (.+)$`).FindStringSubmatch(text)
	for _, v := range []string{"AGENTREACH_NATS_LISTEN", "AGENTREACH_HTTP"} {
		host, port, err := net.SplitHostPort(env[v])
		if err != nil || host != "0.0.0.0" {
			t.Errorf("ENV %s=%q: want 0.0.0.0:<port>, or a published port reaches nothing", v, env[v])
		} else if exposed == nil || !slices.Contains(strings.Fields(exposed[1]), port) {
			t.Errorf("ENV %s listens on %s, which EXPOSE does not list", v, port)
		}
	}
	if !strings.Contains(text, "COPY --from="+builder[2]+" --chown=65532:65532 /out/data "+env["AGENTREACH_DATA_DIR"]+"\n") {
		t.Errorf("the data dir %q is not made owned by the runtime user (65532): up could not write it", env["AGENTREACH_DATA_DIR"])
	}

	// What the build copies exists (the context is the repository root).
	for _, p := range []string{"go.mod", "go.sum", "cmd/agentreach"} {
		if _, err := os.Stat(filepath.Join("..", p)); err != nil {
			t.Errorf("the build needs %s: %v", p, err)
		}
	}
	if ignore, err := os.ReadFile(dockerfile + ".dockerignore"); err == nil {
		for _, l := range strings.Split(string(ignore), "\n") {
			l = strings.TrimSpace(l)
			for _, needed := range []string{"go.mod", "go.sum", "cmd", "*.go", "**/*.go", "streams", "."} {
				if l == needed || l == "/"+needed {
					t.Errorf("%s.dockerignore excludes %q, which the build needs", dockerfile, l)
				}
			}
		}
	}
}

// TestReadmeCommands keeps the README in step with the stack and the CLI.
func TestReadmeCommands(t *testing.T) {
	text := readFile(t, "README.md")
	for _, want := range []string{
		"deploy/setup.sh",
		"docker compose -f deploy/docker-compose.yml up -d",
		"agentreach auth revoke",
		"kv ls REACH_AGENTS",
		"stream ls",
		"--scale dispatcher-1=",
		"sync_interval",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README.md should mention %q", want)
		}
	}
	// Every agentreach subcommand the README shows (in code blocks and
	// inline code) exists.
	var code []string
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			code = append(code, l)
		}
	}
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(text, -1) {
		code = append(code, m[1])
	}
	cmd := regexp.MustCompile(`(?:^|[\s/])agentreach ([a-z][a-z-]*)`)
	for _, l := range code {
		for _, m := range cmd.FindAllStringSubmatch(l, -1) {
			if !slices.Contains(agentreachSubcommands, m[1]) {
				t.Errorf("README.md runs `agentreach %s`, not one of %v: %q", m[1], agentreachSubcommands, l)
			}
		}
	}
}
