package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// seen records the deliveries raw instances got, by capability.
type seen struct {
	mu sync.Mutex
	m  map[string][]*nats.Msg
}

func (s *seen) add(m *nats.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string][]*nats.Msg)
	}
	c := m.Header.Get(streams.HeaderCapability)
	s.m[c] = append(s.m[c], m)
}

func (s *seen) of(capability string) []*nats.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*nats.Msg(nil), s.m[capability]...)
}

// fanoutStack is a dispatcher with the fan-out service and raw instances:
// risk.credit and risk.fraud answer {"score": …}, risk.kyc acknowledges and
// never finishes, risk.reject refuses.
func fanoutStack(t *testing.T) (*Stack, *dispatcher.Dispatcher, *seen) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	nc := st.Conn()
	var s seen
	score := func(v float64) nats.MsgHandler {
		return func(m *nats.Msg) {
			s.add(m)
			body, _ := streams.Encode(m.Header.Get(streams.HeaderContentType), map[string]float64{"score": v})
			finish(nc, m, body)
		}
	}
	RawInstance(t, nc, "credit-1", time.Second, score(0.91), "risk.credit")
	RawInstance(t, nc, "fraud-1", time.Second, score(0.12), "risk.fraud")
	RawInstance(t, nc, "kyc-1", time.Second, func(m *nats.Msg) {
		if m.Reply == "" {
			s.add(m) // the CANCEL
			return
		}
		s.add(m)
		_ = nc.PublishMsg(streams.StatusReply(m.Reply, streams.StatusAcked, ""))
	}, "risk.kyc")
	RawInstance(t, nc, "reject-1", time.Second, func(m *nats.Msg) {
		s.add(m)
		_ = nc.PublishMsg(streams.ErrorReply(m.Reply, m.Header.Get(streams.HeaderContentType), "", streams.NewError(streams.CodeBizReject, "no")))
	}, "risk.reject")
	for _, c := range []string{"risk.credit", "risk.fraud", "risk.kyc", "risk.reject"} {
		WaitRoutable(t, c, 1, d)
	}
	return st, d, &s
}

func fanoutReq(t *testing.T, nc *nats.Conn, subject string, body []byte, kv ...string) (*nats.Msg, streams.Aggregate) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = body
	for i := 0; i+1 < len(kv); i += 2 {
		m.Header.Set(kv[i], kv[i+1])
	}
	res, err := nc.RequestMsg(m, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r streams.Aggregate
	if err := streams.Decode(streams.ContentType(res.Header, res.Data), res.Data, &r); err != nil {
		t.Fatalf("aggregate %q does not decode: %v", res.Data, err)
	}
	return res, r
}

func TestAFanOutGathersItsBranchesByQuorum(t *testing.T) {
	st, _, s := fanoutStack(t)
	nc := st.Conn()
	body := []byte(`{"branches": [
	  {"name": "credit", "capability": "risk.credit", "payload": {"id": 7}},
	  {"name": "fraud",  "capability": "risk.fraud",  "payload": {"id": 7}},
	  {"name": "reject", "capability": "risk.reject"},
	  {"name": "kyc",    "capability": "risk.kyc",    "timeout_ms": 300}],
	 "mode": "quorum", "quorum": 0.5}`)
	start := time.Now()
	res, r := fanoutReq(t, nc, streams.Subjects{}.FanOut(), body, streams.HeaderRequestID, "fan-1", streams.HeaderOrchestrationID, "orch-1")
	took := time.Since(start)

	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || res.Header.Get(streams.HeaderExpected) != "4" || res.Header.Get(streams.HeaderAnswered) != "3" {
		t.Fatalf("reply headers %v, want FINISHED with 4 expected and 3 answered", res.Header)
	}
	if r.Expected != 4 || r.Answered != 3 || r.Succeeded != 2 || !r.Complete || len(r.Replies) != 3 || len(r.Missing) != 1 {
		t.Fatalf("aggregate %+v", r)
	}
	if got := r.Replies[0]; got.Name != "credit" || got.Node != "credit-1" || got.Status != "FINISHED" || got.Attempts != 1 {
		t.Errorf("first reply %+v", got)
	}
	if score := string(res.Data); !strings.Contains(score, `"result":{"score":0.91}`) {
		t.Errorf("the credit result is not embedded as a JSON value: %s", score)
	}
	if got := r.Replies[2]; got.Name != "reject" || got.Error == nil || got.Error.Code != streams.CodeBizReject {
		t.Errorf("the rejecting branch: %+v", got)
	}
	if m := r.Missing[0]; m.Name != "kyc" || m.Reason != string(streams.CodeTimeout) {
		t.Errorf("missing %+v, want kyc TIMEOUT", m)
	}
	t.Logf("the fan-out with a 300 ms branch answered after %v", took)

	// Each branch is a task of its own, tied to the fan-out.
	ids := make(map[string]bool)
	for _, c := range []string{"risk.credit", "risk.fraud", "risk.reject", "risk.kyc"} {
		dl := s.of(c)[0]
		if dl.Header.Get(streams.HeaderParentID) != "fan-1" || dl.Header.Get(streams.HeaderOrchestrationID) != "orch-1" {
			t.Errorf("%s delivery headers %v", c, dl.Header)
		}
		ids[dl.Header.Get(streams.HeaderRequestID)] = true
	}
	if len(ids) != 4 || ids["fan-1"] {
		t.Errorf("branch request ids %v: want four of their own", ids)
	}
	if string(s.of("risk.credit")[0].Data) != `{"id": 7}` {
		t.Errorf("credit payload %q", s.of("risk.credit")[0].Data)
	}
	// The branch cut at its timeout was cancelled at its instance.
	natstest.WaitFor(t, 5*time.Second, func() error {
		for _, m := range s.of("risk.kyc") {
			if m.Header.Get(streams.HeaderStatus) == string(streams.StatusCancel) {
				return nil
			}
		}
		return fmt.Errorf("no CANCEL reached kyc-1")
	})

	// One record per branch and one for the fan-out.
	js, _ := jetstream.New(nc)
	natstest.WaitFor(t, 5*time.Second, func() error {
		evs := readEvents(t, js)
		var branches, fan int
		for _, ev := range evs {
			switch {
			case ev.Kind == "fanout" && ev.RequestID == "fan-1" && ev.Expected == 4 && ev.Succeeded == 2:
				fan++
			case ev.ParentID == "fan-1":
				branches++
			}
		}
		if branches != 4 || fan != 1 {
			return fmt.Errorf("%d branch records and %d fan-out records, want 4 and 1", branches, fan)
		}
		return nil
	})
}

// readEvents reads every record in REACH_EVENTS.
func readEvents(t *testing.T, js jetstream.JetStream) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := durable.ListParked(ctx, js, streams.Subjects{}, streams.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for _, p := range list {
		evs, err := events.DecodeEvents(p.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
	}
	return out
}

func TestAFanOutThatMissesItsPolicyIsIncomplete(t *testing.T) {
	st, _, _ := fanoutStack(t)
	body := []byte(`{"branches": [{"name": "credit", "capability": "risk.credit"}, {"name": "reject", "capability": "risk.reject"}], "mode": "all"}`)
	res, r := fanoutReq(t, st.Conn(), streams.Subjects{}.FanOut(), body)
	if res.Header.Get(streams.HeaderStatus) != "FAILED" || res.Header.Get(streams.HeaderError) != string(streams.CodeIncomplete) {
		t.Fatalf("headers %v, want FAILED INCOMPLETE", res.Header)
	}
	if r.Complete || r.Succeeded != 1 || r.Answered != 2 || len(r.Replies) != 2 {
		t.Errorf("aggregate %+v", r)
	}
	// A caller that only reads {"code","message"} learns why.
	if e := streams.ErrorFromMessage(res); e == nil || e.Code != streams.CodeIncomplete || !strings.Contains(e.Message, "1 of 2") {
		t.Errorf("error of the reply: %v", e)
	}
}

func TestFirstModeTakesTheFirstSuccessAndCancelsTheRest(t *testing.T) {
	st, _, s := fanoutStack(t)
	body := []byte(`{"branches": [{"name": "kyc", "capability": "risk.kyc"}, {"name": "credit", "capability": "risk.credit"}], "mode": "first"}`)
	res, r := fanoutReq(t, st.Conn(), streams.Subjects{}.FanOut(), body)
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || !r.Complete || r.Succeeded != 1 {
		t.Fatalf("headers %v, aggregate %+v", res.Header, r)
	}
	if len(r.Missing) != 1 || r.Missing[0].Name != "kyc" || r.Missing[0].Reason != string(streams.CodeCancelled) {
		t.Errorf("missing %+v, want kyc CANCELLED", r.Missing)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		for _, m := range s.of("risk.kyc") {
			if m.Header.Get(streams.HeaderStatus) == string(streams.StatusCancel) {
				return nil
			}
		}
		return fmt.Errorf("no CANCEL reached the losing branch")
	})
}

func TestAMsgpackFanOutEmbedsMsgpackResults(t *testing.T) {
	st, _, _ := fanoutStack(t)
	body, _ := msgpack.Marshal(map[string]any{"branches": []map[string]any{
		{"name": "credit", "capability": "risk.credit", "payload": map[string]int{"id": 7}}}})
	res, _ := fanoutReq(t, st.Conn(), streams.Subjects{}.FanOut(), body, streams.HeaderContentType, streams.ContentTypeMsgpack)
	if res.Header.Get(streams.HeaderContentType) != streams.ContentTypeMsgpack {
		t.Fatalf("reply in %q", res.Header.Get(streams.HeaderContentType))
	}
	var generic struct {
		Replies []struct {
			Result map[string]float64 `msgpack:"result"`
		} `msgpack:"replies"`
	}
	if err := msgpack.Unmarshal(res.Data, &generic); err != nil || len(generic.Replies) != 1 || generic.Replies[0].Result["score"] != 0.91 {
		t.Fatalf("msgpack aggregate %+v (%v)", generic, err)
	}
}

func TestABroadcastAsksEveryInstance(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	nc := st.Conn()
	var mu sync.Mutex
	asked := map[string]int{}
	for i, ok := range []bool{true, true, false} {
		id := fmt.Sprintf("peer-%d", i+1)
		RawInstance(t, nc, id, time.Second, func(m *nats.Msg) {
			if m.Reply == "" {
				return // a CANCEL (a quorum met without this branch): no question
			}
			mu.Lock()
			asked[id]++
			mu.Unlock()
			if !ok {
				_ = nc.PublishMsg(streams.ErrorReply(m.Reply, streams.ContentTypeJSON, "", streams.NewError(streams.CodeInternal, "broken")))
				return
			}
			finish(nc, m, []byte(`{"me":"`+id+`"}`))
		}, "peer.status")
	}
	WaitRoutable(t, "peer.status", 3, d)

	res, r := fanoutReq(t, nc, streams.Subjects{}.Broadcast("peer.status"), []byte(`{}`))
	if res.Header.Get(streams.HeaderError) != string(streams.CodeIncomplete) || r.Expected != 3 || r.Answered != 3 || r.Succeeded != 2 {
		t.Fatalf("broadcast (mode all): headers %v, aggregate %+v", res.Header, r)
	}
	for i, br := range r.Replies {
		if want := fmt.Sprintf("peer-%d", i+1); br.Name != want || br.Node != want {
			t.Errorf("reply %d: %+v, want it named by its instance %s", i, br, want)
		}
	}
	res, r = fanoutReq(t, nc, streams.Subjects{}.Broadcast("peer.status"), []byte(`{}`), streams.HeaderQuorum, "2")
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || !r.Complete {
		t.Errorf("broadcast with quorum 2: headers %v, aggregate %+v", res.Header, r)
	}
	// A quorum answers once met: the last instance's delivery, sent, may
	// not have reached its handler yet.
	natstest.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for id, n := range asked {
			if n < 2 {
				return fmt.Errorf("%s was asked %d times so far", id, n)
			}
		}
		return nil
	})
	mu.Lock()
	for id, n := range asked {
		if n != 2 { // once per broadcast: no retry elsewhere, none at the same instance
			t.Errorf("%s was asked %d times in two broadcasts", id, n)
		}
	}
	mu.Unlock()

	res, _ = fanoutReq(t, nc, streams.Subjects{}.Broadcast("nobody.here"), []byte(`{}`))
	if res.Header.Get(streams.HeaderError) != string(streams.CodeNoAgent) {
		t.Errorf("broadcast to nobody: headers %v", res.Header)
	}
}

func TestABranchTooLargeForTheAggregateIsLeftOut(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	nc := st.Conn()
	big := `"` + strings.Repeat("x", int(nc.MaxPayload())*2/3) + `"`
	for _, id := range []string{"big-1", "big-2"} {
		RawInstance(t, nc, id, time.Second, func(m *nats.Msg) { finish(nc, m, []byte(big)) }, "blob")
	}
	RawInstance(t, nc, "small-1", time.Second, func(m *nats.Msg) { finish(nc, m, []byte(`1`)) }, "one")
	WaitRoutable(t, "blob", 2, d)
	WaitRoutable(t, "one", 1, d)
	body := []byte(`{"branches": [{"name": "a", "capability": "blob"}, {"name": "b", "capability": "blob"}, {"name": "c", "capability": "one"}], "mode": "all"}`)
	res, r := fanoutReq(t, nc, streams.Subjects{}.FanOut(), body)
	var tooLarge int
	for _, br := range r.Replies {
		if br.Error != nil && br.Error.Code == streams.CodePayloadTooLarge {
			tooLarge++
		}
	}
	if tooLarge != 1 || r.Succeeded != 2 || res.Header.Get(streams.HeaderError) != string(streams.CodeIncomplete) {
		t.Errorf("headers %v; aggregate: %d succeeded, %d left out as PAYLOAD_TOO_LARGE; want 2 and 1", res.Header, r.Succeeded, tooLarge)
	}
}

func TestBadFanOutsAreRefusedWithTheFieldNamed(t *testing.T) {
	st, _, s := fanoutStack(t)
	nc := st.Conn()
	many := make([]map[string]string, fanout.MaxBranches+1)
	for i := range many {
		many[i] = map[string]string{"name": fmt.Sprint("b", i), "capability": "risk.credit"}
	}
	tooMany, _ := json.Marshal(map[string]any{"branches": many})
	for _, c := range []struct {
		name, body, want string
	}{
		{"not JSON", `{"branches": [`, "valid JSON"},
		{"no branches", `{"branches": []}`, "branches: at least one"},
		{"too many", string(tooMany), "more than the 256"},
		{"duplicate names", `{"branches": [{"name": "a", "capability": "risk.credit"}, {"name": "a", "capability": "risk.fraud"}]}`, "branches[1].name"},
		{"invalid capability", `{"branches": [{"name": "a", "capability": "Risk"}]}`, "branches[0].capability"},
		{"unknown mode", `{"branches": [{"name": "a", "capability": "risk.credit"}], "mode": "most"}`, `mode "most"`},
		{"quorum over the branches", `{"branches": [{"name": "a", "capability": "risk.credit"}], "quorum": 2}`, "quorum 2"},
		{"unknown field", `{"branches": [{"name": "a", "capability": "risk.credit", "colour": 1}]}`, "colour"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := nc.Request(streams.Subjects{}.FanOut(), []byte(c.body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			e := streams.ErrorFromMessage(res)
			if e == nil || e.Code != streams.CodeBadRequest || !strings.Contains(e.Message, c.want) {
				t.Errorf("reply %v, want BAD_REQUEST mentioning %q", e, c.want)
			}
		})
	}
	if n := len(s.of("risk.credit")) + len(s.of("risk.fraud")); n != 0 {
		t.Errorf("%d branches of bad fan-outs were delivered", n)
	}
}

func TestTheClientFansOutAndBroadcastsFromInsideAHandler(t *testing.T) {
	st, d, s := fanoutStack(t)
	client := st.Client()
	type score struct {
		Score float64 `json:"score"`
	}
	// An agentkit agent whose handler fans out with its own ctx.
	st.Agent(agentkit.Config{Type: "underwriter"}, map[string]agentkit.Handler{"underwrite": func(ctx context.Context, _ *agentkit.Request) (any, error) {
		g, err := client.FanOut(ctx, []agentkit.Branch{
			{Name: "credit", Capability: "risk.credit", Payload: map[string]int{"id": 7}},
			{Name: "fraud", Capability: "risk.fraud", Payload: map[string]int{"id": 7}},
			{Name: "kyc", Capability: "risk.kyc", Timeout: 200 * time.Millisecond},
		}, agentkit.Mode("quorum"), agentkit.Quorum(2))
		if err != nil {
			return nil, err
		}
		var sum float64
		for _, r := range g.Replies {
			var sc score
			if err := r.Decode(&sc); err != nil {
				return nil, err
			}
			sum += sc.Score
		}
		return map[string]any{"sum": sum, "answered": g.Answered, "missing": len(g.Missing)}, nil
	}})
	WaitRoutable(t, "underwrite", 1, d)
	start := time.Now()
	res, err := client.Call(context.Background(), "underwrite", map[string]any{}, agentkit.WithHeader(streams.HeaderOrchestrationID, "claim-42"))
	t.Logf("the call that fanned out took %v", time.Since(start))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Sum      float64 `json:"sum"`
		Answered int     `json:"answered"`
		Missing  int     `json:"missing"`
	}
	if err := res.Decode(&out); err != nil || out.Sum != 0.91+0.12 || out.Answered != 2 || out.Missing != 1 {
		t.Fatalf("underwrite: %+v (%v)", out, err)
	}
	// The branches belong to the outer call's chain.
	if dl := s.of("risk.credit")[0]; dl.Header.Get(streams.HeaderOrchestrationID) != "claim-42" || dl.Header.Get(streams.HeaderHops) != "2" {
		t.Errorf("a branch started inside a handler: headers %v, want orchestration claim-42 and hop 2", dl.Header)
	}

	g, err := client.Broadcast(context.Background(), "risk.credit", map[string]int{"id": 1})
	if err != nil || !g.Complete || len(g.Replies) != 1 || g.Replies[0].Node != "credit-1" {
		t.Fatalf("broadcast: %+v, %v", g, err)
	}
	g, err = client.Broadcast(context.Background(), "risk.reject", map[string]int{"id": 1})
	if !errors.Is(err, streams.ErrIncomplete) || g == nil || g.Replies[0].Err == nil {
		t.Errorf("a broadcast nobody succeeds at: %+v, %v; want INCOMPLETE with the replies", g, err)
	}
}

// A branch whose agent is killed mid-call goes to another instance once
// the dead one leaves the registry, or — with no other in time — is
// reported missing; either way the fan-out answers by its max wait, once.
func TestAFanOutBranchSurvivesItsAgentsDeath(t *testing.T) {
	const hb = 300 * time.Millisecond // the dead record is gone 900 ms after its last heartbeat
	st := NewStack(t, hb)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	w := tap(t, st)
	onSleeper := func(m *nats.Msg) bool { return m.Subject == streams.Subjects{}.Agent("sleeper-1") && m.Reply != "" }

	for _, c := range []struct {
		name          string
		maxWaitMS     int
		replacement   bool
		wantNode      string
		wantMissing   string
		answersWithin time.Duration
	}{
		{"reported missing at max wait", 600, false, "", string(streams.CodeTimeout), 600 * time.Millisecond},
		{"to another instance", 10000, true, "score-2", "", 10 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			sleeper := StartChild(t, ChildSleeper, st.Server.ClientURL(), "sleeper-1", hb, nil)
			WaitRoutable(t, "risk.score", 1, d)
			before := len(w.matching(onSleeper))
			type reply struct {
				agg  streams.Aggregate
				took time.Duration
			}
			done := make(chan reply, 1)
			start := time.Now()
			go func() {
				body := fmt.Sprintf(`{"branches": [{"name": "score", "capability": "risk.score"}], "mode": "all", "max_wait_ms": %d}`, c.maxWaitMS)
				_, agg := fanoutReq(t, st.Conn(), streams.Subjects{}.FanOut(), []byte(body))
				done <- reply{agg, time.Since(start)}
			}()
			w.await(t, before+1, "deliveries to sleeper-1", onSleeper)
			if c.replacement {
				st.Agent(agentkit.Config{Type: "scorer", ID: "score-2"}, map[string]agentkit.Handler{"risk.score": echoHandler()})
			}
			if err := sleeper.Process.Kill(); err != nil { // SIGKILL mid-call
				t.Fatal(err)
			}
			r := <-done
			t.Logf("answered %v after the fan-out started: %+v", r.took.Round(time.Millisecond), r.agg)
			switch {
			case c.wantNode != "":
				if len(r.agg.Replies) != 1 || r.agg.Replies[0].Node != c.wantNode || !r.agg.Complete {
					t.Errorf("want the branch answered once by %s, got %+v", c.wantNode, r.agg)
				}
			default:
				if len(r.agg.Replies) != 0 || len(r.agg.Missing) != 1 || r.agg.Missing[0].Reason != c.wantMissing {
					t.Errorf("want the branch missing with %s, got %+v", c.wantMissing, r.agg)
				}
				// "by max_wait, never later": the gather ends at max_wait;
				// what follows is the reply's trip (bounded loosely here).
				if r.took > c.answersWithin+2*time.Second {
					t.Errorf("the fan-out answered %v after it started, max wait %v", r.took, c.answersWithin)
				}
			}
			WaitRoutable(t, "risk.score", map[bool]int{true: 1, false: 0}[c.replacement], d) // the dead record is gone
		})
	}
}
