package deploy

import (
	"crypto/tls"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/agent-reach/agentreach/auth"
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
