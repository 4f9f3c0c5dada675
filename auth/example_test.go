package auth_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/authserver"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// An identity store with a dispatcher and a caller, an embedded server in
// operator mode that admits them, and the syncer pushing the ACL: the
// caller may then publish what the ACL grants it, and its tasks carry a
// Reach-Signature the dispatchers' verifier checks.
func Example() {
	dir, _ := os.MkdirTemp("", "auth-example")
	defer os.RemoveAll(dir)
	store, err := auth.Init(dir + "/auth")
	if err != nil {
		panic(err)
	}
	for _, id := range []auth.Identity{{Name: "dispatcher", Role: auth.RoleDispatcher}, {Name: "billing-1", Role: auth.RoleCaller}} {
		if _, err := store.Add(id); err != nil {
			panic(err)
		}
	}

	opts := natstest.Options(dir + "/js")
	if err := authserver.Configure(opts, store, dir+"/jwt", nil, streams.Subjects{}); err != nil {
		panic(err)
	}
	srv, err := natstest.Start(opts)
	if err != nil {
		panic(err)
	}
	defer natstest.Stop(srv)
	connect := func(creds string) *nats.Conn {
		o, err := auth.ConnectOptions(creds) // the credentials and the identity's inbox prefix
		if err != nil {
			panic(err)
		}
		nc, err := nats.Connect(srv.ClientURL(), o...)
		if err != nil {
			panic(err)
		}
		return nc
	}
	disp, sys := connect(store.CredsFile("dispatcher")), connect(store.SystemCredsFile())
	defer disp.Close()
	defer sys.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(disp)
	if err := streams.Provision(ctx, js, streams.Topology{Memory: true}); err != nil {
		panic(err)
	}
	kv, _ := js.KeyValue(ctx, streams.BucketPolicy)
	if _, err := registry.PutPolicy(ctx, kv, policy.KeyACL, []byte(`{"rules": [{"caller": "billing-*", "may_call": ["payment.*"]}]}`)); err != nil {
		panic(err)
	}
	syncer, err := auth.NewSyncer(ctx, store, sys, disp, auth.SyncConfig{})
	if err == nil {
		err = syncer.Start(ctx)
	}
	if err != nil {
		panic(err)
	}
	defer syncer.Close()

	// What the ACL grants billing-1, its permissions say.
	billing, _ := store.Identity("billing-1")
	acl, _ := policy.ParseACL([]byte(`{"rules": [{"caller": "billing-*", "may_call": ["payment.*"]}]}`))
	for _, s := range auth.Permissions(billing, acl, streams.Subjects{}).Pub.Allow {
		if strings.Contains(s, "payment") {
			fmt.Println("billing-1 may publish to", s)
		}
	}

	// Its tasks prove their Reach-Source to the dispatchers.
	signer, _ := auth.LoadSigner(store.CredsFile("billing-1"))
	verifier, _ := auth.LoadVerifier(store.VerifierFile())
	m := nats.NewMsg("reach.task.payment.execute")
	m.Header.Set(streams.HeaderRequestID, "r1")
	m.Data = []byte(`{"amount":5}`)
	signer.Sign(m, time.Now())
	_, err = verifier.Verify(m, "billing-1", billing.PublicKey)
	fmt.Println("Reach-Source", m.Header.Get(streams.HeaderSource), "proven:", err == nil)
	// Output:
	// billing-1 may publish to reach.broadcast.payment.*
	// billing-1 may publish to reach.submit.payment.*
	// billing-1 may publish to reach.task.payment.*
	// Reach-Source billing-1 proven: true
}
