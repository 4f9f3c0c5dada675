package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// A broadcast runs on one shared delivery (dispatcher/fanout): these tests
// check, with raw-protocol instances, the guarantees each branch keeps
// there — its own ACK deadline, the CANCEL once the policy is met without
// it, and that an instance can answer for no branch but its own.

// bcastSeen records what raw instances receive: their bcastSeen and the
// CANCELs (no reply subject), by instance.
type bcastSeen struct {
	mu     sync.Mutex
	got    map[string][]*nats.Msg
	cancel map[string][]*nats.Msg
}

func (d *bcastSeen) add(id string, m *nats.Msg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.got == nil {
		d.got, d.cancel = map[string][]*nats.Msg{}, map[string][]*nats.Msg{}
	}
	if m.Reply == "" {
		d.cancel[id] = append(d.cancel[id], m)
		return
	}
	d.got[id] = append(d.got[id], m)
}

// cancelled waits until id got a CANCEL for its delivery and returns both.
func (d *bcastSeen) cancelled(t *testing.T, id string) (delivery, cancel *nats.Msg) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.got[id]) == 0 || len(d.cancel[id]) == 0 {
			return fmt.Errorf("%s: %d bcastSeen, %d cancels", id, len(d.got[id]), len(d.cancel[id]))
		}
		delivery, cancel = d.got[id][0], d.cancel[id][0]
		return nil
	})
	return delivery, cancel
}

// checkCancel says whether cancel names delivery: its request id, its
// attempt and its reply subject.
func checkCancel(t *testing.T, delivery, cancel *nats.Msg) {
	t.Helper()
	if cancel.Header.Get(streams.HeaderStatus) != string(streams.StatusCancel) ||
		cancel.Header.Get(streams.HeaderRequestID) != delivery.Header.Get(streams.HeaderRequestID) ||
		cancel.Header.Get(streams.HeaderDelivery) != delivery.Reply {
		t.Errorf("cancel %v does not name the delivery %v (reply %s)", cancel.Header, delivery.Header, delivery.Reply)
	}
}

func TestABroadcastBranchWithoutAckTimesOutAlone(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{AckTimeout: 300 * time.Millisecond})
	st.FanOut(d)
	nc := st.Conn()
	var seen bcastSeen
	for _, id := range []string{"peer-1", "peer-2"} {
		RawInstance(t, nc, id, time.Second, func(m *nats.Msg) {
			seen.add(id, m)
			if m.Reply != "" {
				finish(nc, m, []byte(`{"me":"`+id+`"}`))
			}
		}, "peer.ping")
	}
	RawInstance(t, nc, "mute-1", time.Second, func(m *nats.Msg) { seen.add("mute-1", m) }, "peer.ping") // never ACKs
	WaitRoutable(t, "peer.ping", 3, d)

	res, r := fanoutReq(t, nc, streams.Subjects{}.Broadcast("peer.ping"), []byte(`{}`))
	if res.Header.Get(streams.HeaderError) != string(streams.CodeIncomplete) || r.Expected != 3 || r.Answered != 2 || r.Succeeded != 2 {
		t.Fatalf("headers %v, aggregate %+v", res.Header, r)
	}
	for i, br := range r.Replies { // the control: the instances that answered are in, each by its own name
		if want := fmt.Sprintf("peer-%d", i+1); br.Name != want || br.Node != want || br.Status != "FINISHED" || br.Attempts != 1 {
			t.Errorf("reply %d: %+v, want %s FINISHED at attempt 1", i, br, want)
		}
	}
	if len(r.Missing) != 1 || r.Missing[0].Name != "mute-1" || r.Missing[0].Reason != string(streams.CodeTimeout) ||
		!strings.Contains(r.Missing[0].Message, "no ACK") {
		t.Fatalf("missing %+v, want mute-1 TIMEOUT for its ACK", r.Missing)
	}
	delivery, cancel := seen.cancelled(t, "mute-1")
	checkCancel(t, delivery, cancel)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for _, id := range []string{"peer-1", "peer-2"} {
		if len(seen.cancel[id]) != 0 {
			t.Errorf("%s answered and still got a CANCEL", id)
		}
	}
}

func TestABroadcastBranchStillRunningAtQuorumIsCancelled(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	nc := st.Conn()
	var seen bcastSeen
	for _, id := range []string{"fast-1", "fast-2"} {
		RawInstance(t, nc, id, time.Second, func(m *nats.Msg) {
			seen.add(id, m)
			if m.Reply != "" {
				finish(nc, m, []byte(`1`))
			}
		}, "vote")
	}
	late := make(chan *nats.Msg, 1)
	RawInstance(t, nc, "slow-1", time.Second, func(m *nats.Msg) {
		seen.add("slow-1", m)
		if m.Reply != "" { // acknowledges, and finishes only when its CANCEL has come
			_ = nc.PublishMsg(streams.StatusReply(m.Reply, streams.StatusAcked, ""))
			late <- m
		}
	}, "vote")
	WaitRoutable(t, "vote", 3, d)

	res, r := fanoutReq(t, nc, streams.Subjects{}.Broadcast("vote"), []byte(`{}`), streams.HeaderQuorum, "2")
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || !r.Complete || r.Expected != 3 || r.Succeeded != 2 {
		t.Fatalf("headers %v, aggregate %+v", res.Header, r)
	}
	if len(r.Missing) != 1 || r.Missing[0].Name != "slow-1" || r.Missing[0].Reason != string(streams.CodeCancelled) {
		t.Fatalf("missing %+v, want slow-1 CANCELLED", r.Missing)
	}
	delivery, cancel := seen.cancelled(t, "slow-1")
	checkCancel(t, delivery, cancel)
	finish(nc, <-late, []byte(`1`)) // its answer after all: nobody gathers it any more

	// A cancelled branch leaves no mark on its instance: the next broadcast
	// asks slow-1 again.
	RawInstance(t, nc, "slow-2", time.Second, func(m *nats.Msg) { finish(nc, m, []byte(`2`)) }, "vote")
	WaitRoutable(t, "vote", 4, d)
	res, r = fanoutReq(t, nc, streams.Subjects{}.Broadcast("vote"), []byte(`{}`), streams.HeaderQuorum, "3")
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || r.Expected != 4 || r.Succeeded != 3 {
		t.Fatalf("second broadcast: headers %v, aggregate %+v", res.Header, r)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.got["slow-1"]) != 2 {
		t.Errorf("slow-1 was asked %d times in two broadcasts", len(seen.got["slow-1"]))
	}
}

func TestABroadcastReplyFromAnInstanceNotAskedIsDropped(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{AckTimeout: 300 * time.Millisecond})
	st.FanOut(d)
	nc := st.Conn()
	RawInstance(t, nc, "honest-1", time.Second, func(m *nats.Msg) { finish(nc, m, []byte(`"honest"`)) }, "poll")
	RawInstance(t, nc, "silent-1", time.Second, func(*nats.Msg) {}, "poll") // the one impersonated: says nothing
	forged := make(chan int, 1)
	RawInstance(t, nc, "forger-1", time.Second, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		// Its own reply subject is <inbox>.<index>.<token>: it answers on
		// every other index, with its own token and with a made-up one,
		// and on its own subject in silent-1's name — then for itself.
		cut := strings.LastIndexByte(m.Reply, '.')
		head, token := m.Reply[:cut], m.Reply[cut+1:]
		inbox := head[:strings.LastIndexByte(head, '.')]
		n := 0
		forge := func(subject, node string) {
			out := nats.NewMsg(subject)
			out.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
			out.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
			if node != "" {
				out.Header.Set(streams.HeaderNode, node)
			}
			out.Data = []byte(`"forged"`)
			_ = nc.PublishMsg(out)
			n++
		}
		for i := range 3 {
			if s := fmt.Sprintf("%s.%d.%s", inbox, i, token); s != m.Reply {
				forge(s, "")
				forge(s, "silent-1")
			}
			forge(fmt.Sprintf("%s.%d.%s", inbox, i, strings.Repeat("0", len(token))), "")
		}
		forge(m.Reply, "silent-1")
		forged <- n
		finish(nc, m, []byte(`"forger"`))
	}, "poll")
	WaitRoutable(t, "poll", 3, d)

	res, r := fanoutReq(t, nc, streams.Subjects{}.Broadcast("poll"), []byte(`{}`))
	if n := <-forged; n == 0 {
		t.Fatal("nothing forged")
	}
	if res.Header.Get(streams.HeaderError) != string(streams.CodeIncomplete) || r.Expected != 3 || r.Answered != 2 {
		t.Fatalf("headers %v, aggregate %+v", res.Header, r)
	}
	got := map[string]string{}
	for _, br := range r.Replies {
		got[br.Name] = string(br.Result)
		if br.Node != br.Name {
			t.Errorf("reply %+v names another node than its branch", br)
		}
	}
	// The control: the honest instance and the forger's answer for itself
	// are gathered; no forged answer is.
	if got["honest-1"] != `"honest"` || got["forger-1"] != `"forger"` || len(got) != 2 {
		t.Errorf("replies %v, want honest-1 and forger-1 each with its own answer", got)
	}
	if len(r.Missing) != 1 || r.Missing[0].Name != "silent-1" || r.Missing[0].Reason != string(streams.CodeTimeout) {
		t.Errorf("missing %+v, want silent-1 TIMEOUT: forged answers in its name count for nothing", r.Missing)
	}
}

func TestABroadcastAsksOnlyTheInstancesMeetingItsRequirements(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	nc := st.Conn()
	putDeclaration(t, nc, `
type: probe-pg
capabilities: [{name: db.probe, mode: read}]
labels: {engine: [postgres]}
`, d)
	putDeclaration(t, nc, `
type: probe-mysql
capabilities: [{name: db.probe, mode: read}]
labels: {engine: [mysql]}
`, d)
	var counts sync.Map
	typed(t, st, "pg-1", "probe-pg", nil, &counts, "db.probe")
	typed(t, st, "pg-2", "probe-pg", nil, &counts, "db.probe")
	typed(t, st, "mysql-1", "probe-mysql", nil, &counts, "db.probe")
	WaitRoutable(t, "db.probe", 3, d)

	res, r := fanoutReq(t, nc, streams.Subjects{}.Broadcast("db.probe"), []byte(`{}`), streams.HeaderRequire, `{"labels":{"engine":"postgres"}}`)
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || r.Expected != 2 || r.Succeeded != 2 || r.Replies[0].Name != "pg-1" || r.Replies[1].Name != "pg-2" {
		t.Fatalf("broadcast requiring postgres: headers %v, aggregate %+v", res.Header, r)
	}
	if n := count(&counts, "mysql-1"); n != 0 {
		t.Errorf("mysql-1 was asked %d times by a broadcast requiring postgres", n)
	}
	// The control: without the requirement every instance is asked.
	if res, r = fanoutReq(t, nc, streams.Subjects{}.Broadcast("db.probe"), []byte(`{}`)); res.Header.Get(streams.HeaderStatus) != "FINISHED" || r.Expected != 3 {
		t.Fatalf("broadcast without requirement: headers %v, aggregate %+v", res.Header, r)
	}
	res, _ = fanoutReq(t, nc, streams.Subjects{}.Broadcast("db.probe"), []byte(`{}`), streams.HeaderRequire, `{"labels":{"engine":"oracle"}}`)
	if e := streams.ErrorFromMessage(res); e == nil || e.Code != streams.CodeNoAgent || len(e.Excluded) != 3 {
		t.Errorf("broadcast nobody qualifies for: headers %v, body %s; want NO_AGENT naming the three", res.Header, res.Data)
	}
}

func TestACallerCancelsItsBroadcastAndNoOtherOne(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	nc := st.Conn()
	var seen bcastSeen
	held := make(chan *nats.Msg, 4)
	RawInstance(t, nc, "hold-1", time.Second, func(m *nats.Msg) {
		seen.add("hold-1", m)
		if m.Reply != "" { // acknowledges, and finishes when the test says
			_ = nc.PublishMsg(streams.StatusReply(m.Reply, streams.StatusAcked, ""))
			held <- m
		}
	}, "hold")
	WaitRoutable(t, "hold", 1, d)

	replies := map[string]*nats.Subscription{}
	for _, id := range []string{"bcast-a", "bcast-b"} {
		inbox := nc.NewRespInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		replies[id] = sub
		m := nats.NewMsg(streams.Subjects{}.Broadcast("hold"))
		m.Reply, m.Data = inbox, []byte(`{}`)
		m.Header.Set(streams.HeaderRequestID, id)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	byParent := map[string]*nats.Msg{}
	for range 2 {
		m := <-held
		byParent[m.Header.Get(streams.HeaderParentID)] = m
	}
	c := nats.NewMsg(streams.Subjects{}.Cancel())
	c.Header.Set(streams.HeaderRequestID, "bcast-a")
	if err := nc.PublishMsg(c); err != nil {
		t.Fatal(err)
	}
	decode := func(id string) (*nats.Msg, streams.Aggregate) {
		res, err := replies[id].NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		var r streams.Aggregate
		if err := streams.Decode(streams.ContentType(res.Header, res.Data), res.Data, &r); err != nil {
			t.Fatalf("%s: aggregate %q: %v", id, res.Data, err)
		}
		return res, r
	}
	res, r := decode("bcast-a")
	if res.Header.Get(streams.HeaderError) != string(streams.CodeIncomplete) || r.Expected != 1 || len(r.Missing) != 1 ||
		r.Missing[0].Name != "hold-1" || r.Missing[0].Reason != string(streams.CodeCancelled) || !strings.Contains(r.Missing[0].Message, "caller") {
		t.Fatalf("the cancelled broadcast: headers %v, aggregate %+v", res.Header, r)
	}
	delivery, cancel := seen.cancelled(t, "hold-1")
	if delivery = byParent["bcast-a"]; delivery == nil {
		t.Fatal("no delivery of bcast-a to hold-1")
	}
	checkCancel(t, delivery, cancel)

	// The control: the other broadcast runs on, and gathers hold-1's answer.
	finish(nc, byParent["bcast-b"], []byte(`2`))
	res, r = decode("bcast-b")
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || r.Succeeded != 1 || r.Replies[0].Node != "hold-1" {
		t.Fatalf("the other broadcast: headers %v, aggregate %+v", res.Header, r)
	}
}

// A broadcast's cancel is proven like a task's: cancels of one caller's
// broadcast that are unsigned, proven by another identity, or signed by
// one and claiming the other stop nothing; the caller's own stops its
// other broadcast.
func TestABroadcastCancelStopsOnlyItsOwnCallersBroadcast(t *testing.T) {
	st := NewSecureStack(t, time.Second, `{"rules": [{"caller": "caller", "may_call": ["hold"]}, {"caller": "billing-*", "may_call": ["hold"]}]}`)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	started, stopped, release := make(chan string, 4), make(chan string, 4), make(chan struct{})
	st.Agent(agentkit.Config{ID: "hold-1", Type: "hold", MaxConcurrent: 4}, map[string]agentkit.Handler{"hold": func(ctx context.Context, r *agentkit.Request) (any, error) {
		parent := r.Header.Get(streams.HeaderParentID)
		started <- parent
		select {
		case <-ctx.Done():
			stopped <- parent
			return nil, ctx.Err()
		case <-release:
			return map[string]string{"done": parent}, nil
		}
	}})
	WaitRoutable(t, "hold", 1, d)
	st.Identity(auth.Identity{Name: "billing-1", Role: auth.RoleCaller})
	owner := st.Client()
	broadcast := func(id string) (context.CancelFunc, chan *agentkit.Gathered) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out := make(chan *agentkit.Gathered, 1)
		go func() {
			g, _ := owner.Broadcast(ctx, "hold", map[string]string{}, agentkit.WithRequestID(id))
			out <- g
		}()
		return cancel, out
	}
	_, gotA := broadcast("bcast-a")
	cancelB, gotB := broadcast("bcast-b")
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the broadcasts did not reach hold-1 within 10s")
		}
	}
	st.ForgeCancels("bcast-a", "billing-1")
	// The control: the owner's own cancel of bcast-b (agentkit sends it as
	// the call's context ends) reaches the dispatcher after those.
	cancelB()
	select {
	case id := <-stopped:
		if id != "bcast-b" {
			t.Fatalf("the branch of %s stopped, want bcast-b's", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the owner's cancel did not stop bcast-b's branch within 10s")
	}
	<-gotB
	close(release)
	if g := <-gotA; g == nil || g.Succeeded != 1 || g.Replies[0].Node != "hold-1" {
		t.Fatalf("bcast-a, which only other identities tried to cancel: %+v, want hold-1's result", g)
	}
}

func TestABroadcastTooLargeWithTheDispatchersHeadersAsksNobody(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	nc := st.Conn()
	var seen bcastSeen
	RawInstance(t, nc, "big-1", time.Second, func(m *nats.Msg) {
		seen.add("big-1", m)
		finish(nc, m, []byte(`1`))
	}, "big")
	WaitRoutable(t, "big", 1, d)
	body := []byte(`"` + strings.Repeat("x", int(nc.MaxPayload())-300) + `"`) // fits, with a request's few headers
	res, _ := fanoutReq(t, nc, streams.Subjects{}.Broadcast("big"), body)
	if e := streams.ErrorFromMessage(res); e == nil || e.Code != streams.CodePayloadTooLarge {
		t.Fatalf("headers %v, body %.200s; want PAYLOAD_TOO_LARGE", res.Header, res.Data)
	}
	// The control: a body with room for the dispatcher's headers goes out.
	if res, r := fanoutReq(t, nc, streams.Subjects{}.Broadcast("big"), []byte(`"small"`)); res.Header.Get(streams.HeaderStatus) != "FINISHED" || r.Succeeded != 1 {
		t.Fatalf("small broadcast: headers %v, aggregate %+v", res.Header, r)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if n := len(seen.got["big-1"]); n != 1 {
		t.Errorf("big-1 got %d deliveries, want only the small one", n)
	}
}
