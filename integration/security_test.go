package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// securityACL grants what the security tests' identities may call.
const securityACL = `{"rules": [
  {"caller": "billing-*", "may_call": ["payment.*"]},
  {"caller": "caller", "may_call": ["echo", "math.add", "relay"]},
  {"caller": "relay-*", "may_call": ["echo"]}]}`

// attempt is one row of the security ledger: what was tried, whether it was
// refused and how that showed, and whether anything leaked.
type attempt struct {
	name     string
	refused  bool
	leaked   bool
	evidence string
}

// securityLedger counts attempts that must all be refused and leak nothing.
type securityLedger struct {
	mu   sync.Mutex
	rows []attempt
}

func (l *securityLedger) add(a attempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows = append(l.rows, a)
}

// check prints the ledger and fails the test unless every attempt was
// refused and none leaked.
func (l *securityLedger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tREFUSED\tLEAKED\tEVIDENCE")
	refused, leaked := 0, 0
	for _, r := range l.rows {
		if r.refused {
			refused++
		}
		if r.leaked {
			leaked++
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%s\n", r.name, r.refused, r.leaked, r.evidence)
	}
	_ = tw.Flush()
	t.Logf("security ledger: attempted %d, refused %d (%.0f%%), leaked %d\n%s", len(l.rows), refused,
		100*float64(refused)/float64(max(len(l.rows), 1)), leaked, b.String())
	if refused != len(l.rows) || leaked > 0 {
		t.Fatalf("security ledger: %d of %d attempts refused, %d leaked", refused, len(l.rows), leaked)
	}
}

// watched is a connection whose asynchronous errors (the server's
// permission violations) are recorded, in order.
type watched struct {
	t    *testing.T
	nc   *nats.Conn
	errs chan error
	n    int
}

func watch(t *testing.T, connect func(...nats.Option) *nats.Conn) *watched {
	w := &watched{t: t, errs: make(chan error, 1024)}
	w.nc = connect(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case w.errs <- err:
		default:
		}
	}))
	return w
}

// violated runs do and reports whether the server refused it with a
// permissions violation naming subject.
func (w *watched) violated(subject string, do func(nc *nats.Conn) error) (bool, string) {
	w.t.Helper()
	return w.refused(subject, func(err error) bool { return strings.Contains(err.Error(), `"`+subject+`"`) }, do)
}

// refused runs do and reports whether the server sent an asynchronous
// error that match accepts (what names the attempt). After do it publishes
// to a subject no identity may use and waits for that refusal: errors
// arrive in order, so by then any refusal do caused has arrived.
func (w *watched) refused(what string, match func(error) bool, do func(nc *nats.Conn) error) (bool, string) {
	w.t.Helper()
	if err := do(w.nc); err != nil {
		return false, fmt.Sprintf("%s: %v", what, err)
	}
	w.n++
	sentinel := fmt.Sprintf("nobody.may.%d", w.n)
	if err := w.nc.Publish(sentinel, nil); err != nil {
		w.t.Fatal(err)
	}
	got := ""
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-w.errs:
			switch {
			case strings.Contains(err.Error(), `"`+sentinel+`"`):
				return got != "", got
			case match(err):
				got = err.Error()
			}
		case <-timeout:
			w.t.Fatalf("no permissions violation for %s: the sentinel subject is allowed?", sentinel)
		}
	}
}

// counted counts the executions of a capability's handler.
func counted(n *atomic.Int32, h agentkit.Handler) agentkit.Handler {
	return func(ctx context.Context, r *agentkit.Request) (any, error) {
		n.Add(1)
		return h(ctx, r)
	}
}

// quiet reports whether sub got nothing: after a round trip to the server
// on its connection, which follows every message the server sent it before.
func quiet(t *testing.T, nc *nats.Conn, sub *nats.Subscription) bool {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n, _, err := sub.Pending()
	return err != nil || n == 0
}

// TestSecurityLedger tries what an identity must not do against a stack
// with auth and mutual TLS on; every attempt must be refused and leak
// nothing. It also measures how long a revocation takes to cut its
// identity off (logged, not asserted).
func TestSecurityLedger(t *testing.T) {
	st := NewSecureStack(t, time.Second, securityACL)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	var echoes, payments atomic.Int32
	var deliveredSignature atomic.Value // a Reach-Signature an agent saw, if any
	echo := counted(&echoes, func(ctx context.Context, r *agentkit.Request) (any, error) {
		if s := r.Header.Get(auth.HeaderSignature); s != "" {
			deliveredSignature.Store(s)
		}
		return r.Data, nil
	})
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": echo})
	st.Agent(agentkit.Config{ID: "echo-2", Type: "echo"}, map[string]agentkit.Handler{"echo": echo})
	st.Agent(agentkit.Config{ID: "pay-1", Type: "payment"}, map[string]agentkit.Handler{
		"payment.execute": counted(&payments, func(context.Context, *agentkit.Request) (any, error) { return map[string]bool{"paid": true}, nil })})
	WaitRoutable(t, "echo", 2, d)
	WaitRoutable(t, "payment.execute", 1, d)
	st.Identity(auth.Identity{Name: "billing-1", Role: auth.RoleCaller})
	st.Identity(auth.Identity{Name: "billing-2", Role: auth.RoleCaller})

	ctx := context.Background()
	caller := st.Client()
	billing := st.ClientAs("billing-1")
	// The legitimate calls work: every refusal below is the ACL's, not a
	// broken stack's.
	if _, err := caller.Call(ctx, "echo", map[string]string{"text": "hi"}); err != nil {
		t.Fatalf("a granted call failed: %v", err)
	}
	if _, err := billing.Call(ctx, "payment.execute", map[string]int{"amount": 1}); err != nil {
		t.Fatalf("a granted call failed: %v", err)
	}
	var l securityLedger
	refusedCall := func(err error) (bool, string) {
		var we *streams.Error
		if errors.As(err, &we) && we.Code == streams.CodeUnauthorized {
			return true, string(we.Code) + ": " + we.Message
		}
		return false, fmt.Sprint(err)
	}

	// Connections.
	connectErr := func(opts ...nats.Option) error {
		nc, err := nats.Connect(st.Server.ClientURL(), append(opts, nats.Timeout(5*time.Second), nats.NoReconnect())...)
		if err == nil {
			nc.Close()
		}
		return err
	}
	{
		err := connectErr(st.ClientTLS()...)
		l.add(attempt{name: "connect with no credentials", refused: err != nil, leaked: err == nil, evidence: fmt.Sprint(err)})
	}
	other, err := devtls.EnsureTLS(t.TempDir(), []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	callerCreds, _ := auth.ConnectOptions(st.Store.CredsFile(SecureCaller))
	{
		err := connectErr(append(callerCreds, nats.RootCAs(st.TLS.CA), nats.ClientCert(other.ClientCert, other.ClientKey))...)
		l.add(attempt{name: "connect with a certificate from another CA", refused: err != nil, leaked: err == nil, evidence: fmt.Sprint(err)})
	}
	{
		err := connectErr(append(st.ClientTLS(), nats.UserCredentials(forgedCreds(t, st.Store.CredsFile(SecureCaller))))...)
		l.add(attempt{name: "connect with a wrong nkey seed", refused: err != nil, leaked: err == nil, evidence: fmt.Sprint(err)})
	}

	// An agent's writes and subscriptions.
	agent := watch(t, func(o ...nats.Option) *nats.Conn { return st.ConnAs("echo-1", o...) })
	ajs, _ := jetstream.New(agent.nc)
	kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	records, err := ajs.KeyValue(kctx, streams.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := records.Get(kctx, "echo-2"); err != nil {
		t.Fatal(err)
	}
	forged := `{"id":"echo-2","type":"echo","capabilities":["echo"],"max_concurrent":8,"heartbeat_ms":333,"status":"draining"}`
	{
		ok, ev := agent.violated("$KV.REACH_AGENTS.echo-2", func(*nats.Conn) error {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, _ = records.Put(pctx, "echo-2", []byte(forged)) // no acknowledgement comes: the server dropped it
			return nil
		})
		after, _ := records.Get(kctx, "echo-2")
		l.add(attempt{name: "an agent puts another agent's REACH_AGENTS key", refused: ok,
			leaked: after == nil || string(after.Value()) == forged, evidence: ev})
	}
	{
		ok, ev := agent.violated("$KV.REACH_AGENTS.echo-2", func(*nats.Conn) error {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_ = records.Delete(pctx, "echo-2")
			return nil
		})
		_, gerr := records.Get(kctx, "echo-2")
		l.add(attempt{name: "an agent deletes another agent's REACH_AGENTS key", refused: ok, leaked: gerr != nil, evidence: ev})
	}
	{
		ok, ev := agent.violated("$KV.REACH_CAPS.payment", func(nc *nats.Conn) error { return nc.Publish("$KV.REACH_CAPS.payment", []byte(`{}`)) })
		l.add(attempt{name: "an agent writes another type's REACH_CAPS key", refused: ok, evidence: ev})
	}
	var sub *nats.Subscription
	subscribe := func(subject string) func(nc *nats.Conn) error {
		return func(nc *nats.Conn) (err error) { sub, err = nc.SubscribeSync(subject); return err }
	}
	{
		ok, ev := agent.violated("reach.agent.echo-2", subscribe("reach.agent.echo-2"))
		_, cerr := caller.Call(ctx, "echo", map[string]int{}, agentkit.ToAgent("echo-2"))
		l.add(attempt{name: "an agent subscribes to another agent's reach.agent.<id>", refused: ok && cerr == nil,
			leaked: !quiet(t, agent.nc, sub), evidence: ev})
		_ = sub.Unsubscribe()
	}
	{
		ok, ev := agent.violated("reach.task.>", subscribe("reach.task.>"))
		_, cerr := caller.Call(ctx, "echo", map[string]int{})
		l.add(attempt{name: "an agent subscribes to reach.task.>", refused: ok && cerr == nil, leaked: !quiet(t, agent.nc, sub), evidence: ev})
		_ = sub.Unsubscribe()
	}
	{
		ok, ev := agent.violated("_INBOX.caller.forged", func(nc *nats.Conn) error {
			m := streams.StatusReply("_INBOX.caller.forged", streams.StatusFinished, "r1")
			m.Data = []byte(`{"forged":true}`)
			return nc.PublishMsg(m)
		})
		l.add(attempt{name: "an agent answers what it did not receive (another caller's inbox)", refused: ok, evidence: ev})
	}

	// Calls outside the ACL.
	outside := watch(t, func(o ...nats.Option) *nats.Conn { return st.ConnAs("billing-1", o...) })
	outsideClient, err := agentkit.NewClient(outside.nc, agentkit.WithCredentials(st.Store.CredsFile("billing-1")))
	if err != nil {
		t.Fatal(err)
	}
	baseEchoes, basePayments := echoes.Load(), payments.Load()
	{
		ok, ev := outside.violated("reach.task.echo", func(*nats.Conn) error {
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			_, err := outsideClient.Call(cctx, "echo", map[string]int{})
			if err == nil {
				return errors.New("answered")
			}
			return nil
		})
		l.add(attempt{name: "a caller calls a capability outside its ACL (NATS)", refused: ok, leaked: echoes.Load() != baseEchoes, evidence: ev})
	}
	for _, subject := range []string{"reach.broadcast.echo", "reach.submit.echo"} {
		{
			ok, ev := outside.violated(subject, func(nc *nats.Conn) error { return nc.Publish(subject, []byte(`{}`)) })
			l.add(attempt{name: "a caller publishes to " + subject + " outside its ACL", refused: ok, leaked: echoes.Load() != baseEchoes, evidence: ev})
		}
	}
	agentClient, err := agentkit.NewClient(agent.nc, agentkit.WithCredentials(st.Store.CredsFile("echo-1")))
	if err != nil {
		t.Fatal(err)
	}
	{
		ok, ev := agent.violated("reach.task.payment.execute", func(*nats.Conn) error {
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if _, err := agentClient.Call(cctx, "payment.execute", map[string]int{}); err == nil {
				return errors.New("answered")
			}
			return nil
		})
		l.add(attempt{name: "an agent calls a capability outside its ACL (NATS)", refused: ok, leaked: payments.Load() != basePayments, evidence: ev})
	}
	g, err := billing.FanOut(ctx, []agentkit.Branch{{Name: "pay", Capability: "payment.execute", Payload: map[string]int{}},
		{Name: "echo", Capability: "echo", Payload: map[string]int{}}}, agentkit.Mode("all"))
	{
		var branchErr error = errors.New("no answer for the echo branch")
		for _, r := range g.Replies {
			if r.Name == "echo" {
				branchErr = r.Err
			}
		}
		ok, ev := refusedCall(branchErr)
		l.add(attempt{name: "a caller calls a capability outside its ACL (dispatcher: a fan-out branch)",
			refused: ok && errors.Is(err, streams.ErrIncomplete), leaked: echoes.Load() != baseEchoes, evidence: ev})
	}
	basePayments = payments.Load() // the fan-out's granted branch ran

	// Reach-Source naming another identity.
	lie := func(sign bool) (bool, string) {
		m := nats.NewMsg("reach.task.payment.execute")
		m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
		m.Data = []byte(`{"amount":5}`)
		if sign {
			s, err := auth.LoadSigner(st.Store.CredsFile("billing-1"))
			if err != nil {
				t.Fatal(err)
			}
			s.Sign(m, time.Now())
		}
		m.Header.Set(streams.HeaderSource, "billing-2")
		// Its reply subject lies in billing-1's inbox, not billing-2's.
		return droppedUnanswered(t, d, outside.nc, m)
	}
	{
		ok, ev := lie(false)
		l.add(attempt{name: "a Reach-Source naming another identity (unsigned)", refused: ok, leaked: payments.Load() != basePayments, evidence: ev})
	}
	{
		ok, ev := lie(true)
		l.add(attempt{name: "a Reach-Source naming another identity (signed by the sender)", refused: ok, leaked: payments.Load() != basePayments, evidence: ev})
	}
	{
		v := deliveredSignature.Load()
		l.add(attempt{name: "an agent reads a caller's Reach-Signature (to replay it)", refused: v == nil, leaked: v != nil,
			evidence: "deliveries carry no " + auth.HeaderSignature})
	}

	// Another caller's replies.
	{
		ok, ev := outside.violated("_INBOX.caller.>", subscribe("_INBOX.caller.>"))
		_, cerr := caller.Call(ctx, "echo", map[string]int{})
		l.add(attempt{name: "a caller reads another caller's reply inbox", refused: ok && cerr == nil, leaked: !quiet(t, outside.nc, sub), evidence: ev})
		_ = sub.Unsubscribe()
	}

	// Revocation: billing-2 is cut off, nobody else notices.
	cut, closed := make(chan time.Time, 1), make(chan struct{})
	victimNC := st.ConnAs("billing-2", nats.DisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case cut <- time.Now():
		default:
		}
	}), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	victim, err := agentkit.NewClient(victimNC, agentkit.WithCredentials(st.Store.CredsFile("billing-2")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := victim.Call(ctx, "payment.execute", map[string]int{}); err != nil {
		t.Fatalf("billing-2 before its revocation: %v", err)
	}
	signedBefore := nats.NewMsg("reach.task.payment.execute")
	signedBefore.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
	victimSigner, err := auth.LoadSigner(st.Store.CredsFile("billing-2"))
	if err != nil {
		t.Fatal(err)
	}
	victimSigner.Sign(signedBefore, time.Now())
	basePayments = payments.Load()
	revoked := time.Now()
	if _, err := st.Store.Revoke("billing-2"); err != nil {
		t.Fatal(err)
	}
	var refusedAt time.Time
	natstest.WaitFor(t, 10*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := victim.Call(cctx, "payment.execute", map[string]int{}); err == nil {
			return errors.New("the revoked identity's call still succeeds")
		}
		refusedAt = time.Now()
		return nil
	})
	var cutAt time.Time
	select {
	case cutAt = <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not cut the revoked identity's connection")
	}
	select { // told "authentication revoked" on each reconnect, nats.go gives up
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked identity's client still reconnects")
	}
	st.WaitSynced()
	t.Logf("revocation: connection cut %v and next call refused %v after `auth revoke` (the syncer checks the store every %v)",
		cutAt.Sub(revoked).Round(time.Millisecond), refusedAt.Sub(revoked).Round(time.Millisecond), 20*time.Millisecond)
	afterRevoke := payments.Load()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = victim.Call(cctx, "payment.execute", map[string]int{})
	cancel()
	l.add(attempt{name: "a revoked identity's next call", refused: err != nil, leaked: payments.Load() != afterRevoke, evidence: fmt.Sprint(err)})
	{
		// Its reply subject lies in the relaying identity's inbox, not
		// billing-2's.
		ok, ev := droppedUnanswered(t, d, outside.nc, signedBefore)
		l.add(attempt{name: "a revoked identity's signed task relayed by another identity", refused: ok, leaked: payments.Load() != afterRevoke, evidence: ev})
	}
	if _, err := billing.Call(ctx, "payment.execute", map[string]int{}); err != nil {
		t.Errorf("another identity stopped working after the revocation: %v", err)
	}
	if err := connectErr(append(st.ClientTLS(), nats.UserCredentials(filepath.Join(t.TempDir(), "missing")))...); err == nil {
		t.Error("a missing credentials file connected")
	}
	_ = basePayments
	l.check(t)
}

// droppedUnanswered sends m on nc with a reply subject in nc's own inbox
// and reports whether d dropped it unanswered: so it drops a task whose
// reply subject lies outside the inbox of the caller it names.
func droppedUnanswered(t *testing.T, d *dispatcher.Dispatcher, nc *nats.Conn, m *nats.Msg) (bool, string) {
	t.Helper()
	dropped := d.Stats().Dropped
	m.Reply = nc.NewInbox()
	answers, err := nc.SubscribeSync(m.Reply)
	if err == nil {
		err = nc.PublishMsg(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = answers.Unsubscribe() }()
	err = natstest.Poll(10*time.Second, func() error {
		if d.Stats().Dropped == dropped {
			return errors.New("neither answered nor dropped")
		}
		return nil
	})
	if err != nil {
		return false, err.Error()
	}
	return quiet(t, nc, answers), "dropped unanswered: its reply subject lies outside " + m.Header.Get(streams.HeaderSource) + "'s inbox"
}

// forgedCreds writes a credentials file with file's user JWT and a seed of
// another key, and returns its path.
func forgedCreds(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	// jwt.FormatUserConfig refuses a seed of another key: write it by hand.
	out := fmt.Sprintf("-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n"+
		"-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n", token, seed)
	path := filepath.Join(t.TempDir(), "forged.creds")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// harness is what the flows below need of a stack: a Stack and a
// SecureStack both are one.
type harness interface {
	Dispatcher(config.Config) *dispatcher.Dispatcher
	Agent(agentkit.Config, map[string]agentkit.Handler) *agentkit.Agent
	Client(...agentkit.ClientOption) *agentkit.Client
	ClientAs(string, ...agentkit.ClientOption) *agentkit.Client
	Conn() *nats.Conn
}

// TestLegitimateFlowsPassWithSecurityOn runs the same flows — register,
// heartbeat, call, a call from inside a handler, durable submit and
// result, broadcast, fan-out, drain — on a plain stack and on one with auth
// and mutual TLS on.
func TestLegitimateFlowsPassWithSecurityOn(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		st := NewStack(t, time.Second)
		d := st.Dispatcher(config.Config{})
		st.FanOut(d)
		legitimateFlows(t, st, d)
	})
	t.Run("auth+tls", func(t *testing.T) {
		st := NewSecureStack(t, time.Second, securityACL)
		d := st.Dispatcher(config.Config{})
		st.FanOut(d)
		legitimateFlows(t, st, d)
	})
}

func legitimateFlows(t *testing.T, st harness, d *dispatcher.Dispatcher) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e1 := st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	st.Agent(agentkit.Config{ID: "echo-2", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	type addends struct {
		A int `json:"a" msgpack:"a"`
		B int `json:"b" msgpack:"b"`
	}
	var signedDeliveries atomic.Int32 // deliveries that reached the agent with the caller's signature
	st.Agent(agentkit.Config{ID: "math-1", Type: "math"}, map[string]agentkit.Handler{"math.add": agentkit.Typed(
		func(_ context.Context, r *agentkit.Request, in addends) (map[string]int, error) {
			if r.Header.Get(auth.HeaderSignature) != "" {
				signedDeliveries.Add(1)
			}
			return map[string]int{"sum": in.A + in.B}, nil
		})})
	var relayClient atomic.Pointer[agentkit.Client] // the agent's own client, once its identity exists
	st.Agent(agentkit.Config{ID: "relay-1", Type: "relay"}, map[string]agentkit.Handler{"relay": func(ctx context.Context, r *agentkit.Request) (any, error) {
		res, err := relayClient.Load().Call(ctx, "echo", r.Data)
		if err != nil {
			return nil, err
		}
		return res.Data, nil
	}})
	relayClient.Store(st.ClientAs("relay-1"))
	for c, n := range map[string]int{"echo": 2, "math.add": 1, "relay": 1} {
		WaitRoutable(t, c, n, d)
	}
	c := st.Client()

	// Heartbeat: each agent keeps putting its record.
	js, err := jetstream.New(st.Conn())
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, streams.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	WaitHeartbeat(t, kv, "echo-1", 5*time.Second)

	res, err := c.Call(ctx, "echo", echoIn{Text: "hi"})
	var out echoIn
	if err != nil || res.Decode(&out) != nil || out.Text != "hi" {
		t.Fatalf("call: %+v, %v", out, err)
	}
	if res, err = c.Call(ctx, "relay", echoIn{Text: "via"}); err != nil || res.Decode(&out) != nil || out.Text != "via" {
		t.Fatalf("call from inside a handler: %+v, %v", out, err)
	}
	if res, err = c.SubmitAndWait(ctx, "math.add", map[string]int{"a": 2, "b": 3}); err != nil {
		t.Fatalf("durable submit and result: %v", err)
	}
	var sum map[string]int
	if err := res.Decode(&sum); err != nil || sum["sum"] != 5 {
		t.Fatalf("durable result %s: %v", res.Data, err)
	}
	// The caller's signature proves the task to the dispatcher only: an
	// agent that kept it could send the task again as its caller.
	if n := signedDeliveries.Load(); n != 0 {
		t.Errorf("%d durable deliveries carried %s to the agent", n, auth.HeaderSignature)
	}
	if stored, err := c.Result(ctx, res.RequestID); err != nil || string(stored.Data) != string(res.Data) {
		t.Fatalf("stored result: %v", err)
	}
	// A poison task is parked, and the caller, who may watch only the
	// dead letters of what it may call, hears so.
	if _, err := c.SubmitAndWait(ctx, "math.add", map[string]string{"a": "x"}); !errors.Is(err, agentkit.ErrParked) ||
		streams.AsError(err).Code != streams.CodeBadRequest {
		t.Fatalf("durable poison task: %v", err)
	}
	g, err := c.Broadcast(ctx, "echo", echoIn{Text: "all"})
	if err != nil || g.Succeeded != 2 {
		t.Fatalf("broadcast: %+v, %v", g, err)
	}
	g, err = c.FanOut(ctx, []agentkit.Branch{{Name: "echo", Capability: "echo", Payload: echoIn{Text: "f"}},
		{Name: "sum", Capability: "math.add", Payload: map[string]int{"a": 1, "b": 1}}}, agentkit.Mode("all"))
	if err != nil || g.Succeeded != 2 {
		t.Fatalf("fan-out: %+v, %v", g, err)
	}

	// Drain: echo-1 leaves, its key goes, calls go to echo-2.
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := e1.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if _, err := kv.Get(ctx, "echo-1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("echo-1's record after its drain: %v", err)
	}
	WaitRoutable(t, "echo", 1, d)
	if res, err := c.Call(ctx, "echo", echoIn{Text: "after"}); err != nil || res.Node != "echo-2" {
		t.Fatalf("after the drain: %+v, %v", res, err)
	}
}

// TestANewACLIsInForceWithoutARestart: the ACL in REACH_POLICY changes what
// the server lets an identity publish and what the dispatcher lets it call,
// with no restart; an invalid ACL put by hand leaves the last good one.
func TestANewACLIsInForceWithoutARestart(t *testing.T) {
	st := NewSecureStack(t, time.Second, `{"rules": []}`)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 1, d)
	c := st.Client()
	call := func() error { // a refused call is told so at once: the deadline is only a bound
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Call(ctx, "echo", echoIn{Text: "hi"})
		return err
	}
	// The server drops a publish nothing grants; the caller hears why, and
	// at once: not when its deadline, a minute away, has passed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_, err := c.Call(ctx, "echo", echoIn{Text: "hi"})
	early := ctx.Err() == nil
	cancel()
	if streams.AsError(err).Code != streams.CodeUnauthorized || !early ||
		!strings.Contains(err.Error(), `Permissions Violation for Publish to "reach.task.echo"`) {
		t.Fatalf("a call nothing grants: %v (before its deadline: %v)", err, early)
	}
	st.SetACL(`{"rules": [{"caller": "call*", "may_call": ["echo"]}]}`)
	natstest.WaitFor(t, 10*time.Second, call) // the caller's connection moves to the new permissions
	js, _ := jetstream.New(st.Conn())
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, policy.KeyACL, []byte(`{"rules": [{"caller": "*", "may_call": ["pay*"]}]}`)); err != nil {
		t.Fatal(err)
	}
	st.WaitSynced()
	if err := call(); err != nil {
		t.Fatalf("an invalid ACL put by hand replaced the good one: %v", err)
	}
}

// A cancel is a caller's request like a task: where auth is on it must be
// proven, and it stops only its own caller's task. Cancels that name
// another caller's task — unsigned, proven by another identity, or signed
// by one and claiming the other — stop nothing.
func TestACancelStopsOnlyItsOwnCallersTask(t *testing.T) {
	st := NewSecureStack(t, time.Second, `{"rules": [{"caller": "caller", "may_call": ["hold"]}, {"caller": "billing-*", "may_call": ["hold"]}]}`)
	d := st.Dispatcher(config.Config{})
	started, stopped, release := make(chan string, 4), make(chan string, 4), make(chan struct{})
	st.Agent(agentkit.Config{ID: "hold-1", Type: "hold", MaxConcurrent: 4}, map[string]agentkit.Handler{"hold": func(ctx context.Context, r *agentkit.Request) (any, error) {
		started <- r.RequestID
		select {
		case <-ctx.Done():
			stopped <- r.RequestID
			return nil, ctx.Err()
		case <-release:
			return map[string]string{"done": r.RequestID}, nil
		}
	}})
	WaitRoutable(t, "hold", 1, d)
	st.Identity(auth.Identity{Name: "billing-1", Role: auth.RoleCaller})
	owner := st.Client()
	call := func(id string) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errc := make(chan error, 1)
		go func() {
			_, err := owner.Call(ctx, "hold", map[string]string{}, agentkit.WithRequestID(id))
			errc <- err
		}()
		return cancel, errc
	}
	_, errA := call("task-a")
	cancelB, errB := call("task-b")
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the tasks did not start within 10s")
		}
	}

	st.ForgeCancels("task-a", "billing-1")
	// The owner's own cancel of task-b reaches the dispatcher after those
	// (one subscription, in order): once task-b stopped, they were handled.
	cancelB()
	select {
	case id := <-stopped:
		if id != "task-b" {
			t.Fatalf("%s stopped, want task-b", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the owner's cancel did not stop task-b within 10s")
	}
	if err := <-errB; !errors.Is(err, streams.ErrCancelled) {
		t.Errorf("task-b: %v, want CANCELLED", err)
	}
	close(release)
	if err := <-errA; err != nil {
		t.Fatalf("task-a, which only other identities tried to cancel: %v, want its result", err)
	}
}

// spellingsOf returns the keys of h that spell header name in any case.
func spellingsOf(h nats.Header, name string) []string {
	var keys []string
	for k := range h {
		if strings.EqualFold(k, name) {
			keys = append(keys, k)
		}
	}
	return keys
}

// headersAgent starts an echo agent that hands every delivery's headers
// to the channel it returns.
func headersAgent(t *testing.T, st harness, id string) chan nats.Header {
	seen := make(chan nats.Header, 16)
	st.Agent(agentkit.Config{ID: id, Type: "echo"}, map[string]agentkit.Handler{"echo": func(_ context.Context, r *agentkit.Request) (any, error) {
		seen <- maps.Clone(r.Header)
		return r.Data, nil
	}})
	return seen
}

// A NATS header's name is case-sensitive: a task signed by its caller can
// carry beside its proven Reach-Source another spelling of it, or a
// second value, which an agent that folds case or takes the last value
// reads as its caller. With auth on, such a task — or one with a second
// Reach-Signature — is refused, naming the rule, and reaches no agent;
// the same task without the extra header passes, and its delivery carries
// Reach-Source once, as proven, and no signature.
func TestSecurityHeadersInAnotherCaseOrTwiceAreRefused(t *testing.T) {
	st := NewSecureStack(t, time.Second, securityACL)
	d := st.Dispatcher(config.Config{})
	seen := headersAgent(t, st, "echo-1")
	WaitRoutable(t, "echo", 1, d)
	signer, err := auth.LoadSigner(st.Store.CredsFile(SecureCaller))
	if err != nil {
		t.Fatal(err)
	}
	nc := st.ConnAs(SecureCaller)
	send := func(id string, tamper func(nats.Header)) *nats.Msg {
		t.Helper()
		m := nats.NewMsg(streams.Subjects{}.Task("echo"))
		m.Header.Set(streams.HeaderRequestID, id)
		m.Data = []byte(`{"text":"hi"}`)
		signer.Sign(m, time.Now())
		tamper(m.Header)
		reply, err := nc.RequestMsg(m, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return reply
	}
	for _, c := range []struct {
		id     string
		tamper func(nats.Header)
		rule   string
	}{
		{"lower-source", func(h nats.Header) { h["reach-source"] = []string{SecureAdmin} }, `"reach-source" spells Reach-Source in another case`},
		{"upper-source", func(h nats.Header) { h["REACH-SOURCE"] = []string{SecureAdmin} }, `"REACH-SOURCE" spells Reach-Source in another case`},
		{"second-source", func(h nats.Header) { h.Add(streams.HeaderSource, SecureAdmin) }, "Reach-Source appears 2 times"},
		{"lower-signature", func(h nats.Header) { h["reach-signature"] = h.Values(auth.HeaderSignature) }, `"reach-signature" spells Reach-Signature`},
		{"second-signature", func(h nats.Header) { h.Add(auth.HeaderSignature, "v1.1.x") }, "Reach-Signature appears 2 times"},
	} {
		reply := send(c.id, c.tamper)
		e := streams.ErrorFromMessage(reply)
		if e == nil || e.Code != streams.CodeUnauthorized || !strings.Contains(e.Message, c.rule) {
			t.Errorf("%s: answered %v (%s), want UNAUTHORIZED naming %q", c.id, e, reply.Data, c.rule)
		}
	}
	reply := send("control", func(nats.Header) {})
	if e := streams.ErrorFromMessage(reply); e != nil {
		t.Fatalf("the same task without a second spelling: %v, want its result", e)
	}
	// Deliveries arrive in order: the control's is the first and only one.
	select {
	case h := <-seen:
		if id := h.Get(streams.HeaderRequestID); id != "control" {
			t.Fatalf("the agent got %s, a refused task", id)
		}
		if keys := spellingsOf(h, streams.HeaderSource); len(keys) != 1 || keys[0] != streams.HeaderSource || len(h.Values(streams.HeaderSource)) != 1 ||
			h.Get(streams.HeaderSource) != SecureCaller {
			t.Errorf("the delivery's Reach-Source: %q under %q, want [%s] once", h.Values(streams.HeaderSource), keys, SecureCaller)
		}
		if keys := spellingsOf(h, auth.HeaderSignature); len(keys) > 0 {
			t.Errorf("the delivery carries %q", keys)
		}
	default:
		t.Fatal("the control task was answered but its delivery not seen")
	}
}

// Without auth Reach-Source proves nothing, but an agent still sees it
// once, spelt so, with the value the dispatcher read: a second value and
// other spellings are removed from the delivery.
func TestSecurityHeaderReachesAnAgentOnceWithoutAuth(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	seen := headersAgent(t, st, "echo-1")
	WaitRoutable(t, "echo", 1, d)
	m := nats.NewMsg(streams.Subjects{}.Task("echo"))
	m.Header.Set(streams.HeaderRequestID, "spelt")
	m.Header[streams.HeaderSource] = []string{"alice", "mallory"}
	m.Header["reach-source"] = []string{"mallory"}
	m.Header["REACH-SOURCE"] = []string{"mallory"}
	m.Data = []byte(`{"text":"hi"}`)
	reply, err := st.Conn().RequestMsg(m, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := streams.ErrorFromMessage(reply); e != nil {
		t.Fatal(e)
	}
	h := <-seen
	if keys := spellingsOf(h, streams.HeaderSource); len(keys) != 1 || !slices.Equal(h.Values(streams.HeaderSource), []string{"alice"}) {
		t.Errorf("the delivery's Reach-Source: %q under %q, want [alice] under Reach-Source alone", h.Values(streams.HeaderSource), keys)
	}
}

// Feedback steers Reach-Prefer: quality and the REACH_EVENTS aggregate,
// so with auth on a score counts only when signed by the task's caller,
// for the instance that answered it, once. Before the caller scores its
// tasks (good-1 0.9, poor-1 0.1), another identity scores them the other
// way round — unsigned claiming the caller (dropped unanswered: not
// proven), signed as itself (UNAUTHORIZED: not the caller), and straight into
// REACH_EVENTS (a permissions violation: only dispatchers store feedback)
// — and the caller names the wrong instance (BAD_REQUEST) and scores one
// task twice (BAD_REQUEST the second time). Were any of those counted,
// poor-1 would rank first. The caller's own scores still count: calls
// preferring quality go to good-1, and REACH_EVENTS holds exactly the
// caller's ten records, stored by the dispatcher.
func TestFeedbackCountsOnlyFromTheTasksCaller(t *testing.T) {
	st := NewSecureStack(t, time.Second, `{"rules": [{"caller": "caller", "may_call": ["draft"]}]}`)
	d := st.Dispatcher(config.Config{})
	var good atomic.Int64
	for _, id := range []string{"good-1", "poor-1"} {
		st.Agent(agentkit.Config{ID: id, Type: "writer"}, map[string]agentkit.Handler{"draft": func(context.Context, *agentkit.Request) (any, error) {
			if id == "good-1" {
				good.Add(1)
			}
			return map[string]string{"from": id}, nil
		}})
	}
	WaitRoutable(t, "draft", 2, d)
	st.Identity(auth.Identity{Name: "billing-1", Role: auth.RoleCaller})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := st.Client(agentkit.WithJSON())
	nodes := map[string]string{} // request id → the instance that answered: five each
	for n := map[string]int{}; n["good-1"] < 5 || n["poor-1"] < 5; {
		res, err := c.Call(ctx, "draft", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		if n[res.Node] < 5 {
			nodes[res.RequestID] = res.Node
			n[res.Node]++
		}
	}
	other := map[string]string{"good-1": "poor-1", "poor-1": "good-1"}
	flipped := func(node string) float64 { // the attacker's score
		if node == "good-1" {
			return 0
		}
		return 1
	}
	feedback := func(subject, id, node string, score float64, sign func(*nats.Msg)) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set(streams.HeaderEvents, "1")
		m.Header.Set(streams.HeaderRequestID, id)
		m.Data = fmt.Appendf(nil, `{"request_id":%q,"kind":"feedback","node":%q,"score":%v}`+"\n", id, node, score)
		sign(m)
		return m
	}
	billing, err := auth.LoadSigner(st.Store.CredsFile("billing-1"))
	if err != nil {
		t.Fatal(err)
	}
	caller, err := auth.LoadSigner(st.Store.CredsFile(SecureCaller))
	if err != nil {
		t.Fatal(err)
	}
	billingNC, callerNC := st.ConnAs("billing-1"), st.ConnAs(SecureCaller)
	refusedWith := func(what string, nc *nats.Conn, m *nats.Msg, want streams.Code) {
		t.Helper()
		reply, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if e := streams.ErrorFromMessage(reply); e == nil || e.Code != want {
			t.Fatalf("%s: answered %v %q, want %s", what, e, reply.Data, want)
		}
	}
	subject := streams.Subjects{}.Feedback()
	for id, node := range nodes {
		// Unproven, so not answered either (its reply subject is not in
		// the inbox of the caller it names); the answer to the next
		// request on the same connection comes after the dispatcher read it.
		if err := billingNC.PublishMsg(feedback(subject, id, node, flipped(node), func(m *nats.Msg) {
			m.Header.Set(streams.HeaderSource, SecureCaller)
			m.Reply = billingNC.NewRespInbox()
		})); err != nil {
			t.Fatal(err)
		}
		refusedWith("another identity's signed score", billingNC,
			feedback(subject, id, node, flipped(node), func(m *nats.Msg) { billing.Sign(m, time.Now()) }), streams.CodeUnauthorized)
		refusedWith("the caller's score naming the wrong instance", callerNC,
			feedback(subject, id, other[node], flipped(other[node]), func(m *nats.Msg) { caller.Sign(m, time.Now()) }), streams.CodeBadRequest)
	}
	w := watch(t, func(opts ...nats.Option) *nats.Conn { return st.ConnAs("billing-1", opts...) })
	record := streams.Subjects{}.FeedbackRecord()
	for id, node := range nodes {
		if ok, ev := w.violated(record, func(nc *nats.Conn) error {
			return nc.PublishMsg(feedback(record, id, node, flipped(node), func(m *nats.Msg) { billing.Sign(m, time.Now()) }))
		}); !ok {
			t.Fatalf("a caller stored a score in REACH_EVENTS itself: %s", ev)
		}
		break // one is enough: the permission is per subject
	}
	var scoredTwice string
	for id, node := range nodes {
		score := 0.1
		if node == "good-1" {
			score = 0.9
		}
		if err := c.Feedback(ctx, id, score); err != nil {
			t.Fatal(err)
		}
		scoredTwice = id
	}
	if err := c.Feedback(ctx, scoredTwice, 0.5); !errors.Is(err, streams.ErrBadRequest) {
		t.Errorf("a second score of one task: %v, want BAD_REQUEST", err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error { // stored before answered: the scores are folded
		before := good.Load()
		for range 20 {
			m := nats.NewMsg(streams.Subjects{}.Task("draft"))
			m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
			m.Header.Set(streams.HeaderPrefer, selection.PreferQuality)
			caller.Sign(m, time.Now())
			reply, err := callerNC.RequestMsg(m, 5*time.Second)
			if err != nil {
				return err
			}
			if e := streams.ErrorFromMessage(reply); e != nil {
				return e
			}
		}
		if got := good.Load() - before; got < 19 {
			return fmt.Errorf("%d of 20 calls preferring quality went to good-1, the caller's better-scored instance", got)
		}
		return nil
	})
	stored := storedFeedback(t, st.Conn())
	if len(stored) != len(nodes) {
		t.Fatalf("REACH_EVENTS holds %d feedback records, want the caller's %d", len(stored), len(nodes))
	}
	for _, ev := range stored {
		want := 0.1
		if ev.Node == "good-1" {
			want = 0.9
		}
		if nodes[ev.RequestID] != ev.Node || ev.Score == nil || *ev.Score != want || ev.Dispatcher == "" {
			t.Errorf("stored feedback %+v: not the caller's score of its task, or not stored by a dispatcher", ev)
		}
	}
}

// storedFeedback reads every feedback record in REACH_EVENTS, as nc.
func storedFeedback(t *testing.T, nc *nats.Conn) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, streams.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.Subjects{}.FeedbackRecord()}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for n := info.NumPending; n > 0; n-- {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := events.DecodeEvents(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
	}
	return out
}

// forgedACL is what the reply-subject attacks try to make the ACL: every
// capability for the attacker.
const forgedACL = `{"rules": [{"caller": "caller", "may_call": ["*"]}]}`

// replyTargets are where a hostile caller points a task's reply subject:
// the ACL, another caller's inbox, an agent's delivery subject.
var replyTargets = []struct{ name, subject string }{
	{"the ACL", "$KV." + streams.BucketPolicy + "." + policy.KeyACL},
	{"another caller's inbox", "_INBOX.billing-1.mux.1"},
	{"an agent's delivery subject", "reach.agent.pay-1"},
}

// replyWitness watches the targets of replyTargets.
type replyWitness struct {
	t          *testing.T
	policy     jetstream.KeyValue
	aclRev     uint64
	victim     *nats.Conn
	inbox      *nats.Subscription
	agent      *nats.Conn
	deliveries *nats.Subscription
}

func witnessReplies(t *testing.T, st *SecureStack) *replyWitness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st.Identity(auth.Identity{Name: "billing-1", Role: auth.RoleCaller})
	st.Identity(auth.Identity{Name: "pay-1", Role: auth.RoleAgent, Type: "payment"})
	js, err := jetstream.New(st.Conn())
	if err != nil {
		t.Fatal(err)
	}
	w := &replyWitness{t: t, victim: st.ConnAs("billing-1"), agent: st.ConnAs("pay-1")}
	if w.policy, err = js.KeyValue(ctx, streams.BucketPolicy); err != nil {
		t.Fatal(err)
	}
	acl, err := w.policy.Get(ctx, policy.KeyACL)
	if err != nil {
		t.Fatal(err)
	}
	w.aclRev = acl.Revision()
	if w.inbox, err = w.victim.SubscribeSync("_INBOX.billing-1.>"); err == nil {
		w.deliveries, err = w.agent.SubscribeSync("reach.agent.pay-1")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{w.victim, w.agent} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// untouched fails the test when anything reached a target.
func (w *replyWitness) untouched() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acl, err := w.policy.Get(ctx, policy.KeyACL)
	if err != nil || acl.Revision() != w.aclRev {
		w.t.Errorf("the ACL was written: %v (revision %d, was %d)", err, acl.Revision(), w.aclRev)
	}
	if !quiet(w.t, w.victim, w.inbox) {
		m, _ := w.inbox.NextMsg(time.Second)
		w.t.Errorf("another caller's inbox got a message: %v", m)
	}
	if !quiet(w.t, w.agent, w.deliveries) {
		m, _ := w.deliveries.NextMsg(time.Second)
		w.t.Errorf("an agent's delivery subject got a message: %v", m)
	}
}

// TestSecurityRepliesOnlyInTheCallersInbox: a caller allowed only echo
// sends echo tasks and broadcasts, properly signed, whose reply subject is
// the ACL, another caller's inbox or an agent's delivery subject — the
// dispatcher would publish the echoed payload there. Each is dropped
// before anything runs or is answered (not even its refusal is published
// there), and the same caller's tasks answered in its own inbox still
// work.
func TestSecurityRepliesOnlyInTheCallersInbox(t *testing.T) {
	st := NewSecureStack(t, time.Second, securityACL)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	seen := make(chan string, 64) // the payloads the echo agent ran
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": func(_ context.Context, r *agentkit.Request) (any, error) {
		seen <- string(r.Data)
		return r.Data, nil
	}})
	WaitRoutable(t, "echo", 1, d)
	w := witnessReplies(t, st)

	signer, err := auth.LoadSigner(st.Store.CredsFile(SecureCaller))
	if err != nil {
		t.Fatal(err)
	}
	nc := st.ConnAs(SecureCaller)
	send := func(subject, id, reply string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Reply = reply
		m.Header.Set(streams.HeaderRequestID, id)
		m.Data = []byte(forgedACL)
		signer.Sign(m, time.Now())
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for i, target := range replyTargets {
		dropped := d.Stats().Dropped
		send(streams.Subjects{}.Task("echo"), fmt.Sprintf("task-%d", i), target.subject)
		natstest.WaitFor(t, 10*time.Second, func() error {
			if d.Stats().Dropped == dropped {
				return fmt.Errorf("an echo task answered on %s (%s) is not dropped", target.name, target.subject)
			}
			return nil
		})
		send(streams.Subjects{}.Broadcast("echo"), fmt.Sprintf("broadcast-%d", i), target.subject)
	}
	// Controls on the same connection, so after the attacks: the fan-out
	// service and the dispatcher take their requests in order.
	c, err := agentkit.NewClient(nc, agentkit.WithCredentials(st.Store.CredsFile(SecureCaller)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if g, err := c.Broadcast(ctx, "echo", echoIn{Text: "all"}); err != nil || g.Succeeded != 1 {
		t.Fatalf("a broadcast answered in the caller's inbox: %+v, %v", g, err)
	}
	if _, err := c.Call(ctx, "echo", echoIn{Text: "hi"}); err != nil {
		t.Fatalf("a call answered in the caller's inbox: %v", err)
	}
	for ran := len(seen); ran > 0; ran-- {
		if data := <-seen; data == forgedACL {
			t.Errorf("the echo agent ran %s, a task whose reply subject lies outside its caller's inbox", data)
		}
	}
	w.untouched()
}

// TestSecurityNoIdentityAnswersItself: an agent subscribes to its own
// inbox and publishes there a message whose reply subject is the ACL,
// meaning to "answer" it under allow_responses. The server refuses the
// publish, nothing arrives and the ACL is unchanged; the agent still
// answers its deliveries and calls onward from a handler.
func TestSecurityNoIdentityAnswersItself(t *testing.T) {
	st := NewSecureStack(t, time.Second, securityACL)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	var relayClient atomic.Pointer[agentkit.Client]
	st.Agent(agentkit.Config{ID: "relay-1", Type: "relay"}, map[string]agentkit.Handler{"relay": func(ctx context.Context, r *agentkit.Request) (any, error) {
		res, err := relayClient.Load().Call(ctx, "echo", r.Data)
		if err != nil {
			return nil, err
		}
		return res.Data, nil
	}})
	relayClient.Store(st.ClientAs("relay-1"))
	WaitRoutable(t, "echo", 1, d)
	WaitRoutable(t, "relay", 1, d)
	w := witnessReplies(t, st)

	for _, id := range []string{"echo-1", SecureCaller} {
		self := watch(t, func(o ...nats.Option) *nats.Conn { return st.ConnAs(id, o...) })
		inbox := auth.InboxPrefix(id) + ".self"
		sub, err := self.nc.Subscribe(inbox, func(m *nats.Msg) { _ = m.Respond([]byte(forgedACL)) })
		if err != nil {
			t.Fatal(err)
		}
		ok, ev := self.violated(inbox, func(nc *nats.Conn) error {
			return nc.PublishMsg(&nats.Msg{Subject: inbox, Reply: replyTargets[0].subject, Data: []byte("answer me")})
		})
		if !ok {
			t.Errorf("%s published to its own inbox (%s): %s", id, inbox, ev)
		}
		if n, err := sub.Delivered(); err != nil || n != 0 {
			t.Errorf("%s's inbox got %d messages it sent itself (%v)", id, n, err)
		}
	}
	// Nor may an agent publish to its own delivery subject.
	agent := watch(t, func(o ...nats.Option) *nats.Conn { return st.ConnAs("echo-1", o...) })
	if ok, ev := agent.violated("reach.agent.echo-1", func(nc *nats.Conn) error {
		return nc.PublishMsg(&nats.Msg{Subject: "reach.agent.echo-1", Reply: replyTargets[0].subject, Data: []byte("answer me")})
	}); !ok {
		t.Errorf("an agent published to its own delivery subject: %s", ev)
	}
	w.untouched()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out echoIn
	if res, err := st.Client().Call(ctx, "relay", echoIn{Text: "via"}); err != nil || res.Decode(&out) != nil || out.Text != "via" {
		t.Fatalf("an agent answering its delivery after calling onward: %+v, %v", out, err)
	}
}
