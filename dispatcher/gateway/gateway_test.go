package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/dispatcher/metrics"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// testGateway is a dispatcher with its fan-out service, metrics and
// aggregate, an agent "echo-1" serving echo, refuse (BIZ_REJECT) and slow
// (waits for its context), and the gateway listening on loopback.
type testGateway struct {
	g    *Gateway
	d    *dispatcher.Dispatcher
	base string
	http *http.Client
}

func startGateway(t *testing.T, cfg Config, opts ...Option) *testGateway {
	t.Helper()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true, Heartbeat: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(nc, config.Config{Retries: config.NoRetries}, dispatcher.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	js, _ := jetstream.New(nc)
	m.Attach(d, js)
	fo, err := fanout.New(nc, d, fanout.Config{})
	if err == nil {
		err = fo.Start(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fo.Close() })
	agg, err := eventstats.New(eventstats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	follow, err := eventstats.Follow(ctx, js, streams.Subjects{}, agg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(follow.Close)

	a, err := agentkit.New(natstest.Connect(t, s), agentkit.Config{Type: "echo", ID: "echo-1"}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Handle("echo", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil })
	_ = a.Handle("refuse", func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject("not today") })
	_ = a.Handle("slow", func(ctx context.Context, _ *agentkit.Request) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Drain(context.Background()) })
	natstest.WaitFor(t, 5*time.Second, func() error {
		if d.Table().Len() != 1 {
			return fmt.Errorf("the dispatcher sees %d agents", d.Table().Len())
		}
		return nil
	})

	g, err := New(nc, d, cfg, append([]Option{WithMetrics(m), WithStats(agg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &testGateway{g: g, d: d, base: strings.TrimSuffix(g.URL(), "/"), http: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
}

// response is what a request got.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
}

func (r response) code() string {
	var e streams.Error
	_ = json.Unmarshal(r.body, &e)
	return string(e.Code)
}

// do sends a request; header pairs follow the body.
func (tg *testGateway) do(t *testing.T, method, path, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, tg.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := tg.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func TestEndpoints(t *testing.T) {
	tg := startGateway(t, Config{})
	jsonCT := []string{"Content-Type", "application/json"}

	t.Run("call", func(t *testing.T) {
		r := tg.do(t, "POST", "/v1/call/echo", `{"text":"hi"}`, "Content-Type", "application/json", "Reach-Request-Id", "http-call-1")
		if r.status != 200 || string(r.body) != `{"text":"hi"}` || r.header.Get("Reach-Node") != "echo-1" ||
			r.header.Get("Reach-Request-Id") != "http-call-1" || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%d %q %v", r.status, r.body, r.header)
		}
	})
	t.Run("call without content type", func(t *testing.T) {
		if r := tg.do(t, "POST", "/v1/call/echo", `{"a":1}`); r.status != 200 || string(r.body) != `{"a":1}` {
			t.Fatalf("%d %q", r.status, r.body)
		}
	})
	t.Run("route", func(t *testing.T) {
		r := tg.do(t, "POST", "/route", `{"capability":"echo","payload":{"n":7}}`, jsonCT...)
		if r.status != 200 || string(r.body) != `{"n":7}` {
			t.Fatalf("%d %q", r.status, r.body)
		}
		// The seeds' names beside the Reach-* ones: the orchestration id
		// (the request id on a first hop) and the instance that answered.
		if id := r.header.Get("Reach-Request-Id"); id == "" || r.header.Get("X-Orchestration-ID") != id ||
			r.header.Get("Reach-Orchestration-Id") != id || r.header.Get("X-Agent-Reachable-Node") != "echo-1" {
			t.Fatalf("seed headers: %v", r.header)
		}
		r = tg.do(t, "POST", "/route", `{"capability":"echo","payload":{}}`, append(jsonCT, "Reach-Orchestration-Id", "seed-run-1")...)
		if r.status != 200 || r.header.Get("X-Orchestration-ID") != "seed-run-1" || r.header.Get("X-Agent-Reachable-Node") != "echo-1" {
			t.Fatalf("%d %q %v", r.status, r.body, r.header)
		}
	})
	t.Run("submit and result", func(t *testing.T) {
		r := tg.do(t, "POST", "/v1/submit/echo", `{"durable":true}`, jsonCT...)
		var sub Submitted
		r.json(t, &sub)
		if r.status != 202 || sub.RequestID == "" || r.header.Get("Location") != "/v1/results/"+sub.RequestID {
			t.Fatalf("%d %q %v", r.status, r.body, r.header)
		}
		natstest.WaitFor(t, 10*time.Second, func() error {
			res := tg.do(t, "GET", sub.Result, "")
			if res.status != 200 || string(res.body) != `{"durable":true}` || res.header.Get("Reach-Node") != "echo-1" ||
				res.header.Get("Nats-Msg-Id") != "" {
				return fmt.Errorf("%d %q", res.status, res.body)
			}
			return nil
		})
	})
	t.Run("a result is read by its submitter only", func(t *testing.T) {
		// Without auth the caller is the request's Reach-Source: a task
		// submitted as alice is hers, not found without it or as bob.
		r := tg.do(t, "POST", "/v1/submit/echo", `{"of":"alice"}`, append(jsonCT, "Reach-Source", "alice")...)
		var sub Submitted
		r.json(t, &sub)
		if r.status != 202 {
			t.Fatalf("%d %q", r.status, r.body)
		}
		natstest.WaitFor(t, 10*time.Second, func() error {
			if res := tg.do(t, "GET", sub.Result, "", "Reach-Source", "alice"); res.status != 200 || string(res.body) != `{"of":"alice"}` {
				return fmt.Errorf("%d %q", res.status, res.body)
			}
			return nil
		})
		for _, as := range [][]string{nil, {"Reach-Source", "bob"}} {
			if res := tg.do(t, "GET", sub.Result, "", as...); res.status != 404 || res.code() != CodeNotFound {
				t.Fatalf("GET as %v: %d %q", as, res.status, res.body)
			}
		}
		if res := tg.do(t, "GET", sub.Result, "", "Reach-Source", "a.b"); res.status != 400 || res.code() != string(streams.CodeBadRequest) {
			t.Fatalf("GET as a.b: %d %q", res.status, res.body)
		}
	})
	t.Run("result not recorded", func(t *testing.T) {
		if r := tg.do(t, "GET", "/v1/results/no-such-task", ""); r.status != 404 || r.code() != CodeNotFound {
			t.Fatalf("%d %q", r.status, r.body)
		}
	})
	t.Run("broadcast", func(t *testing.T) {
		r := tg.do(t, "POST", "/v1/broadcast/echo", `{"all":1}`, jsonCT...)
		var agg streams.Aggregate
		r.json(t, &agg)
		if r.status != 200 || agg.Expected != 1 || agg.Succeeded != 1 || r.header.Get("Reach-Expected") != "1" {
			t.Fatalf("%d %q", r.status, r.body)
		}
	})
	t.Run("fanout", func(t *testing.T) {
		r := tg.do(t, "POST", "/v1/fanout", `{"branches":[{"name":"a","capability":"echo","payload":{"x":1}},
			{"name":"b","capability":"echo","payload":{"x":2}}],"mode":"all"}`, jsonCT...)
		var agg streams.Aggregate
		r.json(t, &agg)
		if r.status != 200 || agg.Expected != 2 || agg.Succeeded != 2 {
			t.Fatalf("%d %q", r.status, r.body)
		}
	})
	t.Run("agents", func(t *testing.T) {
		r := tg.do(t, "GET", "/v1/agents", "")
		var agents []Agent
		r.json(t, &agents)
		if r.status != 200 || len(agents) != 1 || agents[0].ID != "echo-1" || agents[0].Type != "echo" ||
			agents[0].Breaker != "CLOSED" || agents[0].MaxConcurrent != agentkit.DefaultMaxConcurrent || agents[0].HeartbeatAgeMS < 0 {
			t.Fatalf("%d %q", r.status, r.body)
		}
	})
	t.Run("stats", func(t *testing.T) {
		natstest.WaitFor(t, 10*time.Second, func() error { // the records reach the stream in batches
			r := tg.do(t, "GET", "/v1/stats?by=capability&since=30m&series=5m", "")
			var page StatsPage
			r.json(t, &page)
			if r.status != 200 || page.Summary == nil || page.Dispatcher.Finished < 7 {
				return fmt.Errorf("%d %q", r.status, r.body)
			}
			for _, row := range page.Summary.Rows {
				if row.Key == "echo" && row.Tasks >= 7 && len(page.Series["echo"]) == 30 {
					return nil
				}
			}
			return fmt.Errorf("no echo row with 7 tasks and a 30-point series yet: %s", r.body)
		})
		if r := tg.do(t, "GET", "/v1/stats?by=region", ""); r.status != 400 || r.code() != "BAD_REQUEST" {
			t.Fatalf("by=region: %d %q", r.status, r.body)
		}
		if r := tg.do(t, "GET", "/v1/stats?series=forever", ""); r.status != 400 {
			t.Fatalf("series=forever: %d %q", r.status, r.body)
		}
	})
	t.Run("healthz", func(t *testing.T) {
		r := tg.do(t, "GET", "/healthz", "")
		var h Health
		r.json(t, &h)
		if r.status != 200 || h.Status != "ok" || h.RegisteredAgents != 1 || h.PendingQueue != 0 || h.Dispatcher != tg.d.Name() {
			t.Fatalf("%d %q", r.status, r.body)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		r := tg.do(t, "GET", "/metrics", "")
		if r.status != 200 || !bytes.Contains(r.body, []byte(`agentreach_tasks_total{capability="echo",outcome="finished"}`)) {
			t.Fatalf("%d %.500q", r.status, r.body)
		}
	})
	t.Run("dashboard", func(t *testing.T) {
		r := tg.do(t, "GET", "/", "")
		if r.status != 200 || !bytes.Contains(r.body, []byte("<title>Agent-Reach</title>")) || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Fatalf("%d %.200q", r.status, r.body)
		}
		for _, asset := range []string{"/static/app.js", "/static/style.css"} {
			if r := tg.do(t, "GET", asset, ""); r.status != 200 || len(r.body) < 100 {
				t.Fatalf("%s: %d", asset, r.status)
			}
		}
	})
}

// TestErrorMapping checks each error a caller can cause through the
// gateway: its status and its JSON {code, message}.
func TestErrorMapping(t *testing.T) {
	tg := startGateway(t, Config{MaxBody: 4096})
	past := fmt.Sprint(time.Now().Add(-time.Minute).UnixMilli())
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		status                   int
		code                     string
	}{
		{"invalid capability in the path", "POST", "/v1/call/Not..Valid", `{}`, nil, 400, "BAD_REQUEST"},
		{"malformed JSON", "POST", "/v1/call/echo", `{"text":`, []string{"Content-Type", "application/json"}, 400, "BAD_REQUEST"},
		{"wrong content type", "POST", "/v1/call/echo", `hi`, []string{"Content-Type", "text/plain"}, 415, "BAD_REQUEST"},
		{"unparsable content type", "POST", "/v1/call/echo", `{}`, []string{"Content-Type", "a/b; ===="}, 415, "BAD_REQUEST"},
		{"oversized body", "POST", "/v1/call/echo", `{"x":"` + strings.Repeat("x", 5000) + `"}`, nil, 413, "PAYLOAD_TOO_LARGE"},
		{"malformed Reach header", "POST", "/v1/call/echo", `{}`, []string{"Reach-Timeout", "soon"}, 400, "BAD_REQUEST"},
		{"no agent", "POST", "/v1/call/nobody.here", `{}`, nil, 404, "NO_AGENT"},
		{"business rejection", "POST", "/v1/call/refuse", `{}`, nil, 422, "BIZ_REJECT"},
		{"deadline passed", "POST", "/v1/call/echo", `{}`, []string{"Reach-Deadline", past}, 504, "DEADLINE_EXCEEDED"},
		{"unknown route", "GET", "/v2/everything", ``, nil, 404, CodeNotFound},
		{"wrong method", "GET", "/v1/call/echo", ``, nil, 405, CodeMethodNotAllowed},
		{"route without capability", "POST", "/route", `{"payload":{}}`, nil, 400, "BAD_REQUEST"},
		{"route with an unknown field", "POST", "/route", `{"capability":"echo","cap":"x"}`, nil, 400, "BAD_REQUEST"},
		{"route in msgpack", "POST", "/route", "\x80", []string{"Content-Type", "application/msgpack"}, 415, "BAD_REQUEST"},
		{"invalid request id to submit", "POST", "/v1/submit/echo", `{}`, []string{"Reach-Request-Id", "_no"}, 400, "BAD_REQUEST"},
		{"invalid result id", "GET", "/v1/results/_no", ``, nil, 400, "BAD_REQUEST"},
		{"broadcast nobody serves", "POST", "/v1/broadcast/nobody.here", `{}`, nil, 404, "NO_AGENT"},
		{"incomplete fan-out", "POST", "/v1/fanout", `{"branches":[{"name":"a","capability":"echo"},{"name":"b","capability":"nobody.here"}],"mode":"all"}`,
			nil, 502, "INCOMPLETE"},
		{"malformed fan-out", "POST", "/v1/fanout", `{"branches":"all"}`, nil, 400, "BAD_REQUEST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tg.do(t, tc.method, tc.path, tc.body, tc.header...)
			var e streams.Error
			r.json(t, &e)
			if r.status != tc.status || string(e.Code) != tc.code || e.Message == "" ||
				!strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
				t.Fatalf("%d %q; want %d with code %s and a message", r.status, r.body, tc.status, tc.code)
			}
		})
	}
	// Each failure leaves the gateway as it was: a normal call still works.
	if r := tg.do(t, "POST", "/v1/call/echo", `{}`); r.status != 200 {
		t.Fatalf("after the failures: %d %q", r.status, r.body)
	}
}

func TestStatusOfEveryCode(t *testing.T) {
	for code, want := range map[streams.Code]int{
		"": 200, streams.CodeBadRequest: 400, streams.CodeUnauthorized: 403, streams.CodeNoAgent: 404,
		streams.CodePayloadTooLarge: 413, streams.CodeBizReject: 422, streams.CodeTargetBusy: 429,
		streams.CodeInternal: 500, streams.CodeIncomplete: 502, streams.CodeOverloaded: 503, streams.CodeCircuitOpen: 503,
		streams.CodeTimeout: 504, streams.CodeDeadlineExceeded: 504, streams.CodeLoopDetected: 508,
		streams.CodeCancelled: 499, CodeNotFound: 404, CodeMethodNotAllowed: 405, "SOMETHING_NEW": 502,
	} {
		if got := Status(code); got != want {
			t.Errorf("Status(%q) = %d, want %d", code, got, want)
		}
	}
}

// TestIdentifier checks the identity hook: it sees every request before
// routing, may set headers, and its refusal is 401 without credentials,
// 403 with.
func TestIdentifier(t *testing.T) {
	tg := startGateway(t, Config{}, WithIdentifier(IdentifierFunc(func(r *http.Request, task *nats.Msg) *streams.Error {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token != "good" {
			return streams.NewError(streams.CodeUnauthorized, "unknown token")
		}
		task.Header.Set(streams.HeaderSource, "caller-from-token")
		return nil
	})))
	if r := tg.do(t, "POST", "/v1/call/echo", `{}`); r.status != 401 || r.code() != "UNAUTHORIZED" ||
		!strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no token: %d %q %v", r.status, r.body, r.header)
	}
	if r := tg.do(t, "POST", "/v1/submit/echo", `{}`, "Authorization", "Bearer bad"); r.status != 403 {
		t.Fatalf("bad token: %d %q", r.status, r.body)
	}
	if r := tg.do(t, "POST", "/v1/call/echo", `{}`, "Authorization", "Bearer good"); r.status != 200 {
		t.Fatalf("good token: %d %q", r.status, r.body)
	}
}

// TestInspectionNeedsAToken: with an Identifier (auth on) the agents, the
// stats and the metrics are served only to a token it accepts; the health
// probe, the dashboard's page and its assets stay open, and without one
// (auth off) everything is.
func TestInspectionNeedsAToken(t *testing.T) {
	identify := WithIdentifier(IdentifierFunc(func(r *http.Request, _ *nats.Msg) *streams.Error {
		if r.Header.Get("Authorization") != "Bearer good" {
			return streams.NewError(streams.CodeUnauthorized, "unknown token")
		}
		return nil
	}))
	tg := startGateway(t, Config{}, identify)
	open := startGateway(t, Config{})
	for _, path := range []string{"/v1/agents", "/v1/stats", "/metrics"} {
		if r := tg.do(t, "GET", path, ""); r.status != 401 || r.code() != "UNAUTHORIZED" {
			t.Errorf("GET %s without a token: %d %q", path, r.status, r.body)
		}
		if r := tg.do(t, "GET", path, "", "Authorization", "Bearer bad"); r.status != 403 {
			t.Errorf("GET %s with a bad token: %d %q", path, r.status, r.body)
		}
		if r := tg.do(t, "GET", path, "", "Authorization", "Bearer good"); r.status != 200 {
			t.Errorf("GET %s with a good token: %d %q", path, r.status, r.body)
		}
		if r := open.do(t, "GET", path, ""); r.status != 200 {
			t.Errorf("GET %s with auth off: %d %q", path, r.status, r.body)
		}
	}
	for _, path := range []string{"/healthz", "/", "/static/app.js"} {
		if r := tg.do(t, "GET", path, ""); r.status != 200 {
			t.Errorf("GET %s without a token: %d, want it open", path, r.status)
		}
	}
}

// TestSlowClients holds a connection that sends its headers slowly and one
// that stalls in its body while a normal client calls: the normal call is
// answered at once, the stalled body gets 408 and the slow headers are
// disconnected, each within its timeout.
func TestSlowClients(t *testing.T) {
	tg := startGateway(t, Config{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: time.Second})
	addr := tg.g.Addr().String()

	slowHeaders, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slowHeaders.Close()
	if _, err := io.WriteString(slowHeaders, "POST /v1/call/echo HTTP/1.1\r\nHost: localhost\r\n"); err != nil {
		t.Fatal(err)
	}
	slowBody, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slowBody.Close()
	if _, err := io.WriteString(slowBody, "POST /v1/call/echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"a\":"); err != nil {
		t.Fatal(err)
	}

	for range 5 { // other clients are unaffected
		if r := tg.do(t, "POST", "/v1/call/echo", `{"n":1}`); r.status != 200 {
			t.Fatalf("a normal call beside slow clients: %d %q", r.status, r.body)
		}
	}

	_ = slowBody.SetReadDeadline(time.Now().Add(10 * time.Second)) // a safety bound: the server answers after 1 s
	res, err := http.ReadResponse(bufio.NewReader(slowBody), nil)
	if err != nil {
		t.Fatalf("stalled body: no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || !bytes.Contains(b, []byte(`"code":"TIMEOUT"`)) {
		t.Fatalf("stalled body: %d %q, want 408 TIMEOUT", res.StatusCode, b)
	}

	_ = slowHeaders.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := slowHeaders.Read(make([]byte, 1)); err == nil {
		t.Fatalf("slow headers: the connection is still open (read %d bytes)", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("slow headers: the server did not close the connection within 10s")
	}
}

func TestShutdownDrains(t *testing.T) {
	tg := startGateway(t, Config{})
	if err := tg.g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tg.g.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", tg.g.Addr().String(), time.Second); err == nil {
		t.Error("the listener still takes connections after Shutdown")
	}
	rec := &recorder{header: http.Header{}}
	tg.g.Handler().ServeHTTP(rec, must(http.NewRequest("GET", "/healthz", nil)))
	if rec.status != 503 || !strings.Contains(rec.body.String(), `"status":"draining"`) {
		t.Fatalf("healthz after Shutdown: %d %q", rec.status, rec.body.String())
	}
}

// TestHTTPS serves the gateway with a certificate of a development CA: a
// client that trusts the CA calls it over HTTPS, one that does not is
// refused by its own TLS check, and plain HTTP gets a 400 that says why.
func TestHTTPS(t *testing.T) {
	files, err := devtls.EnsureTLS(t.TempDir(), []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.ServerCert, files.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	tg := startGateway(t, Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if !strings.HasPrefix(tg.base, "https://127.0.0.1:") {
		t.Fatalf("URL %q: want https://127.0.0.1:port/", tg.g.URL())
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(must(os.ReadFile(files.CA))) {
		t.Fatal("no CA certificate in " + files.CA)
	}
	tg.http.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	res, err := tg.http.Get(tg.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != 200 || res.TLS == nil || !strings.Contains(string(body), `"status":"ok"`) {
		t.Fatalf("GET /healthz over https: %d %q (tls %v)", res.StatusCode, body, res.TLS != nil)
	}
	if r := tg.do(t, "POST", "/route", `{"capability":"echo","payload":{"n":1}}`, "Content-Type", "application/json"); r.status != 200 ||
		string(r.body) != `{"n":1}` || r.header.Get("X-Agent-Reachable-Node") != "echo-1" {
		t.Fatalf("POST /route over https: %d %q %v", r.status, r.body, r.header)
	}

	untrusting := &http.Transport{}
	defer untrusting.CloseIdleConnections()
	if _, err := (&http.Client{Transport: untrusting, Timeout: 20 * time.Second}).Get(tg.base + "/healthz"); err == nil ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("a client without the CA: %v, want an unknown authority", err)
	}

	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	res, err = (&http.Client{Transport: plain, Timeout: 20 * time.Second}).Get("http://" + tg.g.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("plain http: %v", err)
	}
	body, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTP request to an HTTPS server") {
		t.Errorf("plain http to the HTTPS gateway: %d %q", res.StatusCode, body)
	}
}

func TestNewValidates(t *testing.T) {
	tg := startGateway(t, Config{})
	nc := natstest.Connect(t, natstest.RunServer(t))
	for _, cfg := range []Config{{MaxBody: -1}, {ReadTimeout: -1}, {WriteTimeout: time.Second}, {MaxHeaderBytes: 10}, {TLS: &tls.Config{}},
		{Hosts: []string{"reach.example:8080"}}, {Hosts: []string{""}}, {Hosts: []string{AnyHost, "reach.example"}}, {Hosts: []string{"http://reach.example"}}} {
		if _, err := New(nc, tg.d, cfg); err == nil {
			t.Errorf("New accepted %+v", cfg)
		}
	}
	if _, err := New(nil, tg.d, Config{}); err == nil {
		t.Error("New accepted a nil connection")
	}
}

// A web page can make a name of its own resolve to a gateway on this
// machine (DNS rebinding), and its browser then sends that name as Host:
// the gateway answers 421 to a Host that does not name it, with a real
// client on a real connection, and serves the names that do.
func TestGatewayAnswersOnlyItsOwnHost(t *testing.T) {
	tg := startGateway(t, Config{Hosts: []string{"Reach.Example"}})
	_, port, _ := net.SplitHostPort(tg.g.Addr().String())
	get := func(tg *testGateway, host, path string) response {
		t.Helper()
		req, err := http.NewRequest("GET", tg.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		res, err := tg.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return response{status: res.StatusCode, header: res.Header, body: b}
	}
	for _, host := range []string{"evil.example", "evil.example:" + port, "reach.example.evil.example", "10.11.12.13:" + port, "0.0.0.0:" + port} {
		for _, path := range []string{"/v1/agents", "/", "/healthz"} {
			r := get(tg, host, path)
			if r.status != http.StatusMisdirectedRequest || r.code() != CodeMisdirected || !strings.Contains(string(r.body), "DNS rebinding") {
				t.Errorf("GET %s with Host %s: %d %s, want 421 %s naming the rule", path, host, r.status, r.body, CodeMisdirected)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.", "[::1]:" + port, "127.0.0.2", "reach.example", "REACH.example:" + port} {
		if r := get(tg, host, "/v1/agents"); r.status != http.StatusOK || !strings.Contains(string(r.body), "echo-1") {
			t.Errorf("GET /v1/agents with Host %s: %d %s, want 200 and the agents", host, r.status, r.body)
		}
	}
	// Listening on every interface (not done here: tests keep to
	// loopback), it answers to the host of its URL too.
	everywhere := &Gateway{hosts: hostSet{}}
	all := "0.0.0.0"
	everywhere.listenHost.Store(&all)
	for host, want := range map[string]bool{"0.0.0.0:8080": true, "evil.example": false} {
		if got := everywhere.allowsHost(httptest.NewRequest("GET", "http://"+host+"/healthz", nil)); got != want {
			t.Errorf("listening on 0.0.0.0: Host %s allowed %v, want %v", host, got, want)
		}
	}
	anyHost := startGateway(t, Config{Hosts: []string{AnyHost}})
	if r := get(anyHost, "evil.example", "/healthz"); r.status != http.StatusOK {
		t.Errorf("Hosts {%q}: GET /healthz with Host evil.example: %d %s, want 200", AnyHost, r.status, r.body)
	}
}

type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(s int)           { r.status = s }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
