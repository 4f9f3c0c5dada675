package deploy

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// TestComposeLeaf checks the leaf node server (service leaf, nats/leaf.conf)
// as its container sees it: no JetStream, operator mode on the store's
// operator, TLS on its client port, one remote to every hub node's
// leafnode port with mutual TLS, linking the AGENTREACH account as a leaf
// identity that carries every agent the demo service runs.
func TestComposeLeaf(t *testing.T) {
	g := setup(t)
	p, _ := loadCompose(t)
	svc := service(t, p, leafService)
	if img, minor := svc.Image, natsServerMinor(t); !strings.HasPrefix(img, "nats:"+minor) {
		t.Errorf("image %q: use nats:%s-…", img, minor)
	}
	if conf, ok := flagValue(svc.Command, "config"); !ok || conf != natsConfMount+"/"+leafService+".conf" {
		t.Fatalf("command %q: want --config %s/%s.conf", svc.Command, natsConfMount, leafService)
	}
	opts, root := loadNATSConfig(t, g, leafService)
	if opts.ServerName != leafService {
		t.Errorf("server_name %q, want %q", opts.ServerName, leafService)
	}
	if opts.JetStream {
		t.Error("JetStream is enabled on the leaf: its agents must use the hub's (domain hub)")
	}
	if opts.TLSConfig == nil {
		t.Error("no TLS on the leaf's client port")
	}
	operator, sys, _, err := g.store.Trust(nil, streams.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.TrustedOperators) != 1 || opts.TrustedOperators[0].Subject != operator.Subject || opts.SystemAccount != sys {
		t.Error("the leaf does not trust the store's operator and system account: agents could not connect as their identities")
	}
	if !namedVolumeAt(svc, "/data/jwt") {
		t.Error("the leaf's account resolver /data/jwt is not on a named volume")
	}
	if test := strings.Join(svc.HealthCheck.Test, " "); !strings.Contains(test, "/healthz") {
		t.Errorf("healthcheck %q should query /healthz", test)
	}

	if len(opts.LeafNode.Remotes) != 1 {
		t.Fatalf("%d leafnode remotes, want one: the link to the hub", len(opts.LeafNode.Remotes))
	}
	r := opts.LeafNode.Remotes[0]
	var hosts []string
	for _, u := range r.URLs {
		if u.Scheme != "tls" || u.Port() != strconv.Itoa(leafPort) {
			t.Errorf("remote URL %s: want tls://<hub node>:%d", u, leafPort)
		}
		hosts = append(hosts, u.Hostname())
	}
	sort.Strings(hosts)
	if !slices.Equal(hosts, natsNodes) {
		t.Errorf("the remote lists %v, want every hub node %v", hosts, natsNodes)
	}
	if c := r.TLSConfig; c == nil || len(c.Certificates) == 0 || c.MinVersion < tls.VersionTLS12 {
		t.Error("the remote has no TLS with a client certificate: the hub's leafnode port requires one")
	}

	// The link: a leaf identity's credentials, in the account they belong to.
	creds := strings.TrimPrefix(r.Credentials, root) // a file mount: not rewritten below root
	id, host, ok := credsOf(t, g, svc, creds)
	if !ok || id.Role != auth.RoleLeaf {
		t.Fatalf("the remote's credentials %s (%s) are not a leaf identity's", creds, host)
	}
	raw := readFile(t, g.source(host))
	tok, err := jwt.ParseDecoratedJWT([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if r.LocalAccount != uc.IssuerAccount {
		t.Errorf("the remote links account %s, but its credentials are of %s", r.LocalAccount, uc.IssuerAccount)
	}

	// It carries every agent the demo service runs, and the demo agents
	// connect to it.
	demo := service(t, p, "demo")
	dir, _ := flagValue(demo.Command, "creds-dir")
	for _, v := range demo.Volumes {
		if name, ok := strings.CutPrefix(v.Target, dir+"/"); ok && strings.HasSuffix(name, ".creds") {
			agent := strings.TrimSuffix(filepath.Base(name), ".creds")
			if !slices.Contains(id.Carries, agent) {
				t.Errorf("leaf %s does not carry demo agent %s: nothing it does would cross the link", id.Name, agent)
			}
		}
	}
}

// TestLeafConfigCarriesAnAgentToTheHub runs the shipped configs: a hub node
// from nats-1.conf and a leaf node server from leaf.conf (ports moved to
// free ones, the remote pointed at the hub's leafnode port), linked with
// mutual TLS as edge-1. A demo agent connected to the leaf as its own
// identity, on the hub's JetStream domain, registers in the hub's
// REACH_AGENTS.
func TestLeafConfigCarriesAnAgentToTheHub(t *testing.T) {
	g := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hubOpts, hubRoot := loadNATSConfig(t, g, "nats-1")
	hubOpts.Cluster = server.ClusterOpts{}
	hubOpts.Routes, hubOpts.RoutesStr = nil, ""
	hubOpts.Host, hubOpts.Port = "127.0.0.1", -1
	hubOpts.HTTPHost, hubOpts.HTTPPort = "127.0.0.1", -1
	leafPort := natstest.FreePort(t)
	hubOpts.LeafNode.Host, hubOpts.LeafNode.Port = "127.0.0.1", leafPort
	hubOpts.NoLog, hubOpts.NoSigs = true, true
	hub := runServer(t, hubOpts, "nats-1.conf")

	leafOpts, _ := loadNATSConfig(t, g, leafService)
	leafOpts.Host, leafOpts.Port = "127.0.0.1", -1
	leafOpts.HTTPHost, leafOpts.HTTPPort = "127.0.0.1", -1
	leafOpts.NoLog, leafOpts.NoSigs = true, true
	r := leafOpts.LeafNode.Remotes[0]
	u, err := url.Parse("tls://127.0.0.1:" + strconv.Itoa(leafPort))
	if err != nil {
		t.Fatal(err)
	}
	r.URLs = []*url.URL{u}
	p, _ := loadCompose(t)
	svc := service(t, p, leafService)
	host, ok := hostPath(svc, r.Credentials)
	if !ok {
		t.Fatalf("the remote's credentials %s are not mounted", r.Credentials)
	}
	r.Credentials = g.source(host)
	leaf := runServer(t, leafOpts, "leaf.conf")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if leaf.NumLeafNodes() == 0 || hub.NumLeafNodes() == 0 {
			return errors.New("the leaf node server has not linked to the hub")
		}
		return nil
	})

	ca := filepath.Join(hubRoot, "etc/agentreach/certs/ca.pem")
	connect := func(s *server.Server, creds string) *nats.Conn {
		t.Helper()
		o, err := auth.ConnectOptions(creds)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(s.ClientURL(), append(o, nats.RootCAs(ca), nats.Timeout(2*time.Second))...)
		if err != nil {
			t.Fatalf("connect as %s: %v", creds, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	djs, err := jetstream.New(connect(hub, g.store.CredsFile("dispatcher")))
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, djs, streams.Topology{}); err != nil {
		t.Fatal(err)
	}
	a, err := agentkit.New(connect(leaf, g.store.CredsFile("echo-1")), agentkit.Config{ID: "echo-1", Type: "echo", JetStreamDomain: auth.HubDomain},
		agentkit.WithoutSignals(), agentkit.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Handle("echo", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil }); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatalf("echo-1 behind the leaf cannot start: %v", err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		_ = a.Drain(dctx)
	})
	agents, err := djs.KeyValue(ctx, streams.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agents.Get(ctx, "echo-1"); err != nil {
		t.Fatalf("echo-1's record on the hub: %v", err)
	}
}

// runServer starts an embedded server with opts (from conf) and stops it at
// the end of the test.
func runServer(t *testing.T, opts *server.Options, conf string) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server refuses %s: %v", conf, err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("the server from %s did not start", conf)
	}
	return s
}
