package idem

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// lostAnswers is the idempotency bucket with the answer of its next
// creates lost: each is stored, and its caller told it timed out — as
// when the server stores a write and the answer does not make it back.
type lostAnswers struct {
	jetstream.KeyValue
	lose atomic.Int64
}

func (k *lostAnswers) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := k.KeyValue.Create(ctx, key, value, opts...)
	if err == nil && k.lose.Add(-1) >= 0 {
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

// stopped is a Store's Done, closed when the test ends: what the store
// looks after in the background (an abandon, a late outcome) stops with
// it instead of outliving the test.
func stopped(t *testing.T) <-chan struct{} {
	c := make(chan struct{})
	t.Cleanup(func() { close(c) })
	return c
}

func idemStore(t *testing.T) (jetstream.KeyValue, *registry.Registry) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Heartbeat: 500 * time.Millisecond, Memory: true})
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return kv, reg
}

// A claim create whose answer was lost although the claim was stored is
// read back and taken as the task's own: the task runs and its outcome is
// stored, and another instance replays it — instead of the claim, which
// nothing ran under, putting the key in doubt (the chaos runs' "in doubt"
// for tasks that never ran).
func TestAClaimStoredWithoutAnswerIsReconciled(t *testing.T) {
	kv, reg := idemStore(t)
	lossy := &lostAnswers{KeyValue: kv}
	lossy.lose.Store(1)
	w1 := &Store{KV: lossy, Reg: reg, Owner: "w1", Incarnation: NewIncarnation(), Done: stopped(t), Check: 500 * time.Millisecond, Log: zerolog.Nop()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec, err := w1.Begin(ctx, "pay.charge.=.k1", "req-1")
	if rec != nil || err != nil || lossy.lose.Load() != 0 {
		t.Fatalf("begin: %+v %v (lost answers left %d), want to execute", rec, err, lossy.lose.Load())
	}
	if err := w1.Save(ctx, "pay.charge.=.k1", &Record{RequestID: "req-1", ContentType: streams.ContentTypeJSON, Data: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	w2 := &Store{KV: kv, Reg: reg, Owner: "w2", Incarnation: NewIncarnation(), Done: stopped(t), Check: 500 * time.Millisecond, Log: zerolog.Nop()}
	rec, err = w2.Begin(ctx, "pay.charge.=.k1", "req-2")
	if err != nil || rec == nil || rec.State != StateDone || string(rec.Data) != `1` || rec.Incarnation != w1.Incarnation {
		t.Fatalf("another instance: %+v %v, want the stored outcome", rec, err)
	}
}

// A claim of this run whose create got no answer, that no task took, is
// deleted once the store answers (abandon): otherwise every later attempt
// would wait for this live instance, which is not executing it. Control:
// a claim a task of this instance holds (adopted) is left alone.
func TestAnUnansweredClaimIsAbandoned(t *testing.T) {
	kv, reg := idemStore(t)
	id := &Store{KV: kv, Reg: reg, Owner: "w1", Incarnation: NewIncarnation(), Done: stopped(t), Check: 500 * time.Millisecond, Log: zerolog.Nop()}
	ctx := context.Background()
	claim, _ := msgpack.Marshal(&Record{State: StatePending, Owner: id.Owner, Incarnation: id.Incarnation, RequestID: "req-1"})
	for _, key := range []string{"pay.charge.=.left", "pay.charge.=.held"} {
		if _, err := kv.Create(ctx, key, claim); err != nil {
			t.Fatal(err)
		}
	}
	id.unsure.Store("pay.charge.=.left", claim)
	id.executing.Store("pay.charge.=.held", struct{}{}) // a task of this instance holds it, adopted (no longer unsure)
	id.abandon("pay.charge.=.left")
	id.abandon("pay.charge.=.held")
	if _, err := kv.Get(ctx, "pay.charge.=.left"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the abandoned claim: %v, want it deleted", err)
	}
	if _, err := kv.Get(ctx, "pay.charge.=.held"); err != nil {
		t.Fatalf("the held claim: %v, want it kept", err)
	}
	if _, ok := id.unsure.Load("pay.charge.=.left"); ok {
		t.Fatal("the abandoned claim is still unsure")
	}
}

// lineSignal is a log that closes seen at the first line containing
// want.
type lineSignal struct {
	want string
	once sync.Once
	seen chan struct{}
}

func (w *lineSignal) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// An unanswered claim whose key a task of this instance holds when abandon
// first looks — the task that gave up on it and started abandon has yet
// to let go of the key, or its own create went unanswered too — is
// deleted once that task lets go without adopting it. Abandon used to
// leave it then, so a later attempt at another instance waited for this
// live one, which was not executing it, until the task's deadline (an
// hour for a durable task), its PROCESSING keeping the dispatcher's
// delivery alive: the chaos runs' durable tasks held in routeWait.
// Control: the other instance's attempt then executes.
func TestAnUnansweredClaimIsAbandonedOnceItsHolderLetsGo(t *testing.T) {
	kv, reg := idemStore(t)
	looked := &lineSignal{want: "a task of this instance holds the key", seen: make(chan struct{})}
	id := &Store{KV: kv, Reg: reg, Owner: "w1", Incarnation: NewIncarnation(), Done: stopped(t), Check: 500 * time.Millisecond,
		Log: zerolog.New(looked).Level(zerolog.DebugLevel)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const key = "pay.charge.=.k1"
	claim, _ := msgpack.Marshal(&Record{State: StatePending, Owner: id.Owner, Incarnation: id.Incarnation, RequestID: "req-1"})
	if _, err := kv.Create(ctx, key, claim); err != nil {
		t.Fatal(err)
	}
	id.unsure.Store(key, claim)
	id.executing.Store(key, struct{}{}) // the task that gave up on the claim still holds the key
	done := make(chan struct{})
	go func() {
		id.abandon(key)
		close(done)
	}()
	select {
	case <-looked.seen:
		id.executing.Delete(key) // it lets go, without adopting the claim
	case <-done: // abandon gave up on the held key without looking again
	}
	<-done
	if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the claim once its holder let go: %v, want it deleted", err)
	}
	if _, ok := id.unsure.Load(key); ok {
		t.Fatal("the abandoned claim is still unsure")
	}
	w2 := &Store{KV: kv, Reg: reg, Owner: "w2", Incarnation: NewIncarnation(), Done: stopped(t), Check: 500 * time.Millisecond, Log: zerolog.Nop()}
	if rec, err := w2.Begin(ctx, key, "req-2"); rec != nil || err != nil {
		t.Fatalf("another instance's attempt: %+v %v, want to execute", rec, err)
	}
}

// A task that ends waiting on a key while a claim of this run, whose
// create got no answer, is still not adopted — its deadline came first —
// leaves that claim to an abandon, which deletes it once the key is free.
// Nothing looked after it before: the claim stayed pending under a live
// owner that was not executing it, and another instance's attempt waited
// for it until the task's deadline. Control: that attempt then executes.
func TestAWaitThatEndsLeavesAnUnadoptedClaimToAbandon(t *testing.T) {
	kv, reg := idemStore(t)
	done := make(chan struct{})
	defer close(done)
	id := &Store{KV: kv, Reg: reg, Owner: "w1", Incarnation: NewIncarnation(), Check: 50 * time.Millisecond,
		Done: done, Log: zerolog.Nop()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const key = "pay.charge.=.k2"
	claim, _ := msgpack.Marshal(&Record{State: StatePending, Owner: id.Owner, Incarnation: id.Incarnation, RequestID: "req-1"})
	if _, err := kv.Create(ctx, key, claim); err != nil {
		t.Fatal(err)
	}
	id.unsure.Store(key, claim)
	id.executing.Store(key, struct{}{}) // another task of this instance holds the key
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer wcancel()
	if rec, err := id.Begin(wctx, key, "req-2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a task waiting past its deadline: %+v %v, want its deadline", rec, err)
	}
	id.executing.Delete(key) // the holder lets go, without adopting the claim
	for {
		_, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the claim no task adopted: %v, want it deleted", err)
		}
		time.Sleep(20 * time.Millisecond) // the pace of the polls
	}
	w2 := &Store{KV: kv, Reg: reg, Owner: "w2", Incarnation: NewIncarnation(), Done: stopped(t), Check: 50 * time.Millisecond, Log: zerolog.Nop()}
	if rec, err := w2.Begin(ctx, key, "req-3"); rec != nil || err != nil {
		t.Fatalf("another instance's attempt: %+v %v, want to execute", rec, err)
	}
}

// failedGets is the idempotency bucket with its next reads failing as
// fail says: a replica behind its leader finds nothing, a read sent on a
// link that went down waits unanswered until its context ends.
type failedGets struct {
	jetstream.KeyValue
	failing atomic.Int64
	fail    func(context.Context) error
}

func (k *failedGets) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.failing.Add(-1) >= 0 {
		return nil, k.fail(ctx)
	}
	return k.KeyValue.Get(ctx, key)
}

func behindReplica(context.Context) error { return jetstream.ErrKeyNotFound }

func unanswered(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// An unanswered claim that a read does not find — a replica behind its
// leader answered: the leader that took the create stepped down before
// the replica heard of the commit — is not taken as never stored: abandon
// asks the leader (a create) and deletes the claim once it is found. It
// used to conclude there was nothing to delete, and the claim, committed by
// the next leader, stayed pending under this live owner (a chaos run's
// leader isolation lost a durable task so). Control: a key that is free
// indeed is left free.
func TestAnUnansweredClaimAReplicaDoesNotHoldYetIsAbandoned(t *testing.T) {
	kv, reg := idemStore(t)
	behind := &failedGets{KeyValue: kv, fail: behindReplica}
	id := &Store{KV: behind, Reg: reg, Owner: "w1", Incarnation: NewIncarnation(), Done: stopped(t), Check: 500 * time.Millisecond, Log: zerolog.Nop()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	claim, _ := msgpack.Marshal(&Record{State: StatePending, Owner: id.Owner, Incarnation: id.Incarnation, RequestID: "req-1"})
	const key, free = "pay.charge.=.k3", "pay.charge.=.k4"
	if _, err := kv.Create(ctx, key, claim); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key, free} {
		id.unsure.Store(k, claim)
		behind.failing.Store(1)
		id.abandon(k)
		if _, ok := id.unsure.Load(k); ok {
			t.Fatalf("%s: still unsure after abandon", k)
		}
		if _, err := kv.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("%s after abandon: %v, want no claim", k, err)
		}
	}
}

// refusedPuts is the idempotency bucket while it refuses writes: each put
// fails at once, as without a leader.
type refusedPuts struct {
	jetstream.KeyValue
	down atomic.Bool
}

func (k *refusedPuts) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if k.down.Load() {
		return 0, jetstream.ErrNoStreamResponse
	}
	return k.KeyValue.Put(ctx, key, value)
}

// An outcome the store did not take within the settling bound is stored
// once the store answers again, the key held meanwhile: the claim does not
// stay pending under this live owner, which every other instance's attempt
// would wait for until its task's deadline, and a task of this instance
// waits for the outcome instead of taking the key for in doubt. Control:
// before the store answers, the claim is pending and the key held.
func TestAnOutcomeNotStoredInTimeIsStoredOnceTheStoreAnswers(t *testing.T) {
	kv, reg := idemStore(t)
	puts := &refusedPuts{KeyValue: kv}
	done := make(chan struct{})
	defer close(done)
	id := &Store{KV: puts, Reg: reg, Owner: "w1", Incarnation: NewIncarnation(), Check: 50 * time.Millisecond, Done: done, Log: zerolog.Nop()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const key = "pay.charge.=.k5"
	if rec, err := id.Begin(ctx, key, "req-1"); rec != nil || err != nil {
		t.Fatalf("begin: %+v %v, want to execute", rec, err)
	}
	puts.down.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer scancel()
	if err := id.Save(sctx, key, &Record{RequestID: "req-1", Data: []byte(`"paid"`)}); err == nil {
		t.Fatal("a save the store refused: nil error")
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := Decode(e.Value()); rec.State != StatePending {
		t.Fatalf("the claim while the store refuses: %+v, want pending", rec)
	}
	if _, held := id.executing.Load(key); !held {
		t.Fatal("the key was let go before its outcome was stored")
	}
	puts.down.Store(false)
	for {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if rec, _ := Decode(e.Value()); rec.State == StateDone {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the outcome not stored once the store answered")
		}
		time.Sleep(20 * time.Millisecond) // the pace of the polls
	}
	w2 := &Store{KV: kv, Reg: reg, Owner: "w2", Incarnation: NewIncarnation(), Done: stopped(t), Check: 50 * time.Millisecond, Log: zerolog.Nop()}
	rec, err := w2.Begin(ctx, key, "req-2")
	if err != nil || rec == nil || string(rec.Data) != `"paid"` {
		t.Fatalf("another instance's attempt: %+v %v, want the stored outcome", rec, err)
	}
}

// A waiter whose read of the pending claim goes unanswered asks again: it
// gets the outcome stored meanwhile, instead of waiting on the lost read
// until its task's deadline (a durable task's is an hour) while its
// PROCESSING keeps the dispatcher's delivery alive — the chaos runs'
// durable tasks that ended nowhere after a flapping link. Control: the
// same wait with every read answered.
func TestAWaiterAsksAgainWhenAReadIsLost(t *testing.T) {
	for _, lost := range []int64{0, 2} {
		kv, reg := idemStore(t)
		w1 := &Store{KV: kv, Reg: reg, Owner: "w1", Incarnation: NewIncarnation(), Done: stopped(t), Check: 500 * time.Millisecond, Log: zerolog.Nop()}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if rec, err := w1.Begin(ctx, "pay.charge.=.k1", "req-1"); rec != nil || err != nil {
			t.Fatalf("begin: %+v %v, want to execute", rec, err)
		}
		lossy := &failedGets{KeyValue: kv, fail: unanswered}
		lossy.failing.Store(lost)
		w2 := &Store{KV: lossy, Reg: reg, Owner: "w2", Incarnation: NewIncarnation(), Done: stopped(t), Check: time.Hour, Log: zerolog.Nop()}
		type result struct {
			rec *Record
			err error
		}
		got := make(chan result, 1)
		go func() {
			rec, err := w2.Begin(ctx, "pay.charge.=.k1", "req-2")
			got <- result{rec, err}
		}()
		if err := w1.Save(ctx, "pay.charge.=.k1", &Record{RequestID: "req-1", ContentType: streams.ContentTypeJSON, Data: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
		r := <-got
		cancel()
		if r.err != nil || r.rec == nil || r.rec.State != StateDone || string(r.rec.Data) != `1` {
			t.Fatalf("%d reads lost: %+v %v, want the stored outcome", lost, r.rec, r.err)
		}
		if n := lossy.failing.Load(); n > 0 {
			t.Fatalf("%d reads lost: %d never asked", lost, n)
		}
	}
}

// unavailable is the idempotency bucket without a leader: every create
// fails "no responders" until answer is closed; failed says a create
// failed.
type unavailable struct {
	jetstream.KeyValue
	answer chan struct{}
	failed chan string
}

func (k *unavailable) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	select {
	case <-k.answer:
		return k.KeyValue.Create(ctx, key, value, opts...)
	default:
	}
	select {
	case k.failed <- key:
	default:
	}
	return 0, jetstream.ErrNoStreamResponse
}

// While the store does not answer, at most MaxRetrying claims are retried
// (each holds its task's slot): a claim beyond them gives up at its first
// unanswered create, and is looked after as one that may have been stored
// (abandoned once the store answers); the claim retried executes once the
// store answers. Control: that claim was retried, not refused.
func TestClaimsRetriedAtOnceAreBounded(t *testing.T) {
	kv, reg := idemStore(t)
	down := &unavailable{KeyValue: kv, answer: make(chan struct{}), failed: make(chan string, 1)}
	id := &Store{KV: down, Reg: reg, Owner: "w1", Incarnation: NewIncarnation(), Done: stopped(t), Check: 500 * time.Millisecond,
		MaxRetrying: 1, Log: zerolog.Nop()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		rec, err := id.Begin(ctx, "pay.charge.=.a", "req-a")
		if rec != nil {
			err = errors.New("a stored outcome, want to execute")
		}
		first <- err
	}()
	if key := <-down.failed; key != "pay.charge.=.a" {
		t.Fatalf("the first failed create was for %q", key)
	}
	// The first claim is being retried: the second is refused at once.
	_, err := id.Begin(ctx, "pay.charge.=.b", "req-b")
	// Refused by the bound at its first unanswered create, not after
	// retrying (the creates its abandon sends next are not the task's).
	if err == nil || !errors.Is(err, jetstream.ErrNoStreamResponse) || !strings.Contains(err.Error(), "1 claims already wait for the store") {
		t.Fatalf("the second claim: %v, want it refused by the bound (no responders)", err)
	}
	if _, ok := id.unsure.Load("pay.charge.=.b"); !ok {
		t.Fatal("the refused claim is not looked after, though it may have been stored")
	}
	close(down.answer)
	if err := <-first; err != nil {
		t.Fatalf("the retried claim: %v", err)
	}
	if _, err := kv.Get(ctx, "pay.charge.=.b"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the refused claim's key: %v, want none", err)
	}
	if n := id.retrying.Load(); n != 0 {
		t.Fatalf("%d claims still counted as retried", n)
	}
}
