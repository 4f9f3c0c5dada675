package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/streams"
)

const resultsACL = `{"rules": [{"caller": "alice", "may_call": ["echo"]}, {"caller": "bob", "may_call": ["echo"]}]}`

// resultsStack is a secure stack with an echo agent (it answers its
// payload), callers alice and bob, and the HTTP gateway of its dispatcher
// identifying bearer tokens as the node does (auth.Authorizer.Vouch).
type resultsStack struct {
	*SecureStack
	echoes atomic.Int32
	http   *httptest.Server
}

func newResultsStack(t *testing.T) *resultsStack {
	st := &resultsStack{SecureStack: NewSecureStack(t, time.Second, resultsACL)}
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{
		"echo": counted(&st.echoes, func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil })})
	WaitRoutable(t, "echo", 1, d)
	st.Identity(auth.Identity{Name: "alice", Role: auth.RoleCaller})
	st.Identity(auth.Identity{Name: "bob", Role: auth.RoleCaller})
	st.mu.Lock()
	az := st.authorizers[d]
	st.mu.Unlock()
	g, err := gateway.New(st.ConnAs(SecureAdmin), d, gateway.Config{}, gateway.WithIdentifier(gateway.IdentifierFunc(
		func(r *http.Request, task *nats.Msg) *streams.Error {
			return az.Vouch(r.Header.Get("Authorization"), task)
		})))
	if err != nil {
		t.Fatal(err)
	}
	st.http = httptest.NewServer(g.Handler())
	t.Cleanup(st.http.Close)
	return st
}

// getResult is GET /v1/results/{id} with name's bearer token: the status
// and the body.
func (st *resultsStack) getResult(name, id string) (int, string) {
	st.T.Helper()
	signer, err := auth.LoadSigner(st.Store.CredsFile(name))
	if err != nil {
		st.T.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, st.http.URL+"/v1/results/"+id, nil)
	if err != nil {
		st.T.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+signer.Bearer())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		st.T.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		st.T.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// postSubmit is POST /v1/submit/echo with name's bearer token, body and
// request id: the status.
func (st *resultsStack) postSubmit(name, id, body string) int {
	st.T.Helper()
	signer, err := auth.LoadSigner(st.Store.CredsFile(name))
	if err != nil {
		st.T.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, st.http.URL+"/v1/submit/echo", strings.NewReader(body))
	if err != nil {
		st.T.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+signer.Bearer())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(streams.HeaderRequestID, id)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		st.T.Fatal(err)
	}
	_ = res.Body.Close()
	return res.StatusCode
}

// tasksStored is the last sequence of REACH_TASKS: how many submissions
// the stream has stored (a deduplicated one adds none).
func (st *resultsStack) tasksStored(ctx context.Context) uint64 {
	st.T.Helper()
	js, err := jetstream.New(st.admin)
	if err != nil {
		st.T.Fatal(err)
	}
	s, err := js.Stream(ctx, streams.StreamTasks)
	if err != nil {
		st.T.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		st.T.Fatal(err)
	}
	return info.State.LastSeq
}

// request publishes a request to subject with body on w's connection and
// returns the subscription its answer would arrive on.
func request(sub **nats.Subscription, subject string, body []byte) func(nc *nats.Conn) error {
	return func(nc *nats.Conn) (err error) {
		inbox := nats.NewInbox()
		if *sub, err = nc.SubscribeSync(inbox); err != nil {
			return err
		}
		return nc.PublishRequest(subject, inbox, body)
	}
}

// Bob cannot read alice's durable result by any way in — subscribing to
// it, a direct get of its subject, a direct get or stream message get
// naming it in the body, the stream's subject list, the HTTP gateway with
// his token, agentkit — while alice reads it by each way a caller has, and
// the dispatcher's identity by STREAM.MSG.GET (so the result is there to
// be read).
func TestAttackResultsAnotherCallersResultIsNotReadable(t *testing.T) {
	st := newResultsStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := st.ClientAs("alice", agentkit.WithJSON())
	id := streams.NewRequestID()
	res, err := alice.SubmitAndWait(ctx, "echo", map[string]string{"secret": "alice's"}, agentkit.WithRequestID(id))
	if err != nil {
		t.Fatalf("alice's durable task: %v", err)
	}
	const secret = `{"secret":"alice's"}`
	if string(res.Data) != secret {
		t.Fatalf("alice's result = %s, want %s", res.Data, secret)
	}
	subject := streams.Subjects{}.Result("alice", id)

	// Controls: alice reads her result by every way she has.
	if got, err := alice.Result(ctx, id); err != nil || string(got.Data) != secret {
		t.Fatalf("alice's Result = %v, %v", got, err)
	}
	if got, err := alice.Wait(ctx, id); err != nil || string(got.Data) != secret {
		t.Fatalf("alice's Wait = %v, %v", got, err)
	}
	aliceNC := st.ConnAs("alice")
	if m, err := aliceNC.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+streams.StreamResults+"."+subject, nil); err != nil ||
		string(m.Data) != secret {
		t.Fatalf("alice's direct get of %s = %v, %v", subject, m, err)
	}
	if code, body := st.getResult("alice", id); code != http.StatusOK || body != secret {
		t.Fatalf("alice's GET /v1/results/%s = %d %s", id, code, body)
	}
	{
		js, err := jetstream.New(st.admin)
		if err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, streams.StreamResults)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err := s.GetLastMsgForSubject(ctx, subject); err != nil || string(raw.Data) != secret {
			t.Fatalf("the dispatcher's read of %s = %v, %v", subject, raw, err)
		}
	}

	// Attacks by bob.
	var l securityLedger
	bob := watch(t, func(o ...nats.Option) *nats.Conn { return st.ConnAs("bob", o...) })
	bobClient, err := agentkit.NewClient(bob.nc, agentkit.WithCredentials(st.Store.CredsFile("bob")))
	if err != nil {
		t.Fatal(err)
	}
	var sub *nats.Subscription
	for _, s := range []string{subject, "reach.result.alice.>", "reach.result.*." + id, "reach.result.>"} {
		ok, ev := bob.violated(s, func(nc *nats.Conn) (err error) { sub, err = nc.SubscribeSync(s); return err })
		// alice's next result is published while bob's subscription stands.
		if _, err := alice.SubmitAndWait(ctx, "echo", map[string]string{"secret": "again"}); err != nil {
			t.Fatal(err)
		}
		l.add(attempt{name: "bob subscribes to " + s, refused: ok, leaked: !quiet(t, bob.nc, sub), evidence: ev})
		_ = sub.Unsubscribe()
	}
	lastBySubject, _ := json.Marshal(map[string]string{"last_by_subj": subject})
	for _, r := range []struct {
		name, subject string
		body          []byte
	}{
		{"a direct get of alice's result subject", "$JS.API.DIRECT.GET." + streams.StreamResults + "." + subject, nil},
		{"a direct get naming alice's subject in the body", "$JS.API.DIRECT.GET." + streams.StreamResults, lastBySubject},
		{"a direct get by sequence", "$JS.API.DIRECT.GET." + streams.StreamResults, []byte(`{"seq":1}`)},
		{"a stream message get naming alice's subject", "$JS.API.STREAM.MSG.GET." + streams.StreamResults, lastBySubject},
		{"a stream message get by sequence", "$JS.API.STREAM.MSG.GET." + streams.StreamResults, []byte(`{"seq":1}`)},
		{"the stream's subject list", "$JS.API.STREAM.INFO." + streams.StreamResults, []byte(`{"subjects_filter":">"}`)},
		{"a consumer on the stream", "$JS.API.CONSUMER.CREATE." + streams.StreamResults,
			[]byte(`{"stream_name":"` + streams.StreamResults + `","config":{"filter_subject":"` + subject + `"}}`)},
	} {
		ok, ev := bob.violated(r.subject, request(&sub, r.subject, r.body))
		l.add(attempt{name: "bob reads alice's result by " + r.name, refused: ok, leaked: !quiet(t, bob.nc, sub), evidence: ev})
		_ = sub.Unsubscribe()
	}
	{
		// The direct get of his own results' subjects takes no body that
		// asks for another message: the server refuses it.
		own := "$JS.API.DIRECT.GET." + streams.StreamResults + "." + streams.Subjects{}.Result("bob", id)
		for _, body := range []string{`{"seq":1}`, `{"next_by_subj":"reach.result.alice.>"}`, `{"last_by_subj":"` + subject + `"}`,
			`{"multi_last":["reach.result.>"]}`} {
			m, err := bob.nc.RequestWithContext(ctx, own, []byte(body))
			refused := err == nil && m.Header.Get("Status") != "" && len(m.Data) == 0
			l.add(attempt{name: "bob's direct get of his own subject with body " + body, refused: refused,
				leaked: err == nil && len(m.Data) > 0, evidence: fmt.Sprintf("%v %v", err, m.Header)})
		}
	}
	{
		got, err := bobClient.Result(ctx, id)
		l.add(attempt{name: "bob's agentkit Result of alice's request id", refused: errors.Is(err, agentkit.ErrNoResult),
			leaked: got != nil, evidence: fmt.Sprint(err)})
	}
	{
		code, body := st.getResult("bob", id)
		l.add(attempt{name: "bob's GET /v1/results/<alice's id> with his token", refused: code == http.StatusNotFound,
			leaked: code == http.StatusOK, evidence: fmt.Sprintf("%d %s", code, body)})
	}
	l.check(t)
}

// Bob submitting alice's request id gets a task and a result of his own
// and changes nothing of alice's; alice submitting hers again is
// deduplicated as before.
func TestAttackResultsASubmittedRequestIDCannotBeSquatted(t *testing.T) {
	st := newResultsStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := st.ClientAs("alice", agentkit.WithJSON())
	bob := st.ClientAs("bob", agentkit.WithJSON())
	id := streams.NewRequestID()
	if _, err := alice.SubmitAndWait(ctx, "echo", map[string]string{"from": "alice"}, agentkit.WithRequestID(id)); err != nil {
		t.Fatal(err)
	}
	stored, echoes := st.tasksStored(ctx), st.echoes.Load()

	// Control: alice's resubmission is deduplicated.
	if got, err := alice.Submit(ctx, "echo", map[string]string{"from": "alice"}, agentkit.WithRequestID(id)); err != nil || got != id {
		t.Fatalf("alice's resubmission = %q, %v", got, err)
	}
	if now := st.tasksStored(ctx); now != stored {
		t.Fatalf("alice's resubmission of %s was stored again (REACH_TASKS last seq %d, was %d)", id, now, stored)
	}

	// The gateway submits as her identity with the same Nats-Msg-Id as her
	// client: deduplicated too.
	if code := st.postSubmit("alice", id, `{"from":"alice"}`); code != http.StatusAccepted {
		t.Fatalf("alice's POST /v1/submit/echo = %d", code)
	}
	if now := st.tasksStored(ctx); now != stored {
		t.Fatalf("alice's resubmission of %s through the gateway was stored again (REACH_TASKS last seq %d, was %d)", id, now, stored)
	}

	// Bob under alice's request id: a task of his own, his own result.
	res, err := bob.SubmitAndWait(ctx, "echo", map[string]string{"from": "bob"}, agentkit.WithRequestID(id))
	if err != nil {
		t.Fatalf("bob's task under alice's request id: %v", err)
	}
	if string(res.Data) != `{"from":"bob"}` || res.RequestID != id {
		t.Fatalf("bob's result = %s (request id %s), want his own payload under %s", res.Data, res.RequestID, id)
	}
	if now := st.tasksStored(ctx); now != stored+1 {
		t.Fatalf("bob's submission: REACH_TASKS last seq %d, want %d", now, stored+1)
	}
	if n := st.echoes.Load(); n != echoes+1 {
		t.Fatalf("the agent ran %d more times, want once (bob's task)", n-echoes)
	}
	// Alice's result is unchanged, by every way she reads it.
	if got, err := alice.Result(ctx, id); err != nil || string(got.Data) != `{"from":"alice"}` {
		t.Fatalf("alice's result after bob's task = %v, %v", got, err)
	}
	if code, body := st.getResult("alice", id); code != http.StatusOK || body != `{"from":"alice"}` {
		t.Fatalf("alice's GET /v1/results/%s after bob's task = %d %s", id, code, body)
	}
	if code, body := st.getResult("bob", id); code != http.StatusOK || body != `{"from":"bob"}` {
		t.Fatalf("bob's GET /v1/results/%s = %d %s", id, code, body)
	}
}

// Bob cannot pre-empt alice's submission by publishing a task of his own
// under the Nats-Msg-Id hers would have without credentials
// ("alice.<id>") or with a proof he made up: with credentials a
// submission's Nats-Msg-Id carries a proof of its identity
// (signature.Signer.SubmissionID), so alice's task, submitted next within the
// deduplication window, is stored and runs, and each gets their own result.
func TestAttackResultsASubmissionCannotBePreempted(t *testing.T) {
	st := newResultsStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := st.ClientAs("alice", agentkit.WithJSON())
	bobSigner, err := auth.LoadSigner(st.Store.CredsFile("bob"))
	if err != nil {
		t.Fatal(err)
	}
	aliceSigner, err := auth.LoadSigner(st.Store.CredsFile("alice"))
	if err != nil {
		t.Fatal(err)
	}
	bobJS, err := jetstream.New(st.ConnAs("bob"))
	if err != nil {
		t.Fatal(err)
	}
	bob := st.ClientAs("bob", agentkit.WithJSON())
	for i, squat := range []func(id string) string{
		func(id string) string { return streams.SubmissionID("alice", id) },
		func(id string) string { return streams.SubmissionID("alice", id) + ".AAAAAAAAAAAAAAAAAAAAAA" },
		func(id string) string { return bobSigner.SubmissionID(id) },
	} {
		id := streams.NewRequestID()
		if aliceSigner.SubmissionID(id) == squat(id) {
			t.Fatalf("squat %d made alice's submission id", i)
		}
		m := nats.NewMsg(streams.Subjects{}.Submit("echo"))
		m.Header.Set(streams.HeaderRequestID, id)
		m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
		m.Data = []byte(`{"from":"bob"}`)
		bobSigner.Sign(m, time.Now())
		m.Header.Set(streams.HeaderMsgID, squat(id))
		stored := st.tasksStored(ctx)
		if ack, err := bobJS.PublishMsg(ctx, m); err != nil || ack.Duplicate {
			t.Fatalf("bob's squatting submission %d: %v, %v", i, ack, err)
		}
		res, err := alice.SubmitAndWait(ctx, "echo", map[string]string{"from": "alice"}, agentkit.WithRequestID(id))
		if err != nil || string(res.Data) != `{"from":"alice"}` {
			t.Fatalf("alice's task after bob's squat %d: %v, %v", i, res, err)
		}
		if now := st.tasksStored(ctx); now != stored+2 {
			t.Fatalf("squat %d: REACH_TASKS stored %d submissions, want bob's and alice's", i, now-stored)
		}
		got, err := bob.Wait(ctx, id)
		if err != nil || string(got.Data) != `{"from":"bob"}` {
			t.Fatalf("bob's own task %d: %v, %v", i, got, err)
		}
	}
}

// A durable workflow task of bob under the request id of alice's finished
// run does not resume that run, nor receive its output: it is
// dead-lettered BAD_REQUEST, and alice's run and result stay as they were
// (auth off: the callers are their Reach-Source as sent).
func TestAttackResultsAWorkflowRunIsNotResumedByAnotherCaller(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{DurableAckWait: time.Second})
	stepAgent(t, st.Conn(), "seq-1", newEffects(), seqSteps())
	WaitRoutable(t, "seq.ship", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, seqWorkflow, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice, bob := st.ClientAs("alice", agentkit.WithJSON()), st.ClientAs("bob", agentkit.WithJSON())
	id := streams.NewRequestID()
	res, err := alice.SubmitAndWait(ctx, "wf.seq", map[string]int{"order": 5}, agentkit.WithRequestID(id))
	if err != nil {
		t.Fatal(err)
	}
	before := runRecord(t, nc, id)
	if before.Source != "alice" {
		t.Fatalf("alice's run record names %q", before.Source)
	}
	_, err = bob.SubmitAndWait(ctx, "wf.seq", map[string]int{"order": 6}, agentkit.WithRequestID(id))
	var we *streams.Error
	if !errors.Is(err, agentkit.ErrParked) || !errors.As(err, &we) || we.Code != streams.CodeBadRequest {
		t.Fatalf("bob's task under alice's run id: %v, want parked BAD_REQUEST", err)
	}
	if got, err := bob.Result(ctx, id); !errors.Is(err, agentkit.ErrNoResult) {
		t.Fatalf("bob reads a result under alice's run id: %v, %v", got, err)
	}
	if got, err := alice.Result(ctx, id); err != nil || string(got.Data) != string(res.Data) {
		t.Fatalf("alice's result after bob's task: %v, %v (was %s)", got, err, res.Data)
	}
	if after := runRecord(t, nc, id); after.Updated != before.Updated || after.Status != before.Status || after.Source != "alice" {
		t.Fatalf("alice's run record changed: %+v, was %+v", after, before)
	}
}
