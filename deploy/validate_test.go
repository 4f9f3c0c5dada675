package deploy

// Static validation of the deploy/ folder: there is no Docker engine in CI,
// so these tests check what can be checked without one.
//
//   - The NATS configs go through the real nats-server config parser (the
//     version this module depends on), and a single embedded node started
//     from nats-1.conf (cluster removed) serves the Agent-Reach flows with
//     the configured users, permissions and JetStream settings.
//   - docker-compose.yml is read with go.yaml.in/yaml/v3 (the YAML
//     library of the whole project) and cross-checked against the NATS configs,
//     .env.example, the Dockerfile and the agentreach CLI surface.
//   - The Dockerfile is checked line by line.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/agent-reach/agentreach/streams"
)

// The agentreach CLI surface the compose file may use.
var (
	agentreachSubcommands = []string{"up", "dispatcher", "demo", "agents", "call"}
	// Every flag can also come from AGENTREACH_<FLAG_NAME_UPPER_SNAKE>.
	agentreachFlags = []string{"server", "user", "password", "token", "creds", "nkey",
		"tls-ca", "tls-cert", "tls-key", "replicas", "heartbeat"}
	// The NATS user each subcommand should run as.
	subcommandUser = map[string]string{
		"dispatcher": "dispatcher", "demo": "agent", "agents": "agent", "call": "publisher",
	}
)

const (
	composeFile    = "docker-compose.yml"
	envExampleFile = ".env.example"
	dockerfile     = "Dockerfile"
	natsConfDir    = "nats"
	// What the compose healthchecks ask of every NATS node.
	healthzPathQuery = "/healthz?js-enabled-only=true"
	// The account that owns Agent-Reach's buckets and streams.
	appAccount = "AGENTREACH"
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

var safePassword = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

// envExample returns the KEY=VALUE pairs of .env.example.
func envExample(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for i, line := range strings.Split(readFile(t, envExampleFile), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			t.Fatalf("%s:%d: expected KEY=VALUE, got %q", envExampleFile, i+1, line)
		}
		if _, dup := env[k]; dup {
			t.Fatalf("%s:%d: %s is set twice", envExampleFile, i+1, k)
		}
		env[k] = v
	}
	return env
}

// loadNATSConfig parses nats/<name> with the nats-server parser, the
// variables of .env.example set in the environment.
func loadNATSConfig(t *testing.T, name string) *server.Options {
	t.Helper()
	for k, v := range envExample(t) {
		t.Setenv(k, v)
	}
	path := filepath.Join(natsConfDir, name)
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server rejects %s: %v", path, err)
	}
	return opts
}

func usersByName(opts *server.Options) map[string]*server.User {
	m := map[string]*server.User{}
	for _, u := range opts.Users {
		m[u.Username] = u
	}
	return m
}

var (
	confQuoted = regexp.MustCompile(`"[^"]*"`)
	confVar    = regexp.MustCompile(`\$([A-Za-z_][A-Za-z0-9_]*)`)
)

// natsConfVars lists the environment variables the NATS configs reference
// ($NAME outside comments and quoted strings).
func natsConfVars(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(natsConfDir, "*.conf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no NATS configs in %s (%v)", natsConfDir, err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		for _, line := range strings.Split(readFile(t, f), "\n") {
			line = confQuoted.ReplaceAllString(line, `""`)
			if i := strings.Index(line, "#"); i >= 0 {
				line = line[:i]
			}
			for _, m := range confVar.FindAllStringSubmatch(line, -1) {
				seen[m[1]] = true
			}
		}
	}
	return sortedKeys(seen)
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

// ---------------------------------------------------------------- .env.example

func TestEnvExample(t *testing.T) {
	env := envExample(t)
	seenValue := map[string]string{}
	for _, k := range sortedKeys(env) {
		v := env[k]
		if !safePassword.MatchString(v) {
			t.Errorf("%s: %s=%q: use letters and digits starting with a letter; nats-server parses $%s like a config value", envExampleFile, k, v, k)
		}
		if other, dup := seenValue[v]; dup {
			t.Errorf("%s: %s and %s share a value; keep them distinct so the tests can tell the users apart", envExampleFile, k, other)
		}
		seenValue[v] = k
	}
	want := map[string]bool{}
	for _, v := range natsConfVars(t) {
		want[v] = true
	}
	for _, v := range composeVars(t, loadCompose(t)) {
		want[v] = true
	}
	for _, k := range sortedKeys(want) {
		if _, ok := env[k]; !ok {
			t.Errorf("%s lacks %s, which the NATS configs or %s reference", envExampleFile, k, composeFile)
		}
	}
	for _, k := range sortedKeys(env) {
		if !want[k] {
			t.Errorf("%s sets %s, which nothing references", envExampleFile, k)
		}
	}
}

// ---------------------------------------------------------------- NATS configs

func TestNATSConfigs(t *testing.T) {
	env := envExample(t)
	var first *server.Options
	for _, node := range natsNodes {
		t.Run(node, func(t *testing.T) {
			opts := loadNATSConfig(t, node+".conf")
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

			// Accounts and users.
			if opts.SystemAccount != "SYS" {
				t.Errorf("system_account = %q, want SYS", opts.SystemAccount)
			}
			var accounts []string
			for _, a := range opts.Accounts {
				accounts = append(accounts, a.Name)
			}
			if !slices.Contains(accounts, appAccount) {
				t.Errorf("accounts %v lack %s", accounts, appAccount)
			}
			users := usersByName(opts)
			for user, account := range map[string]string{
				"dispatcher": appAccount, "agent": appAccount, "publisher": appAccount, "sys": "SYS",
			} {
				u, ok := users[user]
				switch {
				case !ok:
					t.Errorf("user %q is missing", user)
				case u.Account == nil || u.Account.Name != account:
					t.Errorf("user %q is not in account %s", user, account)
				case u.Password == "":
					t.Errorf("user %q has no password", user)
				}
			}
			if len(users) != 4 {
				t.Errorf("users = %v, want exactly dispatcher, agent, publisher, sys", sortedKeys(users))
			}
			for user, envVar := range map[string]string{
				"dispatcher": "DISPATCHER_PASS", "agent": "AGENT_PASS", "publisher": "PUBLISHER_PASS", "sys": "SYS_PASS",
			} {
				if u := users[user]; u != nil && u.Password != env[envVar] {
					t.Errorf("user %q: password does not come from $%s", user, envVar)
				}
			}

			// The nodes differ only in server_name.
			if first == nil {
				first = opts
				return
			}
			if opts.Cluster.Name != first.Cluster.Name || opts.StoreDir != first.StoreDir ||
				opts.SyncAlways != first.SyncAlways || len(opts.Users) != len(first.Users) ||
				len(opts.Routes) != len(first.Routes) {
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
	syncDoc := commentAbove(t, text, "sync_interval: always")
	for _, want := range []string{"2 minutes", "power loss", "throughput"} {
		if !strings.Contains(syncDoc, want) {
			t.Errorf("the comment above sync_interval should explain the trade-off (mention %q); got:\n%s", want, syncDoc)
		}
	}
	if doc := commentAbove(t, text, "allow_responses:"); !strings.Contains(doc, "reply") {
		t.Errorf("the comment above allow_responses should say agents need it to reply; got:\n%s", doc)
	}
}

// permitted mirrors the server's rule for a literal subject: allowed by
// some allow entry (or no allow list), and by no deny entry.
func permitted(sp *server.SubjectPermission, subject string) bool {
	if sp == nil {
		return true
	}
	ok := len(sp.Allow) == 0
	for _, f := range sp.Allow {
		if server.SubjectMatchesFilter(subject, f) {
			ok = true
		}
	}
	for _, f := range sp.Deny {
		if server.SubjectMatchesFilter(subject, f) {
			ok = false
		}
	}
	return ok
}

func TestNATSPermissions(t *testing.T) {
	users := usersByName(loadNATSConfig(t, "nats-1.conf"))
	type check struct {
		user, op, subject string
		want              bool
	}
	checks := []check{
		// dispatcher: everything Agent-Reach, JetStream and KV.
		{"dispatcher", "sub", "reach.task.echo", true},
		{"dispatcher", "sub", "reach.broadcast.echo", true},
		{"dispatcher", "sub", "reach.api.agents", true},
		{"dispatcher", "sub", "_INBOX.abc", true},
		{"dispatcher", "sub", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.REACH_TASKS.dispatcher", true},
		{"dispatcher", "pub", "reach.agent.echo-1", true},
		{"dispatcher", "pub", "reach.result.r1", true},
		{"dispatcher", "pub", "reach.dlq.echo", true},
		{"dispatcher", "pub", "reach.review.echo", true},
		{"dispatcher", "pub", "reach.event.echo", true},
		{"dispatcher", "pub", "_INBOX.abc", true},
		{"dispatcher", "pub", "$JS.API.STREAM.CREATE.REACH_TASKS", true},
		{"dispatcher", "pub", "$JS.ACK.REACH_TASKS.dispatcher.1.1.1.1.0", true},
		{"dispatcher", "pub", "$KV.REACH_POLICY.echo", true},
		{"dispatcher", "pub", "$SYS.REQ.SERVER.PING", false},
		{"dispatcher", "pub", "other.subject", false},

		// agent: its deliveries, its registry records, replies via allow_responses.
		{"agent", "sub", "reach.agent.echo-1", true},
		{"agent", "sub", "_INBOX.abc", true},
		{"agent", "sub", "reach.task.echo", false},
		{"agent", "sub", "reach.result.r1", false},
		{"agent", "pub", "$KV.REACH_AGENTS.echo-1", true},
		{"agent", "pub", "$KV.REACH_CAPS.echo", true},
		{"agent", "pub", "$KV.REACH_IDEMPOTENCY.key1", true},
		{"agent", "pub", "$JS.API.STREAM.INFO.KV_REACH_AGENTS", true},
		{"agent", "pub", "$JS.API.DIRECT.GET.KV_REACH_IDEMPOTENCY", true},
		{"agent", "pub", "$JS.API.STREAM.MSG.GET.KV_REACH_IDEMPOTENCY", true},
		{"agent", "pub", "reach.task.risk.score", true},
		{"agent", "pub", "$KV.REACH_POLICY.echo", false},
		{"agent", "pub", "$JS.API.STREAM.DELETE.REACH_TASKS", false},
		{"agent", "pub", "$JS.API.STREAM.PURGE.KV_REACH_AGENTS", false},
		{"agent", "pub", "$JS.API.STREAM.UPDATE.KV_REACH_AGENTS", false},
		{"agent", "pub", "$JS.API.CONSUMER.DELETE.REACH_TASKS.dispatcher", false},
		{"agent", "pub", "reach.result.r1", false},
		{"agent", "pub", "reach.agent.other-1", false},
		{"agent", "pub", "_INBOX.abc", false}, // only as a response, see below

		// publisher: calls and results only.
		{"publisher", "pub", "reach.task.echo", true},
		{"publisher", "pub", "reach.broadcast.echo", true},
		{"publisher", "pub", "reach.submit.echo", true},
		{"publisher", "pub", "reach.agent.echo-1", false},
		{"publisher", "pub", "reach.api.breakers", false},
		{"publisher", "pub", "$KV.REACH_AGENTS.echo-1", false},
		{"publisher", "pub", "$JS.API.STREAM.DELETE.REACH_TASKS", false},
		{"publisher", "sub", "_INBOX.abc", true},
		{"publisher", "sub", "reach.result.r1", true},
		{"publisher", "sub", "reach.agent.echo-1", false},
		{"publisher", "sub", "reach.task.echo", false},
	}
	for _, c := range checks {
		u := users[c.user]
		if u == nil {
			t.Fatalf("user %q missing", c.user)
		}
		if u.Permissions == nil {
			t.Errorf("user %q has no permissions (everything allowed)", c.user)
			continue
		}
		sp := u.Permissions.Publish
		if c.op == "sub" {
			sp = u.Permissions.Subscribe
		}
		if got := permitted(sp, c.subject); got != c.want {
			verb := map[string]string{"pub": "publish to", "sub": "subscribe to"}[c.op]
			t.Errorf("user %q may %s %q: got %v, want %v", c.user, verb, c.subject, got, c.want)
		}
	}

	// An agent answers ACKED, PROCESSING…, FINISHED on the reply subject.
	r := users["agent"].Permissions.Response
	switch {
	case r == nil:
		t.Error("user agent lacks allow_responses: it could not reply to deliveries")
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
func (e errRecorder) expect(t *testing.T, user, want string) {
	t.Helper()
	select {
	case err := <-e:
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got async error %v, want one about %q", user, err, want)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("%s: expected a permissions violation for %q, got none", user, want)
	}
}

func (e errRecorder) none(t *testing.T, user string) {
	t.Helper()
	for {
		select {
		case err := <-e:
			t.Errorf("%s: unexpected async error: %v", user, err)
		default:
			return
		}
	}
}

// TestNATSConfigServesAgentReach starts one embedded node from nats-1.conf
// (same accounts, users, permissions, JetStream settings; cluster and fixed
// ports removed) and runs every role's basic flow against it.
func TestNATSConfigServesAgentReach(t *testing.T) {
	env := envExample(t)
	opts := loadNATSConfig(t, "nats-1.conf")
	opts.Cluster = server.ClusterOpts{}
	opts.Routes, opts.RoutesStr = nil, ""
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.HTTPHost, opts.HTTPPort = "127.0.0.1", -1
	opts.StoreDir = t.TempDir()
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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

	connect := func(user, pass string) (*nats.Conn, errRecorder) {
		t.Helper()
		rec := make(errRecorder, 16)
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, pass),
			nats.Timeout(2*time.Second), nats.ErrorHandler(rec.handler))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc, rec
	}
	dnc, dErr := connect("dispatcher", env["DISPATCHER_PASS"])
	anc, aErr := connect("agent", env["AGENT_PASS"])
	pnc, pErr := connect("publisher", env["PUBLISHER_PASS"])
	snc, sErr := connect("sys", env["SYS_PASS"])
	if _, err := nats.Connect(s.ClientURL(), nats.UserInfo("agent", "wrong"), nats.Timeout(2*time.Second)); err == nil {
		t.Error("a wrong password was accepted")
	}

	// dispatcher: provisions every bucket and stream, serves reach.task.>.
	djs, err := jetstream.New(dnc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, djs, streams.Topology{}); err != nil {
		t.Fatalf("dispatcher cannot provision the topology in account %s: %v", appAccount, err)
	}
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
	if _, err := idem.Put(ctx, "key1", []byte(`{"ok":true}`)); err != nil {
		t.Errorf("agent cannot store an idempotent result: %v", err)
	}
	if _, err := idem.Get(ctx, "key1"); err != nil {
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

	// agent → another agent through the dispatchers.
	if _, err := anc.Request("reach.task.risk.score", []byte(`{}`), 2*time.Second); err != nil {
		t.Errorf("agent cannot call reach.task.>: %v", err)
	}

	// publisher: direct tier, durable tier, results.
	if m, err := pnc.Request("reach.task.echo", []byte(`{"text":"hi"}`), 2*time.Second); err != nil {
		t.Errorf("publisher cannot call reach.task.echo: %v", err)
	} else if string(m.Data) != `handled {"text":"hi"}` {
		t.Errorf("publisher got %q", m.Data)
	}
	pjs, err := jetstream.New(pnc)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := pjs.Publish(ctx, "reach.submit.echo", []byte(`{"text":"hi"}`), jetstream.WithMsgID("r1"))
	if err != nil {
		t.Errorf("publisher cannot submit a durable task: %v", err)
	} else if ack.Stream != streams.StreamTasks {
		t.Errorf("reach.submit.echo landed in %q, want %s", ack.Stream, streams.StreamTasks)
	}
	results, err := pnc.SubscribeSync("reach.result.r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := pnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := djs.Publish(ctx, "reach.result.r1", []byte(`{"ok":true}`)); err != nil {
		t.Errorf("dispatcher cannot publish a durable result: %v", err)
	}
	if _, err := results.NextMsg(2 * time.Second); err != nil {
		t.Errorf("publisher did not receive reach.result.r1: %v", err)
	}

	// sys: system account requests.
	if _, err := snc.Request("$SYS.REQ.SERVER.PING", nil, 2*time.Second); err != nil {
		t.Errorf("sys cannot ping the servers: %v", err)
	}

	// Denials come back as asynchronous permission violations.
	for _, d := range []struct {
		nc   *nats.Conn
		rec  errRecorder
		user string
		do   func(*nats.Conn) error
		want string
	}{
		{pnc, pErr, "publisher", func(nc *nats.Conn) error { _, err := nc.SubscribeSync("reach.agent.>"); return err }, "reach.agent.>"},
		{anc, aErr, "agent", func(nc *nats.Conn) error { return nc.Publish("reach.result.r1", nil) }, "reach.result.r1"},
		{anc, aErr, "agent", func(nc *nats.Conn) error { return nc.Publish("$JS.API.STREAM.DELETE.REACH_TASKS", nil) }, "STREAM.DELETE"},
	} {
		if err := d.do(d.nc); err != nil {
			t.Fatal(err)
		}
		if err := d.nc.Flush(); err != nil && !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatal(err)
		}
		d.rec.expect(t, d.user, d.want)
	}
	for user, rec := range map[string]errRecorder{"dispatcher": dErr, "agent": aErr, "publisher": pErr, "sys": sErr} {
		rec.none(t, user)
	}
	if _, err := djs.Stream(ctx, streams.StreamTasks); err != nil {
		t.Errorf("REACH_TASKS should survive the agent's delete attempt: %v", err)
	}
}

// ---------------------------------------------------------------- docker-compose.yml

// loadCompose reads the compose file; a key given twice is an error.
func loadCompose(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, composeFile)), &doc); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	if doc == nil {
		t.Fatalf("%s is empty", composeFile)
	}
	return doc
}

var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)

// composeVars lists the ${VAR} references in the compose file's values.
func composeVars(t *testing.T, doc map[string]any) []string {
	t.Helper()
	seen := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		case string:
			for _, m := range composeVar.FindAllStringSubmatch(v, -1) {
				seen[m[1]] = true
			}
		}
	}
	walk(doc)
	return sortedKeys(seen)
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// asString reads a scalar as the text it was written as: YAML reads
// replicas: 2 as a number and restart: "no" as a string.
func asString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int, int64, uint64, float64, bool:
		return fmt.Sprint(v)
	}
	return ""
}

// asStrings reads a list of strings, or a string split on blanks.
func asStrings(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		out := make([]string, 0, len(v))
		for _, x := range v {
			out = append(out, asString(x))
		}
		return out
	}
	return nil
}

// envOf reads a service's environment in map or KEY=VALUE list form.
func envOf(svc map[string]any) map[string]string {
	out := map[string]string{}
	switch e := svc["environment"].(type) {
	case map[string]any:
		for k, v := range e {
			out[k] = asString(v)
		}
	case []any:
		for _, x := range e {
			k, v, _ := strings.Cut(asString(x), "=")
			out[k] = v
		}
	}
	return out
}

// dependsOn reads depends_on in list or map form: service → condition.
func dependsOn(svc map[string]any) map[string]string {
	out := map[string]string{}
	switch d := svc["depends_on"].(type) {
	case []any:
		for _, x := range d {
			out[asString(x)] = "service_started"
		}
	case map[string]any:
		for name, v := range d {
			cond := asString(asMap(v)["condition"])
			if cond == "" {
				cond = "service_started"
			}
			out[name] = cond
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

// singleVar returns NAME when s is exactly one ${NAME…} reference.
func singleVar(s string) string {
	m := regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)(?:[:?\-+][^}]*)?\}$`).FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	return m[1]
}

func isAgentreach(svc map[string]any) bool {
	return strings.HasPrefix(asString(svc["image"]), "agentreach") ||
		strings.HasSuffix(asString(asMap(svc["build"])["dockerfile"]), "deploy/Dockerfile")
}

func isNATS(svc map[string]any) bool {
	return strings.HasPrefix(asString(svc["image"]), "nats:")
}

func TestCompose(t *testing.T) {
	doc := loadCompose(t)
	services := asMap(doc["services"])
	if len(services) == 0 {
		t.Fatalf("%s has no services", composeFile)
	}
	for _, want := range append(slices.Clone(natsNodes), "dispatcher", "demo") {
		if services[want] == nil {
			t.Errorf("service %q is missing", want)
		}
	}
	declaredVolumes := asMap(doc["volumes"])
	usedVolumes := map[string]bool{}
	hostPorts := map[string]string{}

	for _, name := range sortedKeys(services) {
		svc := asMap(services[name])
		if svc == nil {
			t.Errorf("service %s: not a mapping", name)
			continue
		}
		profiled := svc["profiles"] != nil
		if svc["image"] == nil && svc["build"] == nil {
			t.Errorf("service %s: needs image or build", name)
		}
		if b := asMap(svc["build"]); b != nil {
			ctxDir := filepath.Join(".", asString(b["context"]))
			if st, err := os.Stat(ctxDir); err != nil || !st.IsDir() {
				t.Errorf("service %s: build context %q is not a directory (relative to deploy/)", name, b["context"])
			}
			if df := asString(b["dockerfile"]); df != "" {
				if _, err := os.Stat(filepath.Join(ctxDir, df)); err != nil {
					t.Errorf("service %s: dockerfile %q not found in context %q", name, df, b["context"])
				}
			}
		}
		if !profiled && svc["restart"] == nil {
			t.Errorf("service %s: set a restart policy", name)
		}

		for dep, cond := range dependsOn(svc) {
			target := asMap(services[dep])
			switch {
			case target == nil:
				t.Errorf("service %s depends on %q, which is not a service", name, dep)
			case !slices.Contains([]string{"service_started", "service_healthy", "service_completed_successfully"}, cond):
				t.Errorf("service %s: depends_on %s has unknown condition %q", name, dep, cond)
			case cond == "service_healthy" && target["healthcheck"] == nil:
				t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			case !profiled && target["profiles"] != nil:
				t.Errorf("service %s (always started) depends on %s, which only starts with a profile", name, dep)
			}
		}

		for _, v := range asStrings(svc["volumes"]) {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("service %s: volume %q has no target", name, v)
				continue
			}
			src := parts[0]
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(filepath.Join(".", src)); err != nil {
					t.Errorf("service %s: bind mount source %q does not exist (relative to deploy/)", name, src)
				}
				continue
			}
			usedVolumes[src] = true
			if _, ok := declaredVolumes[src]; !ok {
				t.Errorf("service %s: named volume %q is not declared under top-level volumes", name, src)
			}
		}

		for _, p := range asStrings(svc["ports"]) {
			parts := strings.Split(p, ":")
			if len(parts) < 2 {
				continue
			}
			host := strings.Join(parts[:len(parts)-1], ":")
			if other, dup := hostPorts[host]; dup {
				t.Errorf("services %s and %s both publish %s", other, name, host)
			}
			hostPorts[host] = name
		}
	}
	for _, v := range sortedKeys(declaredVolumes) {
		if !usedVolumes[v] {
			t.Errorf("volume %q is declared but no service mounts it", v)
		}
	}
}

// hostPath maps a container path to the host file behind a bind mount.
func hostPath(svc map[string]any, containerPath string) (string, bool) {
	for _, v := range asStrings(svc["volumes"]) {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], ".") {
			continue
		}
		src, dst := parts[0], parts[1]
		if containerPath == dst {
			return src, true
		}
		if rest, ok := strings.CutPrefix(containerPath, dst+"/"); ok {
			return filepath.Join(src, rest), true
		}
	}
	return "", false
}

// namedVolumeAt reports whether a named volume holds containerPath.
func namedVolumeAt(svc map[string]any, containerPath string) bool {
	for _, v := range asStrings(svc["volumes"]) {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || strings.HasPrefix(parts[0], ".") || strings.HasPrefix(parts[0], "/") {
			continue
		}
		if containerPath == parts[1] || strings.HasPrefix(containerPath, strings.TrimSuffix(parts[1], "/")+"/") {
			return true
		}
	}
	return false
}

func TestComposeNATSServices(t *testing.T) {
	services := asMap(loadCompose(t)["services"])
	confVars := natsConfVars(t)
	minor := natsServerMinor(t)
	var nodes []string
	for _, name := range sortedKeys(services) {
		svc := asMap(services[name])
		if !isNATS(svc) {
			continue
		}
		nodes = append(nodes, name)
		t.Run(name, func(t *testing.T) {
			if img := asString(svc["image"]); !strings.HasPrefix(img, "nats:"+minor) {
				t.Errorf("image %q: use nats:%s-… to match the nats-server v%s the tests parse the configs with", img, minor, minor)
			}
			args := asStrings(svc["command"])
			conf, ok := flagValue(args, "config")
			if !ok {
				t.Fatalf("command %q has no --config", args)
			}
			host, ok := hostPath(svc, conf)
			if !ok {
				t.Fatalf("--config %s is not inside a bind mount", conf)
			}
			if _, err := os.Stat(host); err != nil {
				t.Fatalf("--config %s maps to %s, which does not exist", conf, host)
			}
			rel, err := filepath.Rel(natsConfDir, host)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Fatalf("--config %s maps to %s, outside deploy/%s", conf, host, natsConfDir)
			}
			opts := loadNATSConfig(t, rel)
			if opts.ServerName != name {
				t.Errorf("%s sets server_name %q; name it after the service", host, opts.ServerName)
			}
			for _, r := range opts.Routes {
				if services[r.Hostname()] == nil {
					t.Errorf("route %s: %s is not a compose service", r, r.Hostname())
				}
			}
			if !namedVolumeAt(svc, opts.StoreDir) {
				t.Errorf("JetStream store_dir %s is not on a named volume: data would not survive a container re-create", opts.StoreDir)
			}

			env := envOf(svc)
			for _, v := range confVars {
				if singleVar(env[v]) != v {
					t.Errorf("environment %s = %q, want ${%s…} (the NATS config reads $%s)", v, env[v], v, v)
				}
			}

			hc := asMap(svc["healthcheck"])
			test := strings.Join(asStrings(hc["test"]), " ")
			if !strings.Contains(test, healthzPathQuery) {
				t.Errorf("healthcheck %q should query %s", test, healthzPathQuery)
			}
			if m := regexp.MustCompile(`https?://[^ "]+`).FindString(test); m != "" {
				u, err := url.Parse(m)
				if err != nil || u.Port() != strconv.Itoa(opts.HTTPPort) {
					t.Errorf("healthcheck URL %s: port should be the monitoring port %d", m, opts.HTTPPort)
				}
			}

			var published []string
			for _, p := range asStrings(svc["ports"]) {
				published = append(published, p[strings.LastIndex(p, ":")+1:])
			}
			if !slices.Contains(published, strconv.Itoa(opts.Port)) {
				t.Errorf("ports %v do not publish the client port %d", published, opts.Port)
			}
		})
	}
	if !slices.Equal(nodes, natsNodes) {
		t.Errorf("NATS services = %v, want %v", nodes, natsNodes)
	}
}

func TestComposeAgentreachServices(t *testing.T) {
	services := asMap(loadCompose(t)["services"])
	opts := loadNATSConfig(t, "nats-1.conf")
	users := usersByName(opts)
	env := envExample(t)
	heartbeats := map[string]string{}
	seen := 0
	for _, name := range sortedKeys(services) {
		svc := asMap(services[name])
		if !isAgentreach(svc) {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			args := asStrings(svc["command"])
			if len(args) == 0 {
				t.Fatal("no command: say which agentreach subcommand runs")
			}
			sub := args[0]
			if !slices.Contains(agentreachSubcommands, sub) {
				t.Fatalf("agentreach subcommand %q is not one of %v", sub, agentreachSubcommands)
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
				if flag, ok := strings.CutPrefix(k, "AGENTREACH_"); ok {
					f := strings.ToLower(strings.ReplaceAll(flag, "_", "-"))
					if !slices.Contains(agentreachFlags, f) {
						t.Errorf("environment %s matches no flag (--%s)", k, f)
					}
				}
			}
			value := func(flag string) string {
				if v, ok := flagValue(args, flag); ok {
					return v
				}
				return svcEnv["AGENTREACH_"+strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))]
			}

			// --server: every NATS node, no credentials in the URL.
			srv := value("server")
			if srv == "" {
				t.Error("no --server / AGENTREACH_SERVER")
			}
			var hosts []string
			for _, s := range strings.Split(srv, ",") {
				u, err := url.Parse(strings.TrimSpace(s))
				if err != nil {
					t.Errorf("server URL %q: %v", s, err)
					continue
				}
				if u.Scheme != "nats" || u.Port() != strconv.Itoa(opts.Port) {
					t.Errorf("server URL %q: want nats://<node>:%d", s, opts.Port)
				}
				if u.User != nil {
					t.Errorf("server URL %q carries credentials; pass AGENTREACH_USER / AGENTREACH_PASSWORD", s)
				}
				if !isNATS(asMap(services[u.Hostname()])) {
					t.Errorf("server URL %q: %s is not a NATS service", s, u.Hostname())
				}
				hosts = append(hosts, u.Hostname())
			}
			sort.Strings(hosts)
			if !slices.Equal(hosts, natsNodes) {
				t.Errorf("--server lists %v, want all of %v so clients fail over", hosts, natsNodes)
			}

			// Credentials: a configured user, the password variable that user's config reads.
			user := value("user")
			if want, ok := subcommandUser[sub]; ok && user != want {
				t.Errorf("agentreach %s runs as user %q, want %q", sub, user, want)
			}
			u := users[user]
			if u == nil {
				t.Errorf("AGENTREACH_USER %q is not a user in the NATS config", user)
			} else if v := singleVar(value("password")); v == "" || env[v] != u.Password {
				t.Errorf("AGENTREACH_PASSWORD = %q: want the ${…} variable that nats-server reads for user %q", value("password"), user)
			}

			if hb := value("heartbeat"); hb != "" {
				if _, err := time.ParseDuration(hb); err != nil {
					t.Errorf("heartbeat %q: %v", hb, err)
				}
				heartbeats[name] = hb
			}

			if sub == "dispatcher" {
				r, err := strconv.Atoi(value("replicas"))
				if err != nil || r < 1 || r > len(natsNodes) {
					t.Errorf("dispatcher --replicas %q: want 1..%d (3 on this cluster)", value("replicas"), len(natsNodes))
				} else if r != len(natsNodes) {
					t.Errorf("dispatcher --replicas %d: use %d (R3 on a 3-node cluster)", r, len(natsNodes))
				}
				if n, _ := strconv.Atoi(asString(asMap(svc["deploy"])["replicas"])); n < 2 {
					t.Errorf("dispatcher deploy.replicas = %v, want at least 2", asMap(svc["deploy"])["replicas"])
				}
				if svc["container_name"] != nil {
					t.Error("container_name prevents `docker compose up --scale dispatcher=N`")
				}
			}
		})
	}
	if seen == 0 {
		t.Error("no agentreach services found")
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

	// nats-box authenticates like any other client.
	if nb := asMap(services["nats-box"]); nb != nil {
		e := envOf(nb)
		if u := users[e["NATS_USER"]]; u == nil {
			t.Errorf("nats-box NATS_USER %q is not a NATS user", e["NATS_USER"])
		} else if v := singleVar(e["NATS_PASSWORD"]); env[v] != u.Password {
			t.Errorf("nats-box NATS_PASSWORD %q does not match user %q", e["NATS_PASSWORD"], e["NATS_USER"])
		}
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
		"docker compose -f deploy/docker-compose.yml --env-file deploy/.env up -d",
		"kv ls REACH_AGENTS",
		"stream ls",
		"--scale dispatcher=",
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
