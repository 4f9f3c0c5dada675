package stack

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/document"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// chromiumPath is Debian's Chromium, which `make test` installs when it is
// missing; AGENTREACH_CHROMIUM names another.
const chromiumPath = "/usr/bin/chromium"

// chromium returns the browser to run, or fails the test saying how to
// get one: the dashboard test never skips.
func chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AGENTREACH_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat(chromiumPath); err == nil {
		return chromiumPath
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatalf("no Chromium at %s or on PATH: the dashboard test drives a real browser. `make test` installs Debian's "+
		"(apt-get install -y chromium); or set AGENTREACH_CHROMIUM to a Chromium or Chrome binary", chromiumPath)
	return ""
}

// TestDashboardInABrowser starts `up` with the demo agents and HTTP on a
// free port, opens the dashboard in headless Chromium, and checks that it
// lists the demo agents and shows a call made during the test within 5 s;
// that the agents' latency is labelled a moving average and shows the
// placeholder "no samples" until an instance has enough; and that a
// caller's mistakes (BIZ_REJECT, NO_AGENT for a name never registered) are
// shown as rejected, apart from the service's failures (a TIMEOUT), each
// with its message and its time in UTC.
// The screenshot is kept in the test's temporary directory, or at
// $AGENTREACH_SCREENSHOT when set (docs/dashboard.png is made so).
func TestDashboardInABrowser(t *testing.T) {
	chromium(t) // before starting anything: the test never skips
	before := clitest.Goroutines()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	u := startUp(t, "--nats-listen", listen, "--data-dir", t.TempDir(), "--demo", "--slow-delay", "300ms", "--http", httpAddr)
	clitest.WaitOutput(t, u.stdout, "Agent-Reach is up")
	base := "http://" + httpAddr + "/"
	if !strings.Contains(u.stdout.String(), "dashboard   "+base) {
		t.Fatalf("the banner does not give the dashboard's URL %s:\n%s", base, u.stdout.String())
	}
	agentIDs := bannerAgents(t, u.stdout.String())

	b := openBrowser(t)
	bctx := b.ctx
	if err := chromedp.Do(bctx, chromedp.Navigate(base)); err != nil {
		t.Fatalf("open %s in Chromium: %v", base, err)
	}
	b.step(t, fmt.Sprintf("the dashboard lists the %d demo agents", len(agentIDs)), 15*time.Second,
		chromedp.WaitVisible(`#health.ok`),
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelectorAll('#agents tr[data-id]').length === %d`, len(agentIDs))))
	shown, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#agents tr[data-id]')).map(r => r.dataset.id)`))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(shown)
	if !slices.Equal(shown, agentIDs) {
		t.Fatalf("the dashboard lists %v, want the demo agents %v", shown, agentIDs)
	}
	latencyOf := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf(
			`document.querySelector('#agents tr[data-id=%q] td.latency').textContent`, id)))
		if err != nil {
			t.Fatalf("latency of %s: %v", id, err)
		}
		return v
	}
	header, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById('agents-latency').textContent`))
	if err != nil || header != "latency (moving avg)" {
		t.Errorf("the agents' latency column is headed %q (%v), want %q", header, err, "latency (moving avg)")
	}
	for _, id := range agentIDs { // at most the warm-up's one sample each: fewer than the average needs
		if got := latencyOf(id); got != "no samples" {
			t.Errorf("%s's moving average before enough samples: %q, want the placeholder", id, got)
		}
	}

	// A call made now shows within 5 s (the gateway's aggregate follows
	// REACH_EVENTS, which the dashboard polls every second).
	post(t, base+"v1/call/math.add", `{"a":2,"b":3}`, http.StatusOK)
	start := time.Now()
	b.step(t, "the call to math.add is on the dashboard within 5s", 5*time.Second, chromedp.Poll[chromedp.Void](
		`(document.querySelector('#capabilities tr[data-capability="math.add"] .tasks') || {}).textContent === "1"`))
	t.Logf("the call showed on the dashboard after %v", time.Since(start).Round(time.Millisecond))

	// Some traffic and a failure for the picture.
	for i := range 12 {
		post(t, base+"v1/call/echo", fmt.Sprintf(`{"n":%d}`, i), http.StatusOK)
	}
	post(t, base+"v1/call/slow", `{}`, http.StatusOK)
	post(t, base+"v1/call/translate.fr", `{"text":"hi"}`, http.StatusNotFound)  // NO_AGENT, a name never registered: the caller's
	post(t, base+"v1/call/math.add", `{"a":1}`, http.StatusUnprocessableEntity) // BIZ_REJECT: the caller's
	postWith(t, base+"v1/call/slow", `{}`, http.StatusGatewayTimeout,           // DEADLINE_EXCEEDED: the service's
		"Reach-Deadline", strconv.FormatInt(time.Now().Add(100*time.Millisecond).UnixMilli(), 10))
	b.step(t, "the failure, the rejections and the charts show", 10*time.Second, chromedp.Poll[chromedp.Void](
		`document.querySelectorAll('#failures tr[data-request]').length === 3 && document.querySelectorAll('#charts .chart').length === 4`))
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('#failures tr[data-request]')).map(r => ['capability', 'class', 'code', 'message', 'time'].map(
			c => (r.querySelector('td.' + c) || r.children[1]).textContent).join(' | ')).sort()`))
	if err != nil || len(rows) != 3 {
		t.Fatalf("recent failures: %v (%v)", rows, err)
	}
	t.Logf("recent failures: %q", rows)
	for i, want := range []struct{ class, code, message string }{
		{"rejected", "BIZ_REJECT", `needs field "b"`},
		{"failed", "DEADLINE_EXCEEDED", "deadline"},
		{"rejected", "NO_AGENT (name never registered)", "no routable instance offers translate.fr"},
	} {
		f := strings.Split(rows[i], " | ")
		if len(f) != 5 || f[1] != want.class || f[2] != want.code || !strings.Contains(f[3], want.message) ||
			!regexp.MustCompile(`^\d\d:\d\d:\d\d UTC$`).MatchString(f[4]) {
			t.Errorf("failure %d: %q, want class %s, code %s, a message with %q and a time in UTC", i, rows[i], want.class, want.code, want.message)
		}
	}
	tiles, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](
		`['tile-rejected', 'tile-failed', 'tile-refused'].map(id => document.getElementById(id).textContent)`))
	if err != nil || !slices.Equal(tiles, []string{"2", "1", "0"}) {
		t.Errorf("tiles rejected, failed, refused: %v (%v), want 2, 1, 0", tiles, err)
	}
	if updated, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById('updated').textContent`)); err != nil ||
		!strings.Contains(updated, " UTC · times in UTC (this browser: UTC") {
		t.Errorf("the update time %q (%v) does not say it is UTC and the browser's offset", updated, err)
	}
	rejected, err := chromedp.Run(bctx, chromedp.Evaluate[string](
		`document.querySelector('#capabilities tr[data-capability="math.add"] .rejected').textContent`))
	if err != nil || rejected != "1" {
		t.Errorf("math.add's rejected: %q (%v), want 1", rejected, err)
	}
	// 12 calls over the two echo instances: one has had at least 6, enough
	// for its average; the slow agent, with one call, still has none.
	echoes := []string{}
	for _, id := range agentIDs {
		if strings.HasPrefix(id, "echo-") {
			echoes = append(echoes, id)
		}
	}
	b.step(t, "an echo instance's moving average shows", 5*time.Second, chromedp.Poll[chromedp.Void](fmt.Sprintf(
		`%q.split(",").some(id => document.querySelector('#agents tr[data-id="' + id + '"] td.latency').textContent.endsWith(" ms"))`,
		strings.Join(echoes, ","))))
	for _, id := range agentIDs {
		if strings.HasPrefix(id, "slow-") {
			if got := latencyOf(id); got != "no samples" {
				t.Errorf("%s's moving average after one task: %q, want the placeholder", id, got)
			}
		}
	}
	// The topology: the anonymous caller (no auth, no Reach-Source) →
	// the capabilities called → the instances that served them, every
	// demo agent drawn; a click on echo shows its figures.
	b.step(t, "the topology shows the callers, capabilities and instances", 10*time.Second, chromedp.Poll[chromedp.Void](
		`['translate.fr', 'slow', 'math.add', 'echo'].every(c => !!document.querySelector('#topo path.edge[data-kind=call][data-from=anonymous][data-to="' + c + '"]'))`))
	nodes, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('#topo g.node')).map(g => g.dataset.kind + ':' + g.dataset.id).sort()`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"caller:anonymous", "capability:echo", "capability:math.add", "capability:slow", "capability:story", "capability:translate.fr"}
	for _, id := range agentIDs {
		want = append(want, "instance:"+id)
	}
	slices.Sort(want)
	if !slices.Equal(nodes, want) {
		t.Errorf("topology nodes %v, want %v", nodes, want)
	}
	edges, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('#topo path.edge[data-kind=delivery]')).map(p => p.dataset.from + '>' + p.dataset.to + ' ' + p.classList[1]).sort()`))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edges {
		if strings.HasPrefix(e, "slow>slow-") && !strings.HasSuffix(e, " bad") && !strings.HasSuffix(e, " warn") {
			t.Errorf("delivery edge %q: slow had a failure in 2 tasks, want it coloured so", e)
		}
	}
	t.Logf("topology deliveries: %v", edges)
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(document.querySelector('#topo g.node[data-kind=capability][data-id=echo]').dispatchEvent(new MouseEvent('click')), true)`)); err != nil {
		t.Fatal(err)
	}
	b.step(t, "a click on echo shows its figures", 5*time.Second, chromedp.Poll[chromedp.Void](
		`(document.querySelector('#topo-detail h3') || {}).textContent === 'capability echo' && document.getElementById('topo-detail').textContent.includes('12 tasks')`))
	keep(t, b, "topology.png", chromedp.Screenshot(chromedp.Search("#topology")))

	// A workflow run, listed and shown step by step.
	if r := clitest.RunCmd(t, document.RunWorkflow, "--server", "nats://"+listen, "put",
		filepath.Join("..", "..", "..", "..", "examples", "workflows", "add-and-echo.yaml")); r.Code != cli.ExitOK {
		t.Fatalf("workflow put: %d %s", r.Code, r.Stderr)
	}
	// (a durable run: its record is kept in REACH_RUNS)
	if res := do(t, http.MethodPost, base+"v1/submit/demo.sum", "", `{"a":2,"b":3}`); res.status != http.StatusAccepted {
		t.Fatalf("submit demo.sum: %d %s", res.status, res.body)
	}
	b.step(t, "the run is listed", 15*time.Second, chromedp.Poll[chromedp.Void](
		`(r => !!r && r.querySelector('td.status').textContent === 'finished')(document.querySelector('#runs-list tr[data-run]'))`))
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(document.querySelector('#runs-list tr[data-run]').click(), true)`)); err != nil {
		t.Fatal(err)
	}
	b.step(t, "the run's steps show", 10*time.Second, chromedp.Poll[chromedp.Void](
		`['add', 'say', 'warn'].every(s => !!document.querySelector('#run-detail tr[data-step="' + s + '"]')) &&
		document.querySelector('#run-detail tr[data-step=warn] td.status').textContent === 'skipped'`))

	// Without auth and without --http-admin the console's actions are off:
	// the page says so and the gateway refuses them.
	b.step(t, "the console says its actions are off", 10*time.Second, chromedp.Poll[chromedp.Void](
		`document.getElementById('console-who').textContent.includes('actions are off')`))
	if res := do(t, http.MethodPost, base+"v1/console/parked/dlq/1/drop", "", ""); res.status != http.StatusForbidden ||
		!strings.Contains(string(res.body), "--http-admin") {
		t.Errorf("a drop without auth nor --http-admin: %d %s, want 403 naming --http-admin", res.status, res.body)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := os.Getenv("AGENTREACH_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))

	b.close()
	if code := u.Stop(t); code != cli.ExitOK {
		t.Fatalf("up exited %d; stderr:\n%s", code, u.stderr.String())
	}
	clitest.CheckNoLeaks(t, before)
}

// TestDashboardWithAuth opens the dashboard of `up --auth --demo` in
// headless Chromium: without a token it shows no data and says how to open
// it; opened as /#token=<token> it lists the demo agents, and the token
// leaves the address bar.
func TestDashboardWithAuth(t *testing.T) {
	chromium(t)
	before := clitest.Goroutines()
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	u := startUp(t, "--nats-listen", listen, "--data-dir", dir, "--auth", "--demo", "--http", httpAddr)
	clitest.WaitOutput(t, u.stdout, "Agent-Reach is up")
	base := "http://" + httpAddr + "/"
	agentIDs := bannerAgents(t, u.stdout.String())
	token := strings.TrimSpace(clitest.RunCmd(t, RunAuth, "--dir", filepath.Join(dir, "auth"), "token", UpCallerIdentity).Stdout)

	b := openBrowser(t)
	if err := chromedp.Do(b.ctx, chromedp.Navigate(base)); err != nil {
		t.Fatalf("open %s in Chromium: %v", base, err)
	}
	b.step(t, "without a token the dashboard says how to open it", 15*time.Second,
		chromedp.Poll[chromedp.Void](`document.getElementById('updated').textContent.includes('#token=')`))
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('#agents tr[data-id]').length`)); err != nil || n != 0 {
		t.Errorf("without a token the dashboard lists %d agents (%v), want none", n, err)
	}
	if err := chromedp.Do(b.ctx, chromedp.Navigate(base+"#token="+token), chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	b.step(t, fmt.Sprintf("with the token the dashboard lists the %d demo agents", len(agentIDs)), 15*time.Second,
		chromedp.WaitVisible(`#health.ok`),
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelectorAll('#agents tr[data-id]').length === %d`, len(agentIDs))))
	if hash, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.hash`)); err != nil || hash != "" {
		t.Errorf("the address bar still holds %q (%v), want the token gone", hash, err)
	}
	b.close()
	if code := u.Stop(t); code != cli.ExitOK {
		t.Fatalf("up exited %d; stderr:\n%s", code, u.stderr.String())
	}
	clitest.CheckNoLeaks(t, before)
}

// browser is a headless Chromium for one test.
type browser struct {
	ctx   context.Context // lives until close: the browser does
	close func()
}

// openBrowser starts headless Chromium; its first action (a Navigate)
// starts the browser process, which close ends.
func openBrowser(t testing.TB) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1100),
		// Without these Chromium reaches out to the network, which this
		// machine refuses.
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	b := &browser{ctx: bctx, close: func() { cancelBrowser(); cancelAlloc() }}
	t.Cleanup(b.close)
	return b
}

// step runs steps within timeout, failing the test with what.
func (b *browser) step(t testing.TB, what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// bannerAgents returns the agent ids the banner of `up --demo` lists,
// sorted.
func bannerAgents(t *testing.T, banner string) []string {
	t.Helper()
	for _, line := range strings.Split(banner, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "agents"); ok {
			ids := strings.Split(strings.TrimSpace(rest), ", ")
			slices.Sort(ids)
			return ids
		}
	}
	t.Fatalf("no agents line in the banner:\n%s", banner)
	return nil
}

// post sends body to url and checks the status.
func post(t *testing.T, url, body string, want int) {
	t.Helper()
	postWith(t, url, body, want)
}

// postWith sends body to url with the headers given as name, value pairs
// and checks the status.
func postWith(t *testing.T, url, body string, want int, hdr ...string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("POST %s: %d, want %d", url, res.StatusCode, want)
	}
}
