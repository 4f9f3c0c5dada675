package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/agentkit/connect"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// FastMCPPython returns a Python that has fastmcp 4.1.6, the third-party
// MCP server the connector is tested against: $AGENTREACH_PYTHON (which
// `make test` sets to ./.venv's, where it is pinned; then a missing fastmcp
// fails the test), else ./.venv's when it has it, else the test is skipped.
func FastMCPPython(tb testing.TB) string {
	tb.Helper()
	py, required := os.Getenv("AGENTREACH_PYTHON"), true
	if py == "" {
		root, _ := filepath.Abs("..")
		py, required = filepath.Join(root, ".venv", "bin", "python"), false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", "import fastmcp; print(fastmcp.__version__)").CombinedOutput()
	if v := strings.TrimSpace(string(out)); err != nil || v != "4.1.6" {
		msg := fmt.Sprintf("%s has no fastmcp 4.1.6 (%v: %s); make pytest builds ./.venv with it", py, err, v)
		if required {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return py
}

// runMCP runs an MCP connector until the test ends; what it serves comes
// on the channel (nil when it leaves).
func runMCP(tb testing.TB, st *Stack, cfg connect.MCPConfig) (*connect.MCP, <-chan []string) {
	tb.Helper()
	served := make(chan []string, 64)
	cfg.OnServe = func(caps []string) { served <- caps }
	if cfg.Agent.Heartbeat == 0 {
		cfg.Agent.Heartbeat = st.Heartbeat
	}
	cfg.Agent.DrainTimeout = 5 * time.Second
	log := st.log
	cfg.Log = &log
	c, err := connect.NewMCP(st.Conn(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("connector %s: %v", cfg.Name, err)
		}
	})
	return c, served
}

// nextServed waits for the connector's next change of what it serves.
func nextServed(tb testing.TB, served <-chan []string) []string {
	tb.Helper()
	select {
	case caps := <-served:
		return caps
	case <-time.After(90 * time.Second):
		tb.Fatal("the connector did not change what it serves within 90 s")
		return nil
	}
}

// callJSON calls capability with payload through the dispatchers and
// returns the result as JSON text.
func callJSON(tb testing.TB, c *agentkit.Client, capability, payload string, opts ...agentkit.CallOption) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Call(ctx, capability, json.RawMessage(payload), append(opts, agentkit.WithTimeout(20*time.Second))...)
	if err != nil {
		return "", err
	}
	return string(res.Data), nil
}

// waitDeclared waits until d's catalog holds typ's declaration with
// capability.
func waitDeclared(tb testing.TB, d *dispatcher.Dispatcher, typ, capability string) declare.DeclaredCapability {
	tb.Helper()
	var found declare.DeclaredCapability
	natstest.WaitFor(tb, 10*time.Second, func() error {
		cd, ok := d.Catalog().Lookup(typ)
		if !ok {
			return fmt.Errorf("no declaration of %s", typ)
		}
		c, ok := cd.Capability(capability)
		if !ok {
			return fmt.Errorf("the declaration of %s has no %s", typ, capability)
		}
		found = *c
		return nil
	})
	return found
}

func TestMCPConnectorServesAFastMCPServer(t *testing.T) {
	py := FastMCPPython(t)
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	_, served := runMCP(t, st, connect.MCPConfig{Name: "fm", Command: []string{py, "../agentkit/connect/testdata/fastmcp_server.py"}})
	want := []string{"fm.add", "fm.fail", "fm.get_weather", "fm.greet", "fm.unlock"}
	if got := nextServed(t, served); !slices.Equal(got, want) {
		t.Fatalf("serves %v, want %v", got, want)
	}
	WaitRoutable(t, "fm.add", 1, d)
	weather := waitDeclared(t, d, "fm", "fm.get_weather")
	if weather.Mode != declare.ModeRead || !weather.Idempotent || !strings.Contains(string(weather.InputSchema), `"city"`) {
		t.Errorf("fm.get_weather declared %+v, want read-only, idempotent, its input schema", weather)
	}
	if add := waitDeclared(t, d, "fm", "fm.add"); add.Mode != "" || add.Description != "Adds two integers." {
		t.Errorf("fm.add declared %+v, want no mode (no annotations) and the tool's description", add)
	}
	c := st.Client(agentkit.WithJSON())
	for _, x := range []struct{ capability, payload, want string }{
		{"fm.add", `{"a":2,"b":3}`, `{"result":5}`},
		{"fm.get_weather", `{"city":"Oslo"}`, `{"city":"Oslo","sky":"clear","celsius":21}`},
		{"fm.greet", `{"name":"Ada"}`, `{"text":"hello, Ada"}`},
	} {
		got, err := callJSON(t, c, x.capability, x.payload)
		if err != nil || !jsonEqual(got, x.want) {
			t.Errorf("%s %s: %s, %v; want %s", x.capability, x.payload, got, err, x.want)
		}
	}
	// A tool's error is a business rejection with its text; arguments the
	// schema refuses are BAD_REQUEST naming the field, before the server.
	if _, err := callJSON(t, c, "fm.fail", `{"reason":"out of paper"}`); !errors.Is(err, streams.ErrBizReject) || !strings.Contains(err.Error(), "out of paper") {
		t.Errorf("fm.fail: %v, want BIZ_REJECT with the tool's text", err)
	}
	if _, err := callJSON(t, c, "fm.add", `{"a":"two","b":3}`); !errors.Is(err, streams.ErrBadRequest) || !strings.Contains(err.Error(), "a") {
		t.Errorf("fm.add with a string: %v, want BAD_REQUEST naming a", err)
	}
	// The server's tool list changes: the connector redeclares, and the new
	// tool is routed.
	if got, err := callJSON(t, c, "fm.unlock", `{}`); err != nil || got != `{"text":"unlocked"}` && got != `{"result":"unlocked"}` {
		t.Fatalf("fm.unlock: %s, %v", got, err)
	}
	if got := nextServed(t, served); !slices.Contains(got, "fm.secret") || len(got) != len(want)+1 {
		t.Fatalf("after list_changed it serves %v, want fm.secret too", got)
	}
	WaitRoutable(t, "fm.secret", 1, d)
	waitDeclared(t, d, "fm", "fm.secret")
	if got, err := callJSON(t, c, "fm.secret", `{}`); err != nil || !jsonEqual(got, `{"result":"42"}`) && got != "42" {
		t.Errorf("fm.secret: %s, %v", got, err)
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// goUpstream is an MCP server written with the Go SDK, served over
// streamable HTTP on a listener the test can close and open again.
type goUpstream struct {
	name   string
	server *mcp.Server
	addr   string
	mu     sync.Mutex
	http   *httptest.Server
}

type mcpEchoIn struct {
	Text string `json:"text"`
}

type mcpEchoOut struct {
	Text   string `json:"text"`
	Server string `json:"server"`
}

func newGoUpstream(tb testing.TB, name string) *goUpstream {
	tb.Helper()
	u := &goUpstream{name: name, server: mcp.NewServer(&mcp.Implementation{Name: "go-upstream", Version: "1.0"}, nil)}
	mcp.AddTool(u.server, &mcp.Tool{Name: "echo", Description: "Echoes its text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in mcpEchoIn) (*mcp.CallToolResult, mcpEchoOut, error) {
			return nil, mcpEchoOut{Text: in.Text, Server: name}, nil
		})
	u.start(tb, "127.0.0.1:0")
	tb.Cleanup(u.stop)
	return u
}

func (u *goUpstream) start(tb testing.TB, addr string) {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.server }, nil))
	hs.Listener = ln
	hs.Start()
	u.mu.Lock()
	u.http, u.addr = hs, ln.Addr().String()
	u.mu.Unlock()
}

// stop kills the server: every connection is cut, nothing answers.
func (u *goUpstream) stop() {
	u.mu.Lock()
	hs := u.http
	u.http = nil
	u.mu.Unlock()
	if hs != nil {
		hs.CloseClientConnections()
		hs.Close()
	}
	for ss := range u.server.Sessions() { // what a dead process would not keep either
		_ = ss.Close()
	}
}

func (u *goUpstream) url() string { return "http://" + u.addr }

func TestMCPConnectorFollowsAGoSDKServerAndLeavesWhenItDies(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	a, b := newGoUpstream(t, "a"), newGoUpstream(t, "b")
	httpClient := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(httpClient.CloseIdleConnections)
	_, servedA := runMCP(t, st, connect.MCPConfig{Name: "gs", URL: a.url(), HTTPClient: httpClient, Agent: agentkit.Config{ID: "gs-a"},
		PingInterval: 250 * time.Millisecond, RetryMin: 50 * time.Millisecond, RetryMax: 250 * time.Millisecond})
	_, servedB := runMCP(t, st, connect.MCPConfig{Name: "gs", URL: b.url(), HTTPClient: httpClient, Agent: agentkit.Config{ID: "gs-b"},
		PingInterval: 250 * time.Millisecond})
	for _, s := range []<-chan []string{servedA, servedB} {
		if got := nextServed(t, s); !slices.Equal(got, []string{"gs.echo"}) {
			t.Fatalf("serves %v, want [gs.echo]", got)
		}
	}
	WaitRoutable(t, "gs.echo", 2, d)
	c := st.Client(agentkit.WithJSON())
	for id, server := range map[string]string{"gs-a": "a", "gs-b": "b"} {
		got, err := callJSON(t, c, "gs.echo", `{"text":"hi"}`, agentkit.ToAgent(id))
		if err != nil || !jsonEqual(got, `{"text":"hi","server":"`+server+`"}`) {
			t.Errorf("gs.echo on %s: %s, %v", id, got, err)
		}
	}
	if echo := waitDeclared(t, d, "gs", "gs.echo"); echo.Mode != declare.ModeRead || len(echo.OutputSchema) == 0 {
		t.Errorf("gs.echo declared %+v, want read-only with the tool's output schema", echo)
	}

	// A tool added on both servers: each connector follows list_changed.
	for _, u := range []*goUpstream{a, b} {
		u.server.AddTool(&mcp.Tool{Name: "shout", InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "HEY"}}}, nil
			})
	}
	for _, s := range []<-chan []string{servedA, servedB} {
		if got := nextServed(t, s); !slices.Equal(got, []string{"gs.echo", "gs.shout"}) {
			t.Fatalf("after list_changed: serves %v, want gs.echo and gs.shout", got)
		}
	}
	WaitRoutable(t, "gs.shout", 2, d)
	if got, err := callJSON(t, c, "gs.shout", `{}`); err != nil || got != `{"text":"HEY"}` {
		t.Errorf("gs.shout: %s, %v", got, err)
	}

	// Upstream a dies: its instance leaves; b's keeps serving every call.
	addr := a.addr
	a.stop()
	if got := nextServed(t, servedA); got != nil {
		t.Fatalf("after its upstream died, instance gs-a serves %v, want it gone", got)
	}
	WaitRoutable(t, "gs.echo", 1, d)
	for range 10 {
		got, err := callJSON(t, c, "gs.echo", `{"text":"still"}`)
		if err != nil || !jsonEqual(got, `{"text":"still","server":"b"}`) {
			t.Fatalf("gs.echo with a dead: %s, %v; want b's answer", got, err)
		}
	}
	select {
	case got := <-servedB:
		t.Errorf("instance gs-b changed to %v when a died", got)
	default:
	}
	// It comes back on the same address: the instance joins again.
	a.start(t, addr)
	if got := nextServed(t, servedA); !slices.Equal(got, []string{"gs.echo", "gs.shout"}) {
		t.Fatalf("after its upstream came back, gs-a serves %v", got)
	}
	WaitRoutable(t, "gs.echo", 2, d)
	if got, err := callJSON(t, c, "gs.echo", `{"text":"back"}`, agentkit.ToAgent("gs-a")); err != nil || !jsonEqual(got, `{"text":"back","server":"a"}`) {
		t.Errorf("gs.echo on gs-a again: %s, %v", got, err)
	}
}

// rawUpstream is an MCP server written by hand (JSON over HTTP, the
// 2025-11-25 revision) that sends what SDKs would refuse to: tools with
// schemas that do not compile and names given twice.
func rawUpstream(tb testing.TB, tools string) string {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &req) != nil || req.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result string
		switch req.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"0.1"}}`
		case "tools/list":
			result = `{"tools":` + tools + `}`
		case "tools/call":
			result = `{"content":[{"type":"text","text":"called ` + req.Params.Name + `"}]}`
		case "ping":
			result = `{}`
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, req.ID)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

func TestMCPConnectorSkipsBadToolsAndServesTheRest(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	url := rawUpstream(t, `[
		{"name":"good","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}}},
		{"name":"twice","inputSchema":{"type":"object"}},
		{"name":"twice","inputSchema":{"type":"object"}},
		{"name":"broken","inputSchema":{"type":"object","properties":{"n":{"type":7}}}},
		{"name":"bad..name","inputSchema":{"type":"object"}}]`)
	httpClient := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(httpClient.CloseIdleConnections)
	conn, served := runMCP(t, st, connect.MCPConfig{Name: "raw", URL: url, HTTPClient: httpClient})
	if got := nextServed(t, served); !slices.Equal(got, []string{"raw.good"}) {
		t.Fatalf("serves %v, want only raw.good", got)
	}
	reasons := map[string]string{}
	for _, s := range conn.Skipped() {
		reasons[s.Name] = s.Reason
	}
	for name, want := range map[string]string{"twice": "2 times", "broken": "input_schema", "bad..name": "no valid capability"} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("%s skipped for %q, want a reason with %q", name, reasons[name], want)
		}
	}
	WaitRoutable(t, "raw.good", 1, d)
	waitDeclared(t, d, "raw", "raw.good")
	c := st.Client(agentkit.WithJSON())
	if got, err := callJSON(t, c, "raw.good", `{"n":1}`); err != nil || got != `{"text":"called good"}` {
		t.Errorf("raw.good: %s, %v", got, err)
	}
	if _, err := callJSON(t, c, "raw.good", `{"n":"x"}`); !errors.Is(err, streams.ErrBadRequest) || !strings.Contains(err.Error(), "n") {
		t.Errorf("raw.good with a bad n: %v, want BAD_REQUEST naming n", err)
	}
	if _, err := callJSON(t, c, "raw.twice", `{}`); !errors.Is(err, streams.ErrNoAgent) {
		t.Errorf("raw.twice: %v, want NO_AGENT (skipped)", err)
	}
}
