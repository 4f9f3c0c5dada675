package tiers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/agentkit/connect"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

// ScenarioConnect is a call through the MCP connector (caller → dispatcher
// → connector → MCP server) against a direct call of the same MCP server
// by an MCP client (issue 29).
const ScenarioConnect = "connect"

// connectGoal is issue 29's bound on the p50 ratio.
const connectGoal = 1.5

type connectEchoIn struct {
	Text string `json:"text"`
}

type connectEchoOut struct {
	Text string `json:"text"`
}

// Connect measures one caller at a time, the methods taking turns in
// rounds, against two servers: one written with the Go SDK (streamable HTTP
// on loopback, its tool doing nothing: the connector's whole cost shows)
// and, when a Python with fastmcp 4.1.6 is found ($AGENTREACH_PYTHON or
// ./.venv), the fastmcp server of the connector's tests on stdio (a
// process of its own for each client, as stdio servers are).
func Connect(r *harness.Run) error {
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	ds, err := r.StartDispatcher(e, config.Config{}, false)
	if err != nil {
		return err
	}
	defer ds.Stop()
	cnc, err := e.Connect("connect-caller")
	if err != nil {
		return err
	}
	caller, err := agentkit.NewClient(cnc, agentkit.WithJSON())
	if err != nil {
		return err
	}

	srv := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in connectEchoIn) (*mcp.CallToolResult, connectEchoOut, error) {
			return nil, connectEchoOut(in), nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer func() {
		_ = hs.Close()
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	}()
	url := "http://" + ln.Addr().String()

	type pair struct {
		key, label      string
		direct, through func() error
	}
	var pairs []pair
	goPair, stopGo, err := connectPair(r, e, ds, caller, "bgo", &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: 1},
		connect.MCPConfig{URL: url}, `{"text":"ping"}`, "echo")
	if err != nil {
		return err
	}
	defer stopGo()
	pairs = append(pairs, pair{"go", "Go SDK server, streamable HTTP (an empty tool)", goPair[0], goPair[1]})
	if py, script, ok := fastmcpServer(); ok {
		direct := &mcp.CommandTransport{Command: exec.CommandContext(r.Ctx, py, script), TerminateDuration: time.Second}
		fmPair, stopFM, err := connectPair(r, e, ds, caller, "bfm", direct, connect.MCPConfig{Command: []string{py, script}}, `{"a":2,"b":3}`, "add")
		if err != nil {
			return err
		}
		defer stopFM()
		pairs = append(pairs, pair{"fastmcp", "fastmcp 4.1.6 server, stdio (add)", fmPair[0], fmPair[1]})
	} else {
		r.Note("fastmcp: no Python with fastmcp 4.1.6 ($AGENTREACH_PYTHON or ./.venv: make pytest builds it), so only the Go SDK server was measured")
	}

	rounds := harness.Pick(r, 5, 2)
	dur := harness.Pick(r, 2*time.Second, 400*time.Millisecond)
	var rows [][]string
	for i, p := range pairs {
		hd, ht := harness.NewHist(), harness.NewHist()
		for k := range harness.Pick(r, 200, 20) { // warm-up
			if err := p.direct(); err != nil {
				return fmt.Errorf("%s direct warm-up call %d: %w", p.key, k, err)
			}
			if err := p.through(); err != nil {
				return fmt.Errorf("%s connector warm-up call %d: %w", p.key, k, err)
			}
		}
		for round := range rounds {
			for _, m := range []struct {
				name string
				call func() error
				h    *hdrhistogram.Histogram
			}{{"direct", p.direct, hd}, {"connector", p.through, ht}} {
				r.Prog.Begin(fmt.Sprintf("connect: %s %s, round %d/%d", p.key, m.name, round+1, rounds), nil)
				end := time.Now().Add(dur)
				for time.Now().Before(end) {
					if err := r.Ctx.Err(); err != nil {
						return err
					}
					t0 := time.Now()
					if err := m.call(); err != nil {
						return fmt.Errorf("%s %s call: %w", p.key, m.name, err)
					}
					_ = m.h.RecordValue(time.Since(t0).Microseconds())
				}
			}
		}
		d50, t50 := float64(hd.ValueAtQuantile(50)), float64(ht.ValueAtQuantile(50))
		d99, t99 := float64(hd.ValueAtQuantile(99)), float64(ht.ValueAtQuantile(99))
		r.Set(p.key+"_direct_p50_us", d50)
		r.Set(p.key+"_connector_p50_us", t50)
		r.Set(p.key+"_direct_p99_us", d99)
		r.Set(p.key+"_connector_p99_us", t99)
		r.Set(p.key+"_p50_ratio", harness.Ratio(t50, d50))
		r.Set(p.key+"_calls", float64(hd.TotalCount()+ht.TotalCount()))
		rows = append(rows, []string{p.label, harness.Cell(d50), harness.Cell(t50), harness.Cell(harness.Ratio(t50, d50)), harness.Cell(d99), harness.Cell(t99)})
		r.Logf("connect %s: direct p50 %.0f µs, through the connector %.0f µs", p.key, d50, t50)
		if i == len(pairs)-1 {
			r.Set("mcp_connector_p50_ratio", harness.Ratio(t50, d50))
		}
	}
	r.AddTable("MCP connector: one caller, sequential calls (µs)",
		[]string{"server", "direct p50", "connector p50", "ratio", "direct p99", "connector p99"}, rows)
	last := pairs[len(pairs)-1]
	got := r.Rep.Figures["mcp_connector_p50_ratio"]
	r.Goal("mcp_connector_p50", fmt.Sprintf("a call through the MCP connector / a direct call to the same MCP server (%s): p50 ratio %.2f ≤ %.1f",
		last.label, got, connectGoal), got > 0 && got <= connectGoal)
	r.Note("Direct: an MCP client (the Go SDK's) calls the tool. Through the connector: an agentkit client calls <name>.<tool> " +
		"through a dispatcher (schema check, routing), the connector's agent calls the tool with the same SDK over the same " +
		"transport, and the result comes back. The connector adds two NATS hops and the dispatcher; against an empty tool " +
		"(the Go SDK row) that is all there is to measure, so its ratio is the worst case; a tool that does any work hides it.")
	return nil
}

// connectPair starts a connector called name for cfg's upstream and a
// direct client session over direct; it returns the direct call and the
// call through the connector, each of tool with args.
func connectPair(r *harness.Run, e *harness.Env, ds *harness.Dispatch, caller *agentkit.Client, name string, direct mcp.Transport,
	cfg connect.MCPConfig, args, tool string) ([2]func() error, func(), error) {
	var calls [2]func() error
	client := mcp.NewClient(&mcp.Implementation{Name: "bench-direct", Version: "1"}, nil)
	sctx, cancel := context.WithTimeout(r.Ctx, 60*time.Second)
	defer cancel()
	cs, err := client.Connect(sctx, direct, nil)
	if err != nil {
		return calls, nil, fmt.Errorf("direct session: %w", err)
	}
	nc, err := e.Connect(name)
	if err != nil {
		_ = cs.Close()
		return calls, nil, err
	}
	log := zerolog.Nop()
	cfg.Name, cfg.Log = name, &log
	ready := make(chan struct{}, 1)
	cfg.OnServe = func(caps []string) {
		if caps != nil {
			select {
			case ready <- struct{}{}:
			default:
			}
		}
	}
	c, err := connect.NewMCP(nc, cfg)
	if err != nil {
		_ = cs.Close()
		return calls, nil, err
	}
	cctx, stopC := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	stop := func() {
		stopC()
		<-done
		_ = cs.Close()
	}
	select {
	case <-ready:
	case err := <-done:
		stopC()
		_ = cs.Close()
		return calls, nil, fmt.Errorf("connector %s: %v", name, err)
	case <-sctx.Done():
		stop()
		return calls, nil, fmt.Errorf("connector %s did not serve within 60 s", name)
	}
	capability := name + "." + tool
	if err := r.WaitRoutable(ds, capability, 1); err != nil {
		stop()
		return calls, nil, err
	}
	var argMap map[string]any
	if err := json.Unmarshal([]byte(args), &argMap); err != nil {
		stop()
		return calls, nil, err
	}
	raw := json.RawMessage(args)
	calls[0] = func() error {
		ctx, cancel := context.WithTimeout(r.Ctx, 10*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: argMap})
		if err == nil && res.IsError {
			err = errors.New("isError")
		}
		return err
	}
	calls[1] = func() error {
		ctx, cancel := context.WithTimeout(r.Ctx, 10*time.Second)
		defer cancel()
		_, err := caller.Call(ctx, capability, raw, agentkit.WithTimeout(10*time.Second))
		return err
	}
	return calls, stop, nil
}

// fastmcpServer finds a Python with fastmcp 4.1.6 and the connector tests'
// fastmcp server script.
func fastmcpServer() (python, script string, ok bool) {
	wd, err := os.Getwd()
	if err != nil {
		return "", "", false
	}
	// From the repository root (make bench) or a package directory (go test).
	for dir := wd; ; dir = filepath.Dir(dir) {
		s := filepath.Join(dir, "agentkit", "connect", "testdata", "fastmcp_server.py")
		if _, err := os.Stat(s); err == nil {
			script = s
			python = os.Getenv("AGENTREACH_PYTHON")
			if python == "" {
				python = filepath.Join(dir, ".venv", "bin", "python")
			}
			break
		}
		if filepath.Dir(dir) == dir {
			return "", "", false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", "import fastmcp; print(fastmcp.__version__)").Output()
	if err != nil || strings.TrimSpace(string(out)) != "4.1.6" {
		return "", "", false
	}
	return python, script, true
}
