package stack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Scale of BenchmarkDashboardAtScale: the figure.
const (
	scaleAgents       = 1000
	scaleCapabilities = 200
	scaleCallers      = 20
	scaleRecords      = 20_000
)

// BenchmarkDashboardAtScale measures the dashboard against `up` with
// 1,000 registered instances over 200 capabilities and 20,000 records in
// REACH_EVENTS (20 callers): "load-ms" is the time from opening the page
// in headless Chromium to every instance listed and the topology drawn;
// "refresh-cpu-ms" the CPU time (this process: the dispatcher, its
// gateway and the embedded NATS server) of one second of the page's
// polling — /healthz and /v1/agents every second, /v1/stats every
// second one and with its series every tenth, the topology every fifth, the
// parked lists, the policy and the catalog every tenth (as the page does) — so "refresh-cpu-%" is
// the dispatcher's CPU share of an open page. A figure, not an assertion:
// `go test -run ^$ -bench DashboardAtScale -benchtime 20x
// ./cmd/agentreach/internal/stack/`.
func BenchmarkDashboardAtScale(b *testing.B) {
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(b))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(b))
	upCtx, stop := context.WithCancel(context.Background())
	stdout, stderr, done := new(clitest.SyncBuffer), new(clitest.SyncBuffer), make(chan int, 1)
	go func() {
		done <- RunUp(upCtx, []string{"--nats-listen", listen, "--data-dir", b.TempDir(), "--http", httpAddr, "--log-level", "warn"}, stdout, stderr)
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Error("up did not stop within 30s")
		}
	}()
	natstest.WaitFor(b, time.Minute, func() error {
		if !strings.Contains(stdout.String(), "Agent-Reach is up") {
			return fmt.Errorf("up is not up: %s", stderr.String())
		}
		return nil
	})
	base := "http://" + httpAddr + "/"

	nc, err := nats.Connect("nats://" + listen)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := registry.Open(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	for i := range scaleAgents {
		c := fmt.Sprintf("cap%03d.work", i%scaleCapabilities)
		rec := registry.Record{ID: fmt.Sprintf("agent-%04d", i), Type: fmt.Sprintf("type%03d", i%scaleCapabilities),
			Capabilities: []string{c}, MaxConcurrent: 8, Active: i % 9, Status: registry.StatusReady,
			HeartbeatMS: streams.DefaultHeartbeat.Milliseconds()}
		hb, err := registry.NewHeartbeat(reg, rec, zerolog.Nop())
		if err != nil {
			b.Fatal(err)
		}
		if err := hb.Start(ctx); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = hb.Stop(context.Background(), true) }()
	}
	now := time.Now()
	for i := range scaleRecords {
		agent := i % scaleAgents
		ev := events.Event{RequestID: "r" + strconv.Itoa(i), Source: fmt.Sprintf("caller-%02d", i%scaleCallers),
			Capability: fmt.Sprintf("cap%03d.work", agent%scaleCapabilities), Tier: "direct", Dispatcher: "bench",
			Status: "FINISHED", Outcome: "reply", Node: fmt.Sprintf("agent-%04d", agent), Attempts: 1, LatencyMS: float64(i % 50),
			Start: now.Add(-time.Duration(i) * 100 * time.Millisecond)}
		if i%50 == 0 {
			ev.Status, ev.Code, ev.Error = "FAILED", "INTERNAL", "boom"
		}
		m := nats.NewMsg(streams.Subjects{}.Event(ev.Capability))
		m.Header.Set(events.HeaderEvents, "1")
		m.Data = events.Append(nil, &ev)
		if _, err := js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	get := func(path string) {
		res, err := http.Get(base + path)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	natstest.WaitFor(b, time.Minute, func() error {
		res, err := http.Get(base + "healthz")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if want := fmt.Sprintf(`"registered_agents":%d`, scaleAgents); !strings.Contains(string(body), want) {
			return fmt.Errorf("healthz %s, want %s", body, want)
		}
		return nil
	})

	br := openBrowser(b)
	if err := chromedp.Do(br.ctx, chromedp.Navigate("about:blank")); err != nil { // starts the browser
		b.Fatal(err)
	}
	if _, err := chromedp.Call(br.ctx, performance.Enable, performance.EnableParams{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := chromedp.Do(br.ctx, chromedp.Navigate(base)); err != nil {
		b.Fatal(err)
	}
	br.step(b, "the page lists every instance and draws the topology", time.Minute, chromedp.Poll[chromedp.Void](fmt.Sprintf(
		`document.querySelectorAll('#agents tr[data-id]').length === %d && document.querySelectorAll('#topo g.node.instance').length === 200`, scaleAgents)))
	load := time.Since(start)
	if ms, err := chromedp.Call(br.ctx, performance.GetMetrics, cdp.Empty{}); err == nil {
		var line []string
		for _, m := range ms.Metrics {
			if strings.HasSuffix(m.Name, "Duration") || m.Name == "Nodes" || m.Name == "LayoutCount" || m.Name == "RecalcStyleCount" {
				line = append(line, fmt.Sprintf("%s=%.3f", m.Name, m.Value))
			}
		}
		b.Logf("the browser's work for the load (seconds; Performance.getMetrics): %s", strings.Join(line, " "))
	}
	br.close()

	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, path := range []string{"healthz", "v1/agents", "v1/stats", "v1/stats?series=10m", "v1/console/topology?since=15m", "v1/console/parked/dlq",
		"v1/console/policy", "v1/console/catalog"} {
		at := cpu()
		for range 10 {
			get(path)
		}
		b.Logf("GET /%s: %v of CPU", path, ((cpu() - at) / 10).Round(10*time.Microsecond))
	}
	b.ResetTimer()
	before := cpu()
	for i := range b.N {
		get("healthz")
		get("v1/agents")
		switch {
		case i%10 == 0:
			get("v1/stats?series=10m")
		case i%2 == 0:
			get("v1/stats")
		}
		if i%5 == 0 {
			get("v1/console/topology?since=15m")
		}
		if i%10 == 0 {
			get("v1/console/whoami")
			get("v1/console/parked/dlq")
			get("v1/console/parked/review")
			get("v1/console/actions")
			get("v1/console/policy")
			get("v1/console/catalog")
		}
	}
	perRefresh := (cpu() - before) / time.Duration(b.N)
	b.StopTimer()
	b.ReportMetric(float64(load.Milliseconds()), "load-ms")
	b.ReportMetric(float64(perRefresh.Microseconds())/1000, "refresh-cpu-ms")
	b.ReportMetric(float64(perRefresh.Microseconds())/10_000, "refresh-cpu-%")
	b.Logf("1,000 agents, 200 capabilities, %d records: the page loaded in %v; one second of its polling costs %v of CPU (%.2f %% of a core)",
		scaleRecords, load.Round(time.Millisecond), perRefresh.Round(10*time.Microsecond), float64(perRefresh)/float64(time.Second)*100)
}
