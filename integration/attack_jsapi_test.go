package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// jsapiACL grants the sweep's caller and agent one capability each.
const jsapiACL = `{"rules": [
  {"caller": "caller", "may_call": ["echo"]},
  {"caller": "echo-1", "may_call": ["echo"]}]}`

// TestSecurityJetStreamAPISweep tries, as an agent and as a caller under
// auth, every JetStream API call and bucket write that would let them
// reshape, read or fill the store, or have tasks delivered where they
// choose (a consumer on REACH_TASKS delivering to another agent's subject).
// The server refuses each with a permissions violation and nothing changes;
// the controls show the same identities do what they legitimately must.
func TestSecurityJetStreamAPISweep(t *testing.T) {
	st := NewSecureStack(t, time.Second, jsapiACL)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	st.Agent(agentkit.Config{ID: "echo-2", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	st.Agent(agentkit.Config{ID: "pay-1", Type: "payment"}, map[string]agentkit.Handler{"payment.execute": echoHandler()})
	WaitRoutable(t, "echo", 2, d)
	WaitRoutable(t, "payment.execute", 1, d)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subj := streams.Subjects{}
	ajs, err := jetstream.New(st.admin)
	if err != nil {
		t.Fatal(err)
	}
	// Something for the reads and deletes to aim at.
	if _, err := ajs.Publish(ctx, subj.DeadLetter("echo"), []byte(`{"secret":"dead letter"}`)); err != nil {
		t.Fatal(err)
	}
	kvOf := func(bucket string) jetstream.KeyValue {
		kv, err := ajs.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	value := func(bucket, key string) string {
		e, err := kvOf(bucket).Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return "<none>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value()) // not the revision: heartbeats write records again
	}
	type state struct {
		streams   []string
		consumers []string
		tasks     jetstream.StreamConfig
		dlq       uint64
		values    map[string]string
	}
	watchedKeys := [][2]string{
		{streams.BucketPolicy, policy.KeyACL}, {streams.BucketAgents, "echo-2"}, {streams.BucketCaps, "payment"},
		{streams.BucketBreakers, "echo-2"}, {streams.BucketRuns, "forged-run"}, {streams.BucketIdempotency, "echo.caller.forged"},
	}
	snapshot := func() state {
		var s state
		for n := range ajs.StreamNames(ctx).Name() {
			s.streams = append(s.streams, n)
		}
		slices.Sort(s.streams)
		tasks, err := ajs.Stream(ctx, streams.StreamTasks)
		if err != nil {
			t.Fatal(err)
		}
		s.tasks = tasks.CachedInfo().Config
		for n := range tasks.ConsumerNames(ctx).Name() {
			s.consumers = append(s.consumers, n)
		}
		slices.Sort(s.consumers)
		dlq, err := ajs.Stream(ctx, streams.StreamDLQ)
		if err != nil {
			t.Fatal(err)
		}
		s.dlq = dlq.CachedInfo().State.Msgs
		s.values = map[string]string{}
		for _, k := range watchedKeys {
			s.values[k[0]+"/"+k[1]] = value(k[0], k[1])
		}
		return s
	}
	before := snapshot()
	changed := func() string {
		after := snapshot()
		switch {
		case !slices.Equal(after.streams, before.streams):
			return fmt.Sprintf("streams %v, were %v", after.streams, before.streams)
		case !slices.Equal(after.consumers, before.consumers):
			return fmt.Sprintf("REACH_TASKS consumers %v, were %v", after.consumers, before.consumers)
		case after.tasks.MaxBytes != before.tasks.MaxBytes || after.tasks.Description != before.tasks.Description ||
			!slices.Equal(after.tasks.Subjects, before.tasks.Subjects):
			return "REACH_TASKS's configuration changed"
		case after.dlq != before.dlq:
			return fmt.Sprintf("REACH_DLQ holds %d messages, held %d", after.dlq, before.dlq)
		}
		for k, v := range after.values {
			if v != before.values[k] {
				return fmt.Sprintf("%s is %s, was %s", k, v, before.values[k])
			}
		}
		return ""
	}

	other := subj.Agent("echo-2") // the forged-delivery target
	forgedConsumer := fmt.Sprintf(`{"stream_name":%q,"config":{"durable_name":"evil","deliver_subject":%q,"ack_policy":"none","filter_subject":%q}}`,
		streams.StreamTasks, other, subj.SubmitWildcard())
	forgedStream := fmt.Sprintf(`{"name":"EVIL","subjects":[%q]}`, subj.SubmitWildcard())
	attacks := []struct{ name, subject, body string }{
		{"create a stream", "$JS.API.STREAM.CREATE.EVIL", forgedStream},
		{"update REACH_TASKS", "$JS.API.STREAM.UPDATE." + streams.StreamTasks,
			fmt.Sprintf(`{"name":%q,"subjects":[%q],"retention":"workqueue","description":"owned"}`, streams.StreamTasks, subj.SubmitWildcard())},
		{"delete REACH_TASKS", "$JS.API.STREAM.DELETE." + streams.StreamTasks, ""},
		{"delete REACH_POLICY's stream", "$JS.API.STREAM.DELETE.KV_" + streams.BucketPolicy, ""},
		{"purge REACH_DLQ", "$JS.API.STREAM.PURGE." + streams.StreamDLQ, ""},
		{"purge REACH_AGENTS's stream", "$JS.API.STREAM.PURGE.KV_" + streams.BucketAgents, ""},
		{"delete a dead letter", "$JS.API.STREAM.MSG.DELETE." + streams.StreamDLQ, `{"seq":1}`},
		{"create a consumer on REACH_TASKS delivering to another agent", "$JS.API.CONSUMER.CREATE." + streams.StreamTasks, forgedConsumer},
		{"create a named consumer on REACH_TASKS delivering to another agent", "$JS.API.CONSUMER.CREATE." + streams.StreamTasks + ".evil", forgedConsumer},
		{"create a filtered consumer on REACH_TASKS delivering to another agent",
			"$JS.API.CONSUMER.CREATE." + streams.StreamTasks + ".evil." + subj.SubmitWildcard(), forgedConsumer},
		{"create a durable on REACH_TASKS delivering to another agent", "$JS.API.CONSUMER.DURABLE.CREATE." + streams.StreamTasks + ".evil", forgedConsumer},
		{"pull from the dispatchers' consumer", "$JS.API.CONSUMER.MSG.NEXT." + streams.StreamTasks + "." + durable.DefaultConsumer, `{"batch":1}`},
		{"delete the dispatchers' consumer", "$JS.API.CONSUMER.DELETE." + streams.StreamTasks + "." + durable.DefaultConsumer, ""},
		{"read REACH_TASKS", "$JS.API.STREAM.MSG.GET." + streams.StreamTasks, `{"seq":1}`},
		{"read REACH_TASKS directly", "$JS.API.DIRECT.GET." + streams.StreamTasks, `{"seq":1}`},
		{"read REACH_DLQ", "$JS.API.STREAM.MSG.GET." + streams.StreamDLQ, `{"seq":1}`},
		{"read REACH_DLQ directly", "$JS.API.DIRECT.GET." + streams.StreamDLQ, `{"seq":1}`},
		{"read REACH_REVIEW", "$JS.API.STREAM.MSG.GET." + streams.StreamReview, `{"seq":1}`},
		{"read REACH_RUNS's stream", "$JS.API.STREAM.MSG.GET.KV_" + streams.BucketRuns, `{"seq":1}`},
		{"list the streams", "$JS.API.STREAM.LIST", ""},
		{"read REACH_TASKS's info", "$JS.API.STREAM.INFO." + streams.StreamTasks, ""},
		{"write the ACL", "$KV." + streams.BucketPolicy + "." + policy.KeyACL, `{"rules":[{"caller":"*","may_call":["*"]}]}`},
		{"write another agent's REACH_AGENTS key", "$KV." + streams.BucketAgents + ".echo-2",
			`{"id":"echo-2","type":"echo","capabilities":["echo"],"max_concurrent":8,"heartbeat_ms":1000,"status":"draining"}`},
		{"write another type's REACH_CAPS key", "$KV." + streams.BucketCaps + ".payment", `{}`},
		{"write a REACH_BREAKERS key", "$KV." + streams.BucketBreakers + ".echo-2", `{"state":"open"}`},
		{"write a REACH_RUNS key", "$KV." + streams.BucketRuns + ".forged-run", `{}`},
		{"ack a task in REACH_TASKS", "$JS.ACK." + streams.StreamTasks + "." + durable.DefaultConsumer + ".1.1.1.0.0", ""},
	}
	// A caller has no business in REACH_IDEMPOTENCY at all (an agent's use
	// of it is scoped elsewhere).
	callerOnly := []struct{ name, subject, body string }{
		{"write a REACH_IDEMPOTENCY key", "$KV." + streams.BucketIdempotency + ".echo.caller.forged", `{}`},
	}

	var l securityLedger
	sweep := func(who string, list []struct{ name, subject, body string }) {
		w := watch(t, func(o ...nats.Option) *nats.Conn { return st.ConnAs(who, o...) })
		inbox := w.nc.NewInbox()
		replies, err := w.nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			ok, ev := w.violated(a.subject, func(nc *nats.Conn) error { return nc.PublishRequest(a.subject, inbox, []byte(a.body)) })
			leak := ""
			if !quiet(t, w.nc, replies) {
				leak = "the JetStream API answered"
			} else {
				leak = changed()
			}
			if leak != "" {
				ev += "; " + leak
			}
			l.add(attempt{name: fmt.Sprintf("%s (%s): %s", who, roleOf(st, who), a.name), refused: ok, leaked: leak != "", evidence: ev})
		}
	}
	sweep("echo-1", attacks)
	sweep(SecureCaller, append(attacks, callerOnly...))

	// A write to the one key an agent may write, with a header that would
	// purge every other key of the bucket: JetStream refuses it (the bucket
	// allows no rollups), and every declaration stays.
	{
		js, err := jetstream.New(st.ConnAs("echo-1"))
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"$KV." + streams.BucketCaps + ".echo"} {
			m := nats.NewMsg(key)
			m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
			m.Data = []byte(`{}`)
			_, err := js.PublishMsg(ctx, m)
			leak := changed()
			l.add(attempt{name: "echo-1 (agent): purge the whole bucket with Nats-Rollup: all on " + key,
				refused: err != nil, leaked: leak != "", evidence: fmt.Sprint(err, "; ", leak)})
		}
	}
	l.check(t)

	// Controls: the same identities do what they must.
	t.Run("agent registers itself and declares its type", func(t *testing.T) {
		st.Identity(auth.Identity{Name: "spy-1", Role: auth.RoleAgent, Type: "spy"})
		js, err := jetstream.New(st.ConnAs("spy-1"))
		if err != nil {
			t.Fatal(err)
		}
		agents, err := js.KeyValue(ctx, streams.BucketAgents)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := agents.Put(ctx, "spy-1", []byte(`{"id":"spy-1","type":"spy","capabilities":["spy"]}`)); err != nil {
			t.Fatalf("an agent cannot write its own record: %v", err)
		}
		if _, err := agents.Get(ctx, "echo-2"); err != nil {
			t.Fatalf("an agent cannot read another's record: %v", err)
		}
		caps, err := js.KeyValue(ctx, streams.BucketCaps)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := caps.Put(ctx, "spy", []byte(`{}`)); err != nil {
			t.Fatalf("an agent cannot declare its own type: %v", err)
		}
	})
	t.Run("agent and caller call and submit", func(t *testing.T) {
		for _, who := range []string{SecureCaller, "echo-1"} {
			c := st.ClientAs(who)
			if _, err := c.Call(ctx, "echo", map[string]string{"text": "hi"}); err != nil {
				t.Fatalf("%s cannot call echo: %v", who, err)
			}
			if _, err := c.Submit(ctx, "echo", map[string]string{"text": "later"}); err != nil {
				t.Fatalf("%s cannot submit echo: %v", who, err)
			}
		}
	})
}

// A "Nats-Rollup: all" header on a write to the one key an identity may
// write would purge every other key of the bucket, and NATS permissions
// cannot see headers. REACH_IDEMPOTENCY refuses rollups, so no agent can
// purge the outcomes other agents stored (which would make their writes
// run twice); a plain write of its own key still goes through.
func TestSecurityRollupCannotPurgeStoredOutcomes(t *testing.T) {
	st := NewSecureStack(t, time.Second, jsapiACL)
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ajs, err := jetstream.New(st.admin)
	if err != nil {
		t.Fatal(err)
	}
	outcomes, err := ajs.KeyValue(ctx, streams.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	other := streams.IdempotencyKey("math.add", "caller", "order-1") // another agent's stored outcome
	if _, err := outcomes.Put(ctx, other, []byte("done")); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(st.ConnAs("echo-1"))
	if err != nil {
		t.Fatal(err)
	}
	own := "$KV." + streams.BucketIdempotency + "." + streams.IdempotencyKey("echo", "caller", "k-1")
	m := nats.NewMsg(own)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	m.Data = []byte("x")
	if _, err := js.PublishMsg(ctx, m); err == nil {
		t.Fatal("an agent's rollup of REACH_IDEMPOTENCY was stored")
	}
	if _, err := outcomes.Get(ctx, other); err != nil {
		t.Fatalf("another agent's stored outcome after the rollup: %v", err)
	}
	if _, err := js.Publish(ctx, own, []byte("x")); err != nil { // the control: its own key, plainly
		t.Fatalf("an agent's plain write of its own outcome: %v", err)
	}
}

// REACH_AGENTS cannot refuse rollups: the server keeps them on where a
// bucket has limit markers, which its expiry needs (docs/security.md, Size
// limits). So an agent's "Nats-Rollup: all" on its own record purges the
// others' from the bucket — and this test pins what that costs: nothing
// routed changes (the dispatchers' tables follow the bucket's changes, and
// a rollup is no deletion of the other keys), and every live agent's record
// is back with its next heartbeat. Should the server start refusing the
// rollup, the test says so: then it becomes a row of the sweep above.
func TestSecurityAgentsRollupLeavesRoutingIntact(t *testing.T) {
	const hb = 500 * time.Millisecond
	st := NewSecureStack(t, hb, jsapiACL)
	d := st.Dispatcher(config.Config{})
	var got [2]atomic.Int64
	for i, id := range []string{"echo-1", "echo-2"} {
		st.Agent(agentkit.Config{ID: id, Type: "echo"}, map[string]agentkit.Handler{"echo": func(_ context.Context, r *agentkit.Request) (any, error) {
			got[i].Add(1)
			return r.Data, nil
		}})
	}
	WaitRoutable(t, "echo", 2, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(st.ConnAs("echo-1"))
	if err != nil {
		t.Fatal(err)
	}
	ajs, err := jetstream.New(st.admin)
	if err != nil {
		t.Fatal(err)
	}
	records, err := ajs.KeyValue(ctx, streams.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	own, err := records.Get(ctx, "echo-1")
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("$KV." + streams.BucketAgents + ".echo-1")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	m.Data = own.Value() // its own record, as its heartbeat writes it
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("the server refused an agent's rollup of REACH_AGENTS (%v): the hole is closed; make it a row of TestSecurityJetStreamAPISweep", err)
	}
	if n := len(d.Table().Offering("echo")); n != 2 {
		t.Errorf("after the rollup the dispatcher offers %d echo instances, want both", n)
	}
	c := st.Client()
	before := got[1].Load()
	for range 20 {
		if _, err := c.Call(ctx, "echo", map[string]int{"n": 1}); err != nil {
			t.Fatalf("a call after the rollup: %v", err)
		}
	}
	if got[1].Load() == before {
		t.Error("echo-2 got none of 20 calls after echo-1's rollup")
	}
	natstest.WaitFor(t, 10*hb, func() error { // back with its next heartbeat
		_, err := records.Get(ctx, "echo-2")
		return err
	})
}

// roleOf names identity name's role, for the ledger.
func roleOf(st *SecureStack, name string) auth.Role {
	id, _ := st.Store.Identity(name)
	return id.Role
}
