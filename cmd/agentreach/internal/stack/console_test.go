package stack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/dispatcher/gateway/console"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// TestConsoleActsUnderTheACL parks a durable task (a submission to the
// slow agent whose deadline passes while it works) in `up --auth --demo`
// and acts on it from the dashboard in headless Chromium: opened with an
// agent's token the entry's payload is withheld and its actions refused —
// by the page, and by the gateway when the action is sent anyway, the
// entry staying parked; opened with the operator's token (the dispatcher
// identity) the entry is replayed from the page, the task finishes (its
// result is recorded) and the action is listed with who did it.
func TestConsoleActsUnderTheACL(t *testing.T) {
	chromium(t)
	before := clitest.Goroutines()
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	u := startUp(t, "--nats-listen", listen, "--data-dir", dir, "--auth", "--demo", "--slow-delay", "300ms", "--http", httpAddr)
	clitest.WaitOutput(t, u.stdout, "Agent-Reach is up")
	base := "http://" + httpAddr + "/"
	token := func(name string) string {
		return strings.TrimSpace(clitest.RunCmd(t, RunAuth, "--dir", filepath.Join(dir, "auth"), "token", name).Stdout)
	}
	var agent string
	for _, id := range bannerAgents(t, u.stdout.String()) {
		if strings.HasPrefix(id, "echo-") {
			agent = id
		}
	}
	callerToken, agentToken, operatorToken := token(UpCallerIdentity), token(agent), token(UpDispatcherIdentity)

	// A task whose deadline passes while the slow agent works on it.
	res := do(t, http.MethodPost, base+"v1/submit/slow", callerToken, `{"park":"me"}`,
		"Reach-Deadline", strconv.FormatInt(time.Now().Add(100*time.Millisecond).UnixMilli(), 10))
	if res.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", res.status, res.body)
	}
	var sub struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(res.body, &sub); err != nil {
		t.Fatal(err)
	}
	id := sub.RequestID
	row := fmt.Sprintf(`tr[data-request=%q]`, id)
	// A malformed task: math.add answers BAD_REQUEST, a poison dead letter.
	res = do(t, http.MethodPost, base+"v1/submit/math.add", callerToken, `["not", "an", "object"]`)
	if res.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", res.status, res.body)
	}
	if err := json.Unmarshal(res.body, &sub); err != nil {
		t.Fatal(err)
	}
	dead := sub.RequestID

	b := openBrowser(t)
	if err := chromedp.Do(b.ctx, chromedp.Navigate(base+"#token="+agentToken), chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	b.step(t, "the parked task shows to the agent's identity", 30*time.Second,
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`!!document.querySelector('#parked %s')`, row)))
	stream, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector('#parked %s').closest('table').id`, row)))
	if err != nil {
		t.Fatal(err)
	}
	action := map[string]string{"dlq": "replay", "review": "rerun"}[stream]
	t.Logf("the task was parked in %s; its action is %s", stream, action)
	seq, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector('#parked %s').dataset.seq`, row)))
	if err != nil {
		t.Fatal(err)
	}
	refused, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`(r => [r.querySelector('td.preview').textContent,
		String(r.querySelector('button[data-action=%q]').disabled), r.querySelector('button[data-action=%q]').title])(document.querySelector('#parked %s'))`,
		action, action, row)))
	if err != nil || len(refused) != 3 || refused[0] != "withheld" || refused[1] != "true" || !strings.Contains(refused[2], "may act only on its own tasks") {
		t.Errorf("to an agent's identity the entry shows %q (%v), want the payload withheld and %s refused", refused, err, action)
	}
	// The attack: the action sent anyway is refused, and the entry stays.
	actURL := fmt.Sprintf("%sv1/console/parked/%s/%s/%s", base, stream, seq, action)
	if res := do(t, http.MethodPost, actURL, agentToken, ""); res.status != http.StatusForbidden || !strings.Contains(string(res.body), "UNAUTHORIZED") {
		t.Errorf("%s by an agent's identity: %d %s, want 403 UNAUTHORIZED", action, res.status, res.body)
	}
	if res := do(t, http.MethodPost, actURL, "", ""); res.status != http.StatusUnauthorized {
		t.Errorf("%s without a token: %d %s, want 401", action, res.status, res.body)
	}
	if res := do(t, http.MethodGet, base+"v1/console/parked/"+stream, operatorToken, ""); !strings.Contains(string(res.body), id) {
		t.Errorf("after the refused actions the entry is gone: %d %s", res.status, res.body)
	}

	// The control: the operator replays it from the page, and it finishes.
	if err := chromedp.Do(b.ctx, chromedp.Navigate(base+"#token="+operatorToken), chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	b.step(t, "the operator sees the entry with its payload and may act", 30*time.Second,
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`(r => !!r && r.querySelector('td.preview').textContent.includes('"park"') &&
			!r.querySelector('button[data-action=%q]').disabled)(document.querySelector('#parked %s'))`, action, row)))
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`(document.querySelector('#parked %s button[data-action=%q]').click(), true)`, row, action))); err != nil {
		t.Fatalf("click %s: %v", action, err)
	}
	b.step(t, "the operator "+action+"s it from the page", 30*time.Second,
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.getElementById('console-status').textContent.includes('done by %s') &&
			!document.querySelector('#parked %s') && !!document.querySelector('#actions td.by')`, UpDispatcherIdentity, row)))
	natstest.WaitFor(t, 30*time.Second, func() error {
		if res := do(t, http.MethodGet, base+"v1/results/"+id, callerToken, ""); res.status != http.StatusOK {
			return fmt.Errorf("result of the replayed task: %d %s", res.status, res.body)
		}
		return nil
	})
	// And the dead letter, a poison one, is dropped from the page.
	deadRow := fmt.Sprintf(`#dlq tr[data-request=%q]`, dead)
	b.step(t, "the dead letter shows with its reason and error", 30*time.Second,
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`(r => !!r && r.querySelector('td.reason').textContent === 'poison' &&
			r.querySelector('td.lasterror').textContent !== '')(document.querySelector('%s'))`, deadRow)))
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`(window.confirm = () => true, document.querySelector('%s button[data-action="drop"]').click(), true)`, deadRow))); err != nil {
		t.Fatalf("click drop: %v", err)
	}
	b.step(t, "the operator drops the dead letter from the page", 30*time.Second,
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`!document.querySelector('%s') && document.querySelectorAll('#actions td.by').length === 2`, deadRow)))
	if res := do(t, http.MethodGet, base+"v1/console/parked/dlq", operatorToken, ""); strings.Contains(string(res.body), dead) {
		t.Errorf("the dropped dead letter is still listed: %s", res.body)
	}
	by, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('#actions td.by').textContent`))
	if err != nil || by != UpDispatcherIdentity {
		t.Errorf("the action is recorded by %q (%v), want %s", by, err, UpDispatcherIdentity)
	}
	screenshot(t, b, "console.png")
	b.close()
	if code := u.Stop(t); code != cli.ExitOK {
		t.Fatalf("up exited %d; stderr:\n%s", code, u.stderr.String())
	}
	clitest.CheckNoLeaks(t, before)
}

// answer is an HTTP answer's status and body.
type answer struct {
	status int
	body   []byte
}

// do sends a request with a bearer token (none when "") and headers as
// name, value pairs.
func do(t *testing.T, method, url, token, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method == http.MethodPost && strings.Contains(url, "/v1/console/") {
		req.Header.Set(console.HeaderConsole, "1") // as the page sends it
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{res.StatusCode, b}
}

// screenshot keeps the page's picture as name beside $AGENTREACH_SCREENSHOT
// (.artifacts/ under `make test`), else in the test's temporary directory.
func screenshot(t *testing.T, b *browser, name string) {
	t.Helper()
	keep(t, b, name, chromedp.FullScreenshot(100))
}

// keep saves a screenshot action's picture as name (see screenshot).
func keep(t *testing.T, b *browser, name string, shot chromedp.Action[[]byte]) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, shot)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := t.TempDir()
	if p := os.Getenv("AGENTREACH_SCREENSHOT"); p != "" {
		dir = filepath.Dir(p)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// TestConsoleAdminWithoutAuth: with auth off, --http-admin turns the
// console's actions on (the control of the refusal TestDashboardInABrowser
// checks without it): a poison dead letter is listed with its payload and
// dropped, the drop recorded as by http-admin.
func TestConsoleAdminWithoutAuth(t *testing.T) {
	before := clitest.Goroutines()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	u := startUp(t, "--nats-listen", listen, "--data-dir", t.TempDir(), "--demo", "--http", httpAddr, "--http-admin")
	clitest.WaitOutput(t, u.stdout, "Agent-Reach is up")
	base := "http://" + httpAddr + "/"
	res := do(t, http.MethodPost, base+"v1/submit/math.add", "", `["not", "an", "object"]`)
	if res.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", res.status, res.body)
	}
	var listing struct {
		Entries []struct {
			Seq       uint64 `json:"seq"`
			Preview   string `json:"preview"`
			Allowed   bool   `json:"allowed"`
			Reason    string `json:"reason"`
			LastError string `json:"last_error"`
		} `json:"entries"`
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		res := do(t, http.MethodGet, base+"v1/console/parked/dlq", "", "")
		if err := json.Unmarshal(res.body, &listing); err != nil || len(listing.Entries) != 1 {
			return fmt.Errorf("dlq: %d %s (%v)", res.status, res.body, err)
		}
		return nil
	})
	e := listing.Entries[0]
	if !e.Allowed || e.Reason != "poison" || e.Preview != `["not", "an", "object"]` || e.LastError == "" {
		t.Errorf("the dead letter is listed %+v, want allowed, poison, its payload and its error", e)
	}
	// A cross-site form's POST carries no X-Reach-Console: refused, the
	// entry kept.
	form, err := http.Post(fmt.Sprintf("%sv1/console/parked/dlq/%d/drop", base, e.Seq), "application/x-www-form-urlencoded", strings.NewReader("x=1"))
	if err != nil {
		t.Fatal(err)
	}
	form.Body.Close()
	if form.StatusCode != http.StatusForbidden {
		t.Errorf("a drop without %s: %d, want 403", console.HeaderConsole, form.StatusCode)
	}
	res = do(t, http.MethodPost, fmt.Sprintf("%sv1/console/parked/dlq/%d/drop", base, e.Seq), "", "")
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"by":"http-admin"`) {
		t.Errorf("drop with --http-admin: %d %s, want 200 by http-admin", res.status, res.body)
	}
	if res := do(t, http.MethodGet, base+"v1/console/parked/dlq", "", ""); !strings.Contains(string(res.body), `"total":0`) {
		t.Errorf("after the drop: %s", res.body)
	}
	if res := do(t, http.MethodGet, base+"v1/console/actions", "", ""); !strings.Contains(string(res.body), `"action":"drop"`) {
		t.Errorf("the drop is not among the actions: %s", res.body)
	}
	if code := u.Stop(t); code != cli.ExitOK {
		t.Fatalf("up exited %d; stderr:\n%s", code, u.stderr.String())
	}
	clitest.CheckNoLeaks(t, before)
}
