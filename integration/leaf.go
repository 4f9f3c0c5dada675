package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/authserver"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// LeafEdge is a leaf node server at the edge of a SecureStack (the hub),
// as deploy/nats/leaf.conf runs one: operator mode on the hub's identity
// store (its account JWTs as they were when it started, then as the
// stack's syncer pushes them to it: auth sync --leaf-server), TLS on its
// client port, no JetStream of its own, and one remote to the hub's
// leafnode port with the credentials of a leaf link identity. Agents and
// callers connect to it as their own identities and reach the hub's
// JetStream in auth.HubDomain.
type LeafEdge struct {
	Hub    *SecureStack
	Server *server.Server
}

// NewSecureLeafHub starts a SecureStack (heartbeat hb, acl) as the hub of
// leaf nodes: its JetStream in domain auth.HubDomain and a leafnode port,
// leafPort, on loopback. The link runs without TLS here (deploy/nats runs
// it with mutual TLS); the leaf's client port has the stack's TLS.
func NewSecureLeafHub(tb testing.TB, hb time.Duration, acl string, leafPort int) *SecureStack {
	tb.Helper()
	return NewSecureStack(tb, hb, acl, func(o *server.Options) {
		o.JetStreamDomain = auth.HubDomain
		o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", leafPort
	})
}

// StartLeaf starts a leaf node server linked to the hub (whose leafnode
// port is leafPort) as leaf identity link, waits until the link is up, and
// adds it to the servers the stack's syncer pushes the account JWT to.
func (st *SecureStack) StartLeaf(link string, leafPort int) *LeafEdge {
	st.T.Helper()
	return st.startLeaf(link, leafPort, true)
}

// StartRogueLeaf starts a leaf node server with the credentials of link
// and nothing else: no operator, no TLS, every local client free to do
// anything — a leaf server in an attacker's hands. Only the link's
// permissions, enforced by the hub, bound what it does there. Connect to it
// with natstest.Connect.
func (st *SecureStack) StartRogueLeaf(link string, leafPort int) *LeafEdge {
	st.T.Helper()
	return st.startLeaf(link, leafPort, false)
}

func (st *SecureStack) startLeaf(link string, leafPort int, secure bool) *LeafEdge {
	st.T.Helper()
	opts := natstest.Options(st.T.TempDir())
	opts.JetStream = false
	var local string
	if secure {
		if err := authserver.Configure(opts, st.Store, st.T.TempDir(), nil, streams.Subjects{}); err != nil {
			st.T.Fatal(err)
		}
		if err := authserver.ConfigureTLS(opts, st.TLS, true); err != nil {
			st.T.Fatal(err)
		}
		acc, err := accountOf(st.Store.CredsFile(link))
		if err != nil {
			st.T.Fatal(err)
		}
		local = acc
	}
	u, err := url.Parse("nats://127.0.0.1:" + strconv.Itoa(leafPort))
	if err != nil {
		st.T.Fatal(err)
	}
	opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{u}, LocalAccount: local,
		Credentials: st.Store.CredsFile(link)}}
	s := natstest.RunServerWith(st.T, opts)
	natstest.WaitFor(st.T, 10*time.Second, func() error {
		if s.NumLeafNodes() == 0 || st.Server.NumLeafNodes() == 0 {
			return fmt.Errorf("the leaf link is not up")
		}
		return nil
	})
	e := &LeafEdge{Hub: st, Server: s}
	if secure {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := st.syncer.AddLeaf(ctx, e.connFile(st.Store.SystemCredsFile())); err != nil {
			st.T.Fatal(err)
		}
	}
	return e
}

// accountOf is the account that issued the user in a credentials file.
func accountOf(creds string) (string, error) {
	raw, err := os.ReadFile(creds)
	if err != nil {
		return "", err
	}
	tok, err := jwt.ParseDecoratedJWT(raw)
	if err != nil {
		return "", err
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return "", err
	}
	return uc.IssuerAccount, nil
}

// ConnAs opens a connection to the leaf server as identity name.
func (e *LeafEdge) ConnAs(name string, opts ...nats.Option) *nats.Conn {
	e.Hub.T.Helper()
	return e.connFile(e.Hub.Store.CredsFile(name), opts...)
}

// connFile opens a connection to the leaf server with the credentials file.
func (e *LeafEdge) connFile(file string, opts ...nats.Option) *nats.Conn {
	e.Hub.T.Helper()
	o, err := auth.ConnectOptions(file)
	if err != nil {
		e.Hub.T.Fatal(err)
	}
	base := append(e.Hub.ClientTLS(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	return natstest.Connect(e.Hub.T, e.Server, append(append(base, o...), opts...)...)
}

// Agent starts an agent on the leaf server as the identity cfg.ID names
// (which must exist), using the hub's JetStream.
func (e *LeafEdge) Agent(cfg agentkit.Config, handlers map[string]agentkit.Handler) *agentkit.Agent {
	e.Hub.T.Helper()
	cfg.JetStreamDomain = auth.HubDomain
	return e.Hub.agentOn(e.ConnAs(cfg.ID), cfg, handlers)
}

// ClientAs returns a client of identity name (which must exist) on the leaf
// server, signing its tasks and using the hub's JetStream.
func (e *LeafEdge) ClientAs(name string, opts ...agentkit.ClientOption) *agentkit.Client {
	e.Hub.T.Helper()
	c, err := agentkit.NewClient(e.ConnAs(name), append(opts, agentkit.WithCredentials(e.Hub.Store.CredsFile(name)),
		agentkit.WithJetStreamDomain(auth.HubDomain))...)
	if err != nil {
		e.Hub.T.Fatal(err)
	}
	return c
}

// EdgeSiteACL lets the hub's caller (SecureCaller) and the edge's
// (edge-caller) call echo, served at the edge.
const EdgeSiteACL = `{"rules": [{"caller": "` + SecureCaller + `", "may_call": ["echo"]}, {"caller": "edge-caller", "may_call": ["echo"]}]}`

// NewEdgeSite starts a hub (heartbeat 1 s, EdgeSiteACL), the agent identity
// edge-echo-1 (type echo), the caller identity edge-caller and the leaf
// link identity edge-1 carrying both, and a leaf node server linked to the
// hub as edge-1: the operator's (rogue false) or an attacker's.
func NewEdgeSite(tb testing.TB, rogue bool) (*SecureStack, *LeafEdge) {
	tb.Helper()
	port := natstest.FreePort(tb)
	st := NewSecureLeafHub(tb, time.Second, EdgeSiteACL, port)
	st.Identity(auth.Identity{Name: "edge-echo-1", Role: auth.RoleAgent, Type: "echo", Serves: []string{"echo"}})
	st.Identity(auth.Identity{Name: "edge-caller", Role: auth.RoleCaller})
	st.Identity(auth.Identity{Name: "edge-1", Role: auth.RoleLeaf, Carries: []string{"edge-echo-1", "edge-caller"}})
	if rogue {
		return st, st.StartRogueLeaf("edge-1", port)
	}
	return st, st.StartLeaf("edge-1", port)
}
