package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// putDeclaration puts a declaration into REACH_CAPS, written as an operator
// would with `agentreach caps put`, and waits until every dispatcher has it.
func putDeclaration(t *testing.T, nc *nats.Conn, yaml string, ds ...*dispatcher.Dispatcher) {
	t.Helper()
	d, err := declare.ParseDeclaration([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketCaps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registry.PutDeclaration(context.Background(), kv, d); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		for _, dp := range ds {
			if _, ok := dp.Catalog().Lookup(d.Type); !ok {
				return fmt.Errorf("%s has no declaration of %s yet", dp.Name(), d.Type)
			}
		}
		return nil
	})
}

// typed registers a raw-protocol instance of an agent type, reporting deps,
// that answers every delivery with its id and counts them.
func typed(t *testing.T, st *Stack, id, agentType string, deps map[string]string, counts *sync.Map, caps ...string) {
	t.Helper()
	nc := st.Conn()
	RawAgent(t, nc, registry.Record{ID: id, Type: agentType, Capabilities: caps, MaxConcurrent: 8,
		HeartbeatMS: st.Heartbeat.Milliseconds(), Deps: deps}, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		n, _ := counts.LoadOrStore(id, new(int64))
		mu.Lock()
		*n.(*int64)++
		mu.Unlock()
		finish(nc, m, []byte(`{"from":"`+id+`"}`))
	})
}

var mu sync.Mutex // guards the counters of typed instances

func count(counts *sync.Map, id string) int64 {
	mu.Lock()
	defer mu.Unlock()
	if n, ok := counts.Load(id); ok {
		return *n.(*int64)
	}
	return 0
}

func require(t *testing.T, nc *nats.Conn, capability, req string, body []byte) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(streams.Subjects{}.Task(capability))
	if req != "" {
		m.Header.Set(streams.HeaderRequire, req)
	}
	m.Data = body
	res, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestRequirementsRouteToInstancesThatCanDoTheTask(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	nc := st.Conn()
	putDeclaration(t, nc, `
type: orders-pg
capabilities:
  - name: orders.query
    mode: read
    input_schema: {type: object, required: [sku], properties: {sku: {type: string}}}
labels: {engine: [postgres]}
limits: {history_days: 365}
permissions: [read, write]
`, d)
	putDeclaration(t, nc, `
type: orders-archive
capabilities: [{name: orders.query, mode: read}]
labels: {engine: [postgres]}
limits: {history_days: 30}
permissions: [read]
refuses: [write]
`, d)
	putDeclaration(t, nc, `
type: orders-mysql
capabilities: [{name: orders.query}]
labels: {engine: [mysql]}
limits: {history_days: 365}
permissions: [read]
depends_on: [ext.orders-db]
`, d)
	var counts sync.Map
	typed(t, st, "pg-1", "orders-pg", nil, &counts, "orders.query")
	typed(t, st, "archive-1", "orders-archive", nil, &counts, "orders.query")
	typed(t, st, "mysql-1", "orders-mysql", nil, &counts, "orders.query")
	typed(t, st, "mysql-2", "orders-mysql", map[string]string{"ext.orders-db": registry.DepDown}, &counts, "orders.query")
	WaitRoutable(t, "orders.query", 4, d)
	ok := []byte(`{"sku":"A-1"}`)

	t.Run("a label requirement routes only to matching instances", func(t *testing.T) {
		for range 20 {
			res := require(t, nc, "orders.query", `{"labels":{"engine":"mysql"}}`, ok)
			if got := res.Header.Get(streams.HeaderNode); got != "mysql-1" { // mysql-2's dependency is down
				t.Fatalf("engine mysql went to %q (headers %v)", got, res.Header)
			}
		}
	})
	t.Run("a limit excludes", func(t *testing.T) {
		for range 20 {
			res := require(t, nc, "orders.query", `{"labels":{"engine":"postgres"},"limits":{"history_days":90}}`, ok)
			if got := res.Header.Get(streams.HeaderNode); got != "pg-1" {
				t.Fatalf("90 days of history went to %q (headers %v)", got, res.Header)
			}
		}
	})
	t.Run("a refused permission excludes, and NO_AGENT names each instance with its reason", func(t *testing.T) {
		res := require(t, nc, "orders.query", `{"labels":{"engine":"postgres"},"permissions":["write"],"limits":{"history_days":400}}`, ok)
		e := streams.ErrorFromMessage(res)
		if e == nil || e.Code != streams.CodeNoAgent {
			t.Fatalf("want NO_AGENT, got headers %v body %s", res.Header, res.Data)
		}
		why := map[string]string{}
		for _, x := range e.Excluded {
			why[x.Node] = x.Reason
		}
		for node, want := range map[string]string{
			"pg-1":      "limit history_days: wants 400, declares 365",
			"archive-1": "limit history_days: wants 400, declares 30",
			"mysql-1":   "label engine: wants postgres, declares mysql",
			"mysql-2":   "dependency ext.orders-db is down",
		} {
			if got := why[node]; got == "" || !strings.Contains(got, want) {
				t.Errorf("%s excluded for %q, want %q (all: %v)", node, got, want, e.Excluded)
			}
		}
		res = require(t, nc, "orders.query", `{"permissions":["write"]}`, ok)
		e = streams.ErrorFromMessage(res)
		if res.Header.Get(streams.HeaderNode) != "pg-1" {
			t.Errorf("a write permission went to %q (%v): only pg-1 grants it", res.Header.Get(streams.HeaderNode), e)
		}
	})
	t.Run("a dependency reported down excludes", func(t *testing.T) {
		for range 20 {
			if got := require(t, nc, "orders.query", `{"labels":{"engine":"mysql"}}`, ok).Header.Get(streams.HeaderNode); got == "mysql-2" {
				t.Fatal("mysql-2 reports ext.orders-db down and still got a task")
			}
		}
	})
	t.Run("a schema-invalid payload never reaches an agent", func(t *testing.T) {
		before := count(&counts, "pg-1") + count(&counts, "archive-1") + count(&counts, "mysql-1")
		res := require(t, nc, "orders.query", `{"labels":{"engine":"postgres"},"limits":{"history_days":90}}`, []byte(`{"sku":7}`))
		e := streams.ErrorFromMessage(res)
		if e == nil || e.Code != streams.CodeBadRequest || !strings.Contains(e.Message, "sku") {
			t.Fatalf("want BAD_REQUEST naming sku, got %v", e)
		}
		if after := count(&counts, "pg-1") + count(&counts, "archive-1") + count(&counts, "mysql-1"); after != before {
			t.Errorf("%d deliveries of a payload its schema refuses", after-before)
		}
	})
	t.Run("a malformed Reach-Require is BAD_REQUEST naming the problem", func(t *testing.T) {
		for _, r := range []string{`{"labels":`, `{"lables":{}}`, `{"limits":{"history_days":"many"}}`} {
			e := streams.ErrorFromMessage(require(t, nc, "orders.query", r, ok))
			if e == nil || e.Code != streams.CodeBadRequest || !strings.Contains(e.Message, streams.HeaderRequire) {
				t.Errorf("Reach-Require %s: %v", r, e)
			}
		}
	})
}

func TestPreferCostMovesTrafficToTheCheaperInstance(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	nc := st.Conn()
	putDeclaration(t, nc, "type: mt-cheap\ncapabilities: [{name: translate, cost: 0.001}]\n", d)
	putDeclaration(t, nc, "type: mt-dear\ncapabilities: [{name: translate, cost: 0.02}]\n", d)
	var counts sync.Map
	typed(t, st, "cheap-1", "mt-cheap", nil, &counts, "translate")
	typed(t, st, "dear-1", "mt-dear", nil, &counts, "translate")
	WaitRoutable(t, "translate", 2, d)
	const calls = 100
	for range calls {
		m := nats.NewMsg(streams.Subjects{}.Task("translate"))
		m.Header.Set(streams.HeaderPrefer, selection.PreferCost)
		if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	cheap, dear := count(&counts, "cheap-1"), count(&counts, "dear-1")
	t.Logf("Reach-Prefer: cost: %d calls to the cheaper, %d to the dearer", cheap, dear)
	if cheap < calls*9/10 {
		t.Errorf("the cheaper instance got %d of %d calls", cheap, calls)
	}
	m := nats.NewMsg(streams.Subjects{}.Task("translate"))
	m.Header.Set(streams.HeaderPrefer, "cheapest")
	if e := streams.ErrorFromMessage(mustRequest(t, nc, m)); e == nil || e.Code != streams.CodeBadRequest {
		t.Errorf("an unknown preference: %v, want BAD_REQUEST", e)
	}
}

func mustRequest(t *testing.T, nc *nats.Conn, m *nats.Msg) *nats.Msg {
	t.Helper()
	res, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// nodesOf calls capability n times through d in process and returns the
// instances in order.
func nodesOf(t *testing.T, d *dispatcher.Dispatcher, capability string, n int, kv ...string) []string {
	t.Helper()
	var out []string
	for range n {
		m := nats.NewMsg("")
		for i := 0; i+1 < len(kv); i += 2 {
			m.Header.Set(kv[i], kv[i+1])
		}
		res := d.Call(context.Background(), capability, m)
		out = append(out, res.Header.Get(streams.HeaderNode))
	}
	return out
}

// roundRobin reports whether nodes visit every one of k instances in turn.
func roundRobin(nodes []string, k int) bool {
	seen := map[string]bool{}
	for i, n := range nodes {
		if n == "" || i >= k && nodes[i-k] != n {
			return false
		}
		seen[n] = true
	}
	return len(seen) == k
}

func sameNode(nodes []string) bool {
	for _, n := range nodes {
		if n == "" || n != nodes[0] {
			return false
		}
	}
	return len(nodes) > 0
}

func TestAPolicyChangeReroutesEveryReplicaWithoutARestart(t *testing.T) {
	st := NewStack(t, time.Second)
	d1 := st.Dispatcher(config.Config{Name: "d1"})
	d2 := st.Dispatcher(config.Config{Name: "d2"})
	nc := st.Conn()
	var counts sync.Map
	for _, id := range []string{"w-1", "w-2", "w-3"} {
		typed(t, st, id, "worker", nil, &counts, "job.run")
	}
	WaitRoutable(t, "job.run", 3, d1, d2)
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	set := func(doc string) time.Time {
		t.Helper()
		at := time.Now()
		if _, err := registry.PutPolicy(context.Background(), kv, "capability.job.run", []byte(doc)); err != nil {
			t.Fatal(err)
		}
		return at
	}
	until := func(what string, at time.Time, ok func(d *dispatcher.Dispatcher) bool) {
		t.Helper()
		natstest.WaitFor(t, 5*time.Second, func() error {
			for _, d := range []*dispatcher.Dispatcher{d1, d2} {
				if !ok(d) {
					return fmt.Errorf("%s does not route %s yet", d.Name(), what)
				}
			}
			return nil
		})
		t.Logf("%s on both replicas %v after the put", what, time.Since(at).Round(time.Millisecond))
	}
	rr := func(d *dispatcher.Dispatcher) bool { return roundRobin(nodesOf(t, d, "job.run", 9), 3) }
	hashed := func(d *dispatcher.Dispatcher) bool {
		return sameNode(nodesOf(t, d, "job.run", 10, streams.HeaderAffinityKey, "customer-7"))
	}

	until("round robin", set("strategy: round_robin\n"), rr)
	until("by hash", set(`{"strategy": "hash"}`), hashed)

	// A corrupt value put by hand (as `nats kv put` would) leaves the last
	// good policy in force.
	if _, err := kv.Put(context.Background(), "capability.job.run", []byte(`{"strategy": "fastest", `)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "capability.job.run", []byte(`{"strategy": "fastest"}`)); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		for _, d := range []*dispatcher.Dispatcher{d1, d2} {
			if d.Policies().Revision() < 4 {
				return errors.New("the corrupt values have not reached every replica")
			}
		}
		return nil
	})
	for _, d := range []*dispatcher.Dispatcher{d1, d2} {
		if !hashed(d) {
			t.Errorf("%s stopped routing by hash after corrupt values", d.Name())
		}
	}
}
