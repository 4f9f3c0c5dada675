package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// logBuffer collects a watcher's log lines.
type logBuffer struct{ natstest.LogBuffer }

// count returns how many lines hold s.
func (l *logBuffer) count(s string) int {
	return strings.Count(l.String(), s)
}

// waitCount polls until exactly n lines hold s.
func (l *logBuffer) waitCount(t *testing.T, s string, n int) {
	t.Helper()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if got := l.count(s); got != n {
			return fmt.Errorf("%d log lines hold %q, want %d", got, s, n)
		}
		return nil
	})
}

const refused = "ignoring an invalid value"

func capsBucket(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), streams.BucketCaps)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// ordersReader declares an input schema, a permission and two refusals.
const ordersReader = `{"type": "orders-reader", "version": "1.2.0",
 "capabilities": [{"name": "orders.query", "mode": "read",
                   "input_schema": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}}}}],
 "permissions": ["read"], "refuses": ["write", "delete"]}`

func declaration(t *testing.T, src string) *declare.Declaration {
	t.Helper()
	d, err := declare.ParseDeclaration([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// lookupRevision polls until the catalog holds agentType at revision (0:
// holds nothing for it).
func lookupRevision(t *testing.T, c *registry.Catalog, agentType string, revision uint64) {
	t.Helper()
	natstest.WaitFor(t, 5*time.Second, func() error {
		d, ok := c.Lookup(agentType)
		switch {
		case revision == 0 && ok:
			return fmt.Errorf("%s still at revision %d", agentType, d.Revision())
		case revision != 0 && !ok:
			return fmt.Errorf("no declaration of %s", agentType)
		case revision != 0 && d.Revision() != revision:
			return fmt.Errorf("%s at revision %d, want %d", agentType, d.Revision(), revision)
		}
		return nil
	})
}

func TestCatalogKeepsTheLastGoodDeclaration(t *testing.T) {
	_, js := setup(t, 0)
	ctx := context.Background()
	kv := capsBucket(t, js)
	first, err := registry.PutDeclaration(ctx, kv, declaration(t, ordersReader))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	c, err := registry.NewCatalog(ctx, js, registry.WatchLogger(zerolog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, ok := c.Lookup("orders-reader")
	if !ok || d.Revision() != first {
		t.Fatalf("after Start: %v, %v; want revision %d", d, ok, first)
	}
	if err := d.ValidateInput("orders.query", streams.ContentTypeJSON, []byte(`{}`)); !errors.Is(err, declare.ErrInvalidPayload) {
		t.Fatalf("the catalog's declaration does not check payloads: %v", err)
	}
	version := c.Version()

	// Garbage put by hand: logged once, the last good one stays.
	if _, err := kv.Put(ctx, "orders-reader", []byte(`{"type": "orders-reader", "capabilities": [{"name": "orders.query", "mode": "sometimes"}]}`)); err != nil {
		t.Fatal(err)
	}
	logs.waitCount(t, refused, 1)
	if !strings.Contains(logs.String(), `capabilities[0].mode: want \"read\", \"write\" or nothing`) {
		t.Fatalf("the log does not name the field:\n%s", logs)
	}
	// A declaration of another type under this key is refused too.
	if _, err := kv.Put(ctx, "orders-reader", []byte(`{"type": "billing", "capabilities": [{"name": "pay"}]}`)); err != nil {
		t.Fatal(err)
	}
	logs.waitCount(t, refused, 2)
	if d, _ := c.Lookup("orders-reader"); d.Revision() != first || c.Version() != version {
		t.Fatalf("after garbage: revision %d, version %d; want %d, %d", d.Revision(), c.Version(), first, version)
	}

	// A good one is taken, and wakes Changed.
	changed := c.Changed()
	next := declaration(t, ordersReader)
	next.Version = "1.3.0"
	rev, err := registry.PutDeclaration(ctx, kv, next)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("Changed not closed after a good put")
	}
	lookupRevision(t, c, "orders-reader", rev)
	if d, _ := c.Lookup("orders-reader"); d.Declaration().Version != "1.3.0" || c.Version() <= version {
		t.Fatalf("after a good put: version %q, catalog version %d (was %d)", d.Declaration().Version, c.Version(), version)
	}

	// A delete removes it.
	if err := registry.DeleteDeclaration(ctx, kv, "orders-reader"); err != nil {
		t.Fatal(err)
	}
	lookupRevision(t, c, "orders-reader", 0)
	if n := logs.count(refused); n != 2 {
		t.Fatalf("%d refusals logged, want 2", n)
	}
}

func TestDeclarationHelpers(t *testing.T) {
	_, js := setup(t, 0)
	ctx := context.Background()
	kv := capsBucket(t, js)

	bad := declaration(t, ordersReader)
	bad.Refuses = append(bad.Refuses, "read")
	if _, err := registry.PutDeclaration(ctx, kv, bad); !errors.Is(err, declare.ErrInvalidDeclaration) ||
		!strings.Contains(err.Error(), `refuses[2]: "read" is also in permissions`) {
		t.Fatalf("PutDeclaration of an invalid declaration: %v", err)
	}
	if _, err := registry.GetDeclaration(ctx, kv, "orders-reader"); !errors.Is(err, registry.ErrNoDeclaration) {
		t.Fatalf("an invalid declaration was written, or Get says %v", err)
	}

	rev, err := registry.PutDeclaration(ctx, kv, declaration(t, ordersReader))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "junk", []byte("not: [valid")); err != nil {
		t.Fatal(err)
	}
	e, err := registry.GetDeclaration(ctx, kv, "orders-reader")
	if err != nil || e.Err != nil || e.Revision != rev || e.Declaration.Capabilities[0].Name != "orders.query" || e.Updated.IsZero() {
		t.Fatalf("Get: %+v, %v", e, err)
	}
	list, err := registry.ListDeclarations(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Type != "junk" || !errors.Is(list[0].Err, declare.ErrInvalidDeclaration) ||
		list[0].Declaration != nil || string(list[0].Raw) != "not: [valid" || list[1].Type != "orders-reader" || list[1].Err != nil {
		t.Fatalf("List: %+v", list)
	}
}

// After a server restart the catalog's watcher is re-created; the reconcile
// interval is an hour, so only the reconnect path can pass.
func TestCatalogFollowsThroughServerRestart(t *testing.T) {
	js, restart := restartableServer(t)
	ctx := context.Background()
	kv := capsBucket(t, js)
	c, err := registry.NewCatalog(ctx, js, registry.WatchReconcileInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before, err := registry.PutDeclaration(ctx, kv, declaration(t, ordersReader))
	if err != nil {
		t.Fatal(err)
	}
	lookupRevision(t, c, "orders-reader", before)

	restart()
	after, err := registry.PutDeclaration(ctx, kv, declaration(t, `{"type":"billing","capabilities":[{"name":"pay"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := registry.DeleteDeclaration(ctx, kv, "orders-reader"); err != nil {
		t.Fatal(err)
	}
	lookupRevision(t, c, "billing", after)
	lookupRevision(t, c, "orders-reader", 0)
}

// restartableServer runs a file-backed server on a fixed port and returns a
// JetStream context whose connection reconnects forever, and a function
// that restarts the server and waits until the client is back.
func restartableServer(t *testing.T) (jetstream.JetStream, func()) {
	t.Helper()
	opts := natstest.Options(t.TempDir())
	opts.Port = natstest.FreePort(t) // the same after the restart
	s, err := natstest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	current := s
	t.Cleanup(func() { natstest.Stop(current) })
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	natstest.Provision(t, nc, streams.Topology{Heartbeat: 10 * time.Second})
	js, _ := jetstream.New(nc)
	return js, func() {
		natstest.Stop(current)
		if current, err = natstest.Start(opts); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 10*time.Second, func() error {
			if !nc.IsConnected() {
				return errors.New("client not reconnected")
			}
			return nil
		})
	}
}
