package tiers

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/metrics"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

const (
	mcpCapabilities = 1000 // registered while list_changed is measured
	mcpListeners    = 100  // clients waiting for list_changed
	mcpJoins        = 5    // agents joining, each one notification per client (2 in quick mode)
)

// MCP measures, on one stack (echo agents, a dispatcher, its gateway):
//
//   - tools/call of echo over /mcp (2026-07-28, stateless, one POST per
//     call) against POST /v1/call/echo, at 64 callers in closed loops, in
//     alternating rounds: mcp_throughput_ratio, goal ≥ 0.6;
//   - with 1,000 capabilities registered, the time from an agent's
//     registration to notifications/tools/list_changed at each of 100
//     connected clients (the Go SDK's, each with its subscriptions/listen
//     stream): mcp_list_changed_p99_ms, goal ≤ 1,000.
func MCP(r *harness.Run) error {
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	agents, err := r.StartAgents(e, []string{harness.EchoCapability}, "echo", harness.OverheadAgents, 1024, echoHandler)
	if err != nil {
		return err
	}
	defer agents.Stop()
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		return err
	}
	ds, err := startObservedDispatcher(r, e, &switchObserver{m: m}, m)
	if err != nil {
		return err
	}
	defer ds.Stop()
	gw, err := gateway.New(ds.NC, ds.D, gateway.Config{})
	if err == nil {
		err = gw.Listen("127.0.0.1:0")
	}
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer func() { _ = gw.Shutdown(context.Background()) }()
	addr := gw.Addr().String()

	payload := []byte(`{"text":"hello, agent"}`)
	callReq := []byte(fmt.Sprintf("POST /v1/call/%s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		harness.EchoCapability, addr, streams.ContentTypeJSON, len(payload), payload))
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello, agent"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	mcpReq := []byte(fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\n"+
		"Mcp-Name: echo\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body))

	dur := harness.Pick(r, 4*time.Second, 400*time.Millisecond)
	const timeout = 2 * time.Second
	if _, err := closedLoop(r, addr, mcpReq, mcpFailure, "warm-up mcp", dur/2, timeout); err != nil {
		return err
	}
	if _, err := closedLoop(r, addr, callReq, httpFailure, "warm-up http", dur/2, timeout); err != nil {
		return err
	}
	rounds := harness.Pick(r, httpRounds, 1)
	httpRes, mcpRes := harness.NewLatency(), harness.NewLatency()
	for round := range rounds {
		of := fmt.Sprintf("round %d of %d", round+1, rounds)
		l, err := closedLoop(r, addr, callReq, httpFailure, "http, "+of, dur, timeout)
		if err != nil {
			return err
		}
		httpRes.Add(l)
		if l, err = closedLoop(r, addr, mcpReq, mcpFailure, "mcp, "+of, dur, timeout); err != nil {
			return err
		}
		mcpRes.Add(l)
	}
	callRatio := harness.Ratio(mcpRes.RPS(), httpRes.RPS())
	r.Set("mcp_http_rps", httpRes.RPS())
	r.Set("mcp_rps", mcpRes.RPS())
	r.Set("mcp_throughput_ratio", callRatio)
	r.Set("mcp_p50_ms", harness.Millis(mcpRes.P(50)))
	r.Set("mcp_p99_ms", harness.Millis(mcpRes.P(99)))
	r.Set("mcp_failed", float64(mcpRes.Failed()))
	r.Set("mcp_http_p50_ms", harness.Millis(httpRes.P(50)))
	r.Set("mcp_cpu_us_per_call", cpuPerTask(mcpRes))
	r.Set("mcp_http_cpu_us_per_call", cpuPerTask(httpRes))

	// list_changed: 1,000 capabilities, 100 clients, agents joining.
	many := make([]string, mcpCapabilities)
	for i := range many {
		many[i] = fmt.Sprintf("bench.cap%04d", i)
	}
	wide, err := r.StartAgents(e, many, "wide", 1, 8, echoHandler)
	if err != nil {
		return err
	}
	defer wide.Stop()
	if err := r.WaitRoutable(ds, many[len(many)-1], 1); err != nil {
		return err
	}
	lat, listed, err := listChanged(r, e, ds, "http://"+addr+"/mcp", harness.Pick(r, mcpJoins, 2))
	if err != nil {
		return err
	}
	r.Set("mcp_list_changed_clients", mcpListeners)
	r.Set("mcp_list_changed_capabilities", float64(listed))
	r.Set("mcp_list_changed_p50_ms", harness.Millis(lat.P(50)))
	r.Set("mcp_list_changed_p99_ms", harness.Millis(lat.P(99)))
	r.Set("mcp_list_changed_max_ms", harness.Millis(lat.P(100)))
	r.Set("mcp_list_changed_missed", float64(lat.Failed()))

	r.AddTable(fmt.Sprintf("MCP at /mcp, %d callers, %d rounds of %v", httpCallers, rounds, dur),
		[]string{"path", "rps", "p50 ms", "p99 ms", "failed", "cpu µs/call"}, [][]string{
			latencyRow("HTTP POST /v1/call/echo", httpRes),
			latencyRow("MCP tools/call echo", mcpRes),
		})
	r.AddTable(fmt.Sprintf("tools/list_changed, %d clients, %d tools", mcpListeners, listed),
		[]string{"p50 ms", "p99 ms", "max ms", "missed"}, [][]string{
			{harness.Cell(harness.Millis(lat.P(50))), harness.Cell(harness.Millis(lat.P(99))), harness.Cell(harness.Millis(lat.P(100))), fmt.Sprint(lat.Failed())}})
	r.Note("Both call paths go through the same gateway, dispatcher and agents, on keep-alive connections from a minimal "+
		"HTTP/1.1 client (one per caller); an MCP call is one stateless POST of the 2026-07-28 revision (answered as JSON "+
		"by the bridge's direct path for a well-formed tools/call), counted failed when its result has isError. list_changed: the time from an agent's Start "+
		"returning (its record stored) to each client's handler, %d clients of the Go SDK each holding a "+
		"subscriptions/listen stream; a client that got none within 10 s counts as missed.", mcpListeners)
	r.Goal("mcp_throughput", fmt.Sprintf("MCP tools/call throughput at %d callers is ≥ 0.6 of POST /v1/call (%.2f)", httpCallers, callRatio), callRatio >= 0.6)
	p99 := lat.P(99)
	r.Goal("mcp_list_changed", fmt.Sprintf("list_changed reaches %d clients within 1 s, p99 (%.0f ms)", mcpListeners, harness.Millis(p99)),
		p99 <= time.Second && lat.Failed() == 0)
	return nil
}

// listChanged connects mcpListeners clients to url, then starts joins
// agents one after another, each with a capability of its own, and
// records for each client the time from the agent's registration to its
// notification. It returns the latencies and how many tools a client
// listed at the start.
func listChanged(r *harness.Run, e *harness.Env, ds *harness.Dispatch, url string, joins int) (*harness.Latency, int, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: mcpListeners}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var at atomic.Pointer[time.Time] // when the current join registered
	got := make(chan time.Duration, mcpListeners*2)
	sessions := make([]*sdk.ClientSession, 0, mcpListeners)
	defer func() {
		for _, cs := range sessions {
			_ = cs.Close()
		}
	}()
	r.Prog.Begin("mcp clients connecting", func() string { return fmt.Sprintf("%d of %d", len(sessions), mcpListeners) })
	for range mcpListeners {
		c := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, &sdk.ClientOptions{
			ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
				if t0 := at.Load(); t0 != nil {
					got <- time.Since(*t0)
				}
			}})
		ctx, cancel := context.WithTimeout(r.Ctx, 10*time.Second)
		cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("mcp client: %w", err)
		}
		sessions = append(sessions, cs)
	}
	listed := 0
	ctx, cancel := context.WithTimeout(r.Ctx, 30*time.Second)
	for _, err := range sessions[0].Tools(ctx, nil) {
		if err != nil {
			cancel()
			return nil, 0, err
		}
		listed++
	}
	cancel()
	res := harness.NewLatency()
	for j := range joins {
		r.Prog.Begin(fmt.Sprintf("agent %d of %d joining", j+1, joins), nil)
		t0 := time.Now()
		at.Store(&t0)
		set, err := r.StartAgents(e, []string{fmt.Sprintf("late.join%d", j)}, fmt.Sprintf("late%d", j), 1, 8, echoHandler)
		if err != nil {
			return nil, 0, err
		}
		// From the registration on: Start returned once the record was stored.
		reg := time.Now()
		at.Store(&reg)
		var lats []time.Duration
		wait := time.After(10 * time.Second)
	collect:
		for len(lats) < mcpListeners {
			select {
			case d := <-got:
				lats = append(lats, d)
			case <-wait:
				break collect
			case <-r.Ctx.Done():
				set.Stop()
				return nil, 0, r.Ctx.Err()
			}
		}
		for _, d := range lats {
			res.OK++
			_ = res.Hist.RecordValue(max(d.Microseconds(), 1))
		}
		res.Timeouts += int64(mcpListeners - len(lats))
		at.Store(nil)
		set.Stop() // leaves: one more notification each, not counted
		if !r.Poll(10*time.Second, func() bool { return ds.D.Table().Candidates(fmt.Sprintf("late.join%d", j)).Len() == 0 }) {
			return nil, 0, fmt.Errorf("agent %d did not leave", j)
		}
		drain(got)
	}
	return res, listed, nil
}

// drain empties ch of what it holds now, after the leave's notifications
// had a moment to arrive.
func drain(ch chan time.Duration) {
	timer := time.NewTimer(200 * time.Millisecond)
	defer timer.Stop()
	for {
		select {
		case <-ch:
		case <-timer.C:
			return
		}
	}
}

// mcpFailure is httpFailure, and an MCP result with isError a failure too.
func mcpFailure(status int, body []byte) string {
	if code := httpFailure(status, body); code != "" {
		return code
	}
	if bytes.Contains(body, []byte(`"isError":true`)) {
		return "isError"
	}
	return ""
}
