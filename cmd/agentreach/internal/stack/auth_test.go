package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/inspect"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/internal/natstest"
)

func TestAuthCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	auth := func(args ...string) clitest.Result {
		return clitest.RunCmd(t, RunAuth, append([]string{"--dir", dir}, args...)...)
	}
	clitest.Expect(t, auth("ls"), cli.ExitFail, "no identity store", "agentreach auth init --dir")
	clitest.Expect(t, auth("init"), cli.ExitOK, "out:identity store made in "+dir, "out:keys/verifier.nk")
	clitest.Expect(t, auth("init"), cli.ExitFail, "identity store exists")
	clitest.Expect(t, auth("agent", "echo-1"), cli.ExitUsage, "--type is required")
	clitest.Expect(t, auth("agent", "echo 1", "--type", "echo"), cli.ExitUsage, `name: invalid name: instance id "echo 1"`)
	clitest.Expect(t, auth("agent", "echo-1", "--type", "Echo"), cli.ExitUsage, `type: invalid name: capability "Echo"`)
	clitest.Expect(t, auth("caller", "web", "--type", "echo"), cli.ExitUsage, "--type: only for 'auth agent'")
	clitest.Expect(t, auth("agent", "echo-1", "--type", "echo"), cli.ExitOK, "out:agent echo-1: credentials in "+filepath.Join(dir, "creds", "echo-1.creds"))
	clitest.Expect(t, auth("agent", "risk-1", "--type", "risk", "--serves", "risk.>.x"), cli.ExitUsage, `serves[0]: "risk.>.x": '>' may only be the last token`)
	clitest.Expect(t, auth("agent", "risk-1", "--type", "risk", "--serves", "risk.*, fraud.score"), cli.ExitOK, "out:agent risk-1: credentials in")
	clitest.Expect(t, auth("caller", "web", "--serves", "echo"), cli.ExitUsage, "--serves: only for 'auth agent' and 'auth grant'")
	clitest.Expect(t, auth("grant", "risk-1"), cli.ExitUsage, "grant: --serves is required")
	clitest.Expect(t, auth("grant", "risk-1", "--serves", "Risk"), cli.ExitUsage, `serves[0]: "Risk"`)
	clitest.Expect(t, auth("grant", "nobody", "--serves", "risk.>"), cli.ExitFail, "unknown identity: nobody")
	clitest.Expect(t, auth("grant", "risk-1", "--serves", "risk.>,fraud.score"), cli.ExitOK, "out:agent risk-1 may be routed risk.>, fraud.score")
	clitest.Expect(t, auth("ls"), cli.ExitOK, "out:echo-1  agent  echo  echo,echo.>", "out:risk-1  agent  risk  risk.>,fraud.score")
	clitest.Expect(t, auth("revoke", "risk-1"), cli.ExitOK, "out:agent risk-1 revoked at")
	clitest.Expect(t, auth("grant", "risk-1", "--serves", "risk.>"), cli.ExitUsage, "risk-1 was revoked")
	clitest.Expect(t, auth("caller", "web"), cli.ExitOK, "out:caller web")
	clitest.Expect(t, auth("dispatcher", "d1", "--json"), cli.ExitOK, `out:"name":"d1","role":"dispatcher"`)
	clitest.Expect(t, auth("caller", "web"), cli.ExitFail, "identity exists: web")
	clitest.Expect(t, auth("caller"), cli.ExitUsage, "caller: want NAME")
	clitest.Expect(t, auth("frob"), cli.ExitUsage, `unknown sub-command "frob"`)
	clitest.Expect(t, auth("revoke", "nobody"), cli.ExitFail, "unknown identity: nobody")
	clitest.Expect(t, auth("revoke", "web"), cli.ExitOK, "out:caller web revoked at")
	clitest.Expect(t, auth("caller", "web"), cli.ExitFail, "names are never reused")
	clitest.Expect(t, auth("token", "web"), cli.ExitFail, "web was revoked")
	clitest.Expect(t, auth("token", "nobody"), cli.ExitFail, "unknown identity: nobody")
	clitest.Expect(t, auth("token", "d1"), cli.ExitOK, "out:ar1.d1.")
	r := auth("ls", "--json")
	var rows []IdentityJSON
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil || len(rows) != 4 {
		t.Fatalf("ls --json: %q (%v)", r.Stdout, err)
	}
	if rows[0].Name != "d1" || rows[1].Name != "echo-1" || rows[1].Type != "echo" || rows[2].Name != "risk-1" || rows[2].Serves[1] != "fraud.score" ||
		rows[3].Name != "web" || rows[3].Active() || rows[3].Creds != "" {
		t.Fatalf("ls --json rows: %+v", rows)
	}
	clitest.Expect(t, auth("ls"), cli.ExitOK, "out:NAME", "out:echo-1  agent", "out:revoked ")

	certs := filepath.Join(t.TempDir(), "certs")
	clitest.Expect(t, auth("tls"), cli.ExitUsage, "--out is required")
	clitest.Expect(t, auth("tls", "--out", certs, "--hosts", "nats-1,127.0.0.1"), cli.ExitOK, "out:server certificate for nats-1, 127.0.0.1")
	for _, f := range []string{"ca.pem", "ca-key.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem"} {
		if _, err := os.Stat(filepath.Join(certs, f)); err != nil {
			t.Errorf("auth tls wrote no %s: %v", f, err)
		}
	}

	// The server configuration of operator mode is one nats-server takes.
	conf := filepath.Join(t.TempDir(), "auth.conf")
	clitest.Expect(t, auth("server-config", "--resolver-dir", filepath.Join(t.TempDir(), "jwt"), "--out", conf), cli.ExitOK, "written to "+conf)
	main := filepath.Join(filepath.Dir(conf), "server.conf")
	if err := os.WriteFile(main, []byte("listen: 127.0.0.1:-1\njetstream {store_dir: "+filepath.Join(t.TempDir(), "js")+"}\ninclude ./auth.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(main)
	if err != nil {
		t.Fatalf("nats-server refuses the generated configuration: %v", err)
	}
	if len(opts.TrustedOperators) != 1 || opts.SystemAccount == "" || opts.AccountResolver == nil {
		t.Fatalf("operator mode not configured: %+v", opts.TrustedOperators)
	}
	opts.AccountResolver.Close()
}

// TestUpWithAuthAndTLS runs `up --auth --tls --tls-verify --demo`: the
// demo answers the banner's call, a caller without credentials or without
// a client certificate is refused, an identity added while it runs can
// call within the sync, and a revoked one cannot — over NATS and through
// the HTTP gateway with the identity's bearer token.
func TestUpWithAuthAndTLS(t *testing.T) {
	before := clitest.Goroutines()
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	url := "tls://" + listen
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr clitest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- RunUp(ctx, []string{"--nats-listen", listen, "--data-dir", dir, "--demo", "--slow-delay", "100ms", "--log-level", "warn",
			"--auth", "--tls", "--tls-verify", "--http", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	clitest.WaitOutput(t, &stdout, "Agent-Reach is up")
	tlsArgs := []string{"--tls-ca", filepath.Join(dir, "tls", "ca.pem"), "--tls-cert", filepath.Join(dir, "tls", "client.pem"),
		"--tls-key", filepath.Join(dir, "tls", "client-key.pem")}
	creds := func(name string) string { return filepath.Join(dir, "auth", "creds", name+".creds") }
	as := func(name string) []string { return append(append([]string{}, tlsArgs...), "--creds", creds(name)) }
	for _, want := range []string{"mutual TLS", "auth        identities in " + filepath.Join(dir, "auth"),
		"agentreach call --server " + url + " " + strings.Join(as("cli"), " ") + ` echo '{"text":"hi"}'`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, stdout.String())
		}
	}
	waitCallable(t, url, as("cli")...)
	// The demo agents start without a refused publish: an identity's agent
	// skips the probe of its own inbox, where it may not publish.
	if strings.Contains(strings.ToLower(stderr.String()), "publish violation") {
		t.Errorf("up --auth started with a refused publish:\n%s", stderr.String())
	}
	call := func(args ...string) clitest.Result {
		return clitest.RunCmd(t, task.RunCall, append(append([]string{"--server", url, "--timeout", "2s"}, args...), "echo", `{"text":"hi"}`)...)
	}
	clitest.Expect(t, call(tlsArgs...), cli.ExitFail, "Authorization Violation")
	clitest.Expect(t, call("--tls-ca", filepath.Join(dir, "tls", "ca.pem"), "--creds", creds("cli")), cli.ExitFail, "tls")
	r := clitest.RunCmd(t, inspect.RunAgents, append([]string{"--server", url, "--json"}, as(UpDispatcherIdentity)...)...)
	var entries []inspect.AgentJSON
	if err := json.Unmarshal([]byte(r.Stdout), &entries); err != nil || len(entries) != 5 || entries[0].ID != "echo-1" {
		t.Fatalf("agents --json: exit %d, %+v (%v), stderr %q", r.Code, entries, err, r.Stderr)
	}
	// A caller may not read the registry: the server's refusal is named at
	// once, not left to a timeout, and nothing hints at provisioning.
	refused := make(chan clitest.Result, 1)
	go func() {
		refused <- clitest.RunCmd(t, inspect.RunAgents, append([]string{"--server", url, "--timeout", "10m", "--json"}, as("cli")...)...)
	}()
	select {
	case r = <-refused:
	case <-time.After(time.Minute): // a bound on the wait; TestBoundedEndsOnRefusal checks the mechanism
		t.Fatal("agents as a caller waited for its --timeout instead of failing on the refusal")
	}
	if code := clitest.FailureCode(t, r.Stdout); r.Code != cli.ExitFail || code != "UNAUTHORIZED" ||
		!strings.Contains(r.Stderr, `error: permission denied: Permissions Violation for Publish to "$JS.API.`) ||
		!strings.Contains(r.Stderr, `KV_REACH_AGENTS"`) || // the direct get of the listing, or the bucket's info
		strings.Contains(r.Stderr, "provisioning") || strings.Contains(r.Stderr, "deadline") {
		t.Errorf("agents as a caller: exit %d, code %s, stderr %q", r.Code, code, r.Stderr)
	}

	// Identities change while it runs.
	authDir := []string{"--dir", filepath.Join(dir, "auth")}
	clitest.Expect(t, clitest.RunCmd(t, RunAuth, append(authDir, "caller", "web")...), cli.ExitOK, "out:caller web")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if r := call(as("web")...); r.Code != cli.ExitOK {
			return errors.New(r.Stderr)
		}
		return nil
	})

	// The gateway: bearer tokens name identities under the same ACL.
	base := bannerURL(t, stdout.String())
	token := func(name string) string {
		return strings.TrimSpace(clitest.RunCmd(t, RunAuth, append(authDir, "token", name)...).Stdout)
	}
	web := token("web")
	if !strings.Contains(stdout.String(), "Authorization: Bearer $(agentreach auth token --dir "+filepath.Join(dir, "auth")+" cli)") {
		t.Errorf("the banner shows no curl with a bearer token:\n%s", stdout.String())
	}
	for _, c := range []struct {
		path, token string
		status      int
		want        string
	}{
		{"/v1/call/echo", "", http.StatusUnauthorized, `"code":"UNAUTHORIZED"`},
		{"/v1/call/echo", "Bearer nonsense", http.StatusBadRequest, "no Agent-Reach bearer token"},
		{"/v1/call/echo", "Bearer " + strings.Replace(web, "ar1.web.", "ar1.cli.", 1), http.StatusForbidden, "is not its own"},
		{"/v1/call/echo", "Bearer " + web, http.StatusOK, `"text":"hi"`},
		{"/v1/broadcast/echo", "Bearer " + web, http.StatusOK, `"text":"hi"`},
	} {
		if status, body := httpDo(t, "POST", base+c.path[1:], c.token, `{"text":"hi"}`); status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("POST %s with %q: %d %s, want %d with %s", c.path, c.token, status, body, c.status, c.want)
		}
	}
	fanout := `{"branches": [{"name": "e", "capability": "echo", "payload": {"text": "hi"}}]}`
	if status, body := httpDo(t, "POST", base+"v1/fanout", "Bearer "+web, fanout); status != http.StatusOK || !strings.Contains(body, `"succeeded":1`) {
		t.Errorf("POST /v1/fanout as web: %d %s", status, body)
	}
	// Inspection is served to a token only; the health probe stays open.
	for _, path := range []string{"v1/agents", "v1/stats", "metrics"} {
		if status, body := httpDo(t, "GET", base+path, "", ""); status != http.StatusUnauthorized {
			t.Errorf("GET /%s without a token: %d %s", path, status, body)
		}
		if status, body := httpDo(t, "GET", base+path, "Bearer "+web, ""); status != http.StatusOK {
			t.Errorf("GET /%s as web: %d %s", path, status, body)
		}
	}
	if status, body := httpDo(t, "GET", base+"healthz", "", ""); status != http.StatusOK {
		t.Errorf("GET /healthz without a token: %d %s", status, body)
	}
	if !strings.Contains(stdout.String(), base+"#token=") {
		t.Errorf("the banner does not say how to open the dashboard with a token:\n%s", stdout.String())
	}
	// A submit is published, signed as the identity, and taken by the
	// durable tier like any signed task.
	status, body := httpDo(t, "POST", base+"v1/submit/echo", "Bearer "+web, `{"text":"durable"}`)
	var sub struct{ Result string }
	if err := json.Unmarshal([]byte(body), &sub); status != http.StatusAccepted || err != nil {
		t.Fatalf("submit: %d %s", status, body)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if status, body := httpDo(t, "GET", base+sub.Result[1:], "Bearer "+web, ""); status != http.StatusOK || !strings.Contains(body, "durable") {
			return fmt.Errorf("result: %d %s", status, body)
		}
		return nil
	})

	clitest.Expect(t, clitest.RunCmd(t, RunAuth, append(authDir, "revoke", "web")...), cli.ExitOK, "out:caller web revoked")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if r := call(as("web")...); r.Code == cli.ExitOK {
			return errors.New("the revoked caller still calls")
		}
		if status, body := httpDo(t, "POST", base+"v1/call/echo", "Bearer "+web, `{}`); status != http.StatusForbidden {
			return fmt.Errorf("the revoked caller's token: %d %s", status, body)
		}
		return nil
	})
	clitest.Expect(t, call(as("cli")...), cli.ExitOK, `out:"text": "hi"`)

	cancel()
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Fatalf("runUp exited %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runUp did not stop within 30s")
	}
	clitest.CheckNoLeaks(t, before)
}

// bannerURL returns the dashboard's URL from up's banner.
func bannerURL(t *testing.T, banner string) string {
	t.Helper()
	for _, line := range strings.Split(banner, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "dashboard"); ok {
			if u, _, _ := strings.Cut(strings.TrimSpace(rest), " "); strings.HasPrefix(u, "http://") {
				return u
			}
		}
	}
	t.Fatalf("no dashboard URL in the banner:\n%s", banner)
	return ""
}

// httpDo sends a request with an Authorization header (none when empty)
// and returns the status and body.
func httpDo(t *testing.T, method, url, authorization, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
