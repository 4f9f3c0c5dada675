package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/gateway/mcp"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// The protocol revisions /mcp serves (DESIGN §16): the stateless one and
// the session-based one, each through the Go SDK's own client.
var mcpRevisions = []string{"2026-07-28", "2025-11-25"}

// mcpMath is a declared type: math.add reads, with an input schema.
var mcpMath = &declare.Declaration{Type: "math", Description: "Arithmetic", Capabilities: []declare.DeclaredCapability{{
	Name: "math.add", Description: "Adds a and b", Mode: declare.ModeRead, Idempotent: true,
	InputSchema: json.RawMessage(`{"type":"object","required":["a","b"],"properties":{"a":{"type":"number"},"b":{"type":"number"}}}`),
}}}

// mcpStack is a stack with a dispatcher, its gateway serving /mcp, an
// agent "tools-1" serving echo, refuse (BIZ_REJECT) and slow (waits for
// its cancel, counted in cancelled), and an agent "math-1" of mcpMath.
type mcpStack struct {
	*Stack
	d         *dispatcher.Dispatcher
	g         *gateway.Gateway
	url       string
	started   chan struct{}
	cancelled atomic.Int32
}

func newMCPStack(t *testing.T) *mcpStack {
	st := &mcpStack{Stack: NewStack(t, time.Second), started: make(chan struct{}, 16)}
	st.d = st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{Type: "tools", ID: "tools-1"}, mcpHandlers(st.started, &st.cancelled))
	st.Agent(agentkit.Config{Type: "math", ID: "math-1", Declaration: mcpMath}, map[string]agentkit.Handler{
		"math.add": func(_ context.Context, r *agentkit.Request) (any, error) {
			var in struct{ A, B float64 }
			if err := r.Decode(&in); err != nil {
				return nil, err
			}
			return map[string]float64{"sum": in.A + in.B}, nil
		}})
	WaitRoutable(t, "echo", 1, st.d)
	WaitRoutable(t, "math.add", 1, st.d)
	// The declaration comes by its own watch (REACH_CAPS), maybe after the
	// record: the tools are made from what the dispatcher has read.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := st.d.Catalog().Lookup("math"); !ok {
			return fmt.Errorf("the dispatcher has not read math's declaration")
		}
		return nil
	})
	var err error
	if st.g, err = gateway.New(st.Conn(), st.d, gateway.Config{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(st.g.Handler())
	t.Cleanup(func() {
		_ = st.g.Shutdown(context.Background())
		srv.Close()
	})
	st.url = srv.URL + "/mcp"
	return st
}

// mcpHandlers are the tools agent's handlers.
func mcpHandlers(started chan<- struct{}, cancelled *atomic.Int32) map[string]agentkit.Handler {
	return map[string]agentkit.Handler{
		"echo":   func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil },
		"refuse": func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject("not today") },
		"slow": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			cancelled.Add(1)
			return nil, ctx.Err()
		},
	}
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// mcpConnect connects the Go SDK's client to url at revision, with token
// as bearer ("" none) and changed told of every tools/list_changed.
func mcpConnect(t *testing.T, url, revision, token string, changed chan<- struct{}) *sdk.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if token != "" {
		rt = bearer{token: token, next: tr}
	}
	opts := &sdk.ClientOptions{}
	if changed != nil {
		opts.ToolListChangedHandler = func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}},
		&sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatalf("connect at %s: %v", revision, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != revision {
		t.Fatalf("negotiated %s, want %s", got, revision)
	}
	return cs
}

// listTools returns the tools by name, in the order served.
func listTools(t *testing.T, cs *sdk.ClientSession) ([]string, map[string]*sdk.Tool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var names []string
	tools := map[string]*sdk.Tool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		tools[tool.Name] = tool
	}
	return names, tools
}

// callTool calls name with args and returns the result's text.
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args any) (*sdk.CallToolResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return res, strings.Join(text, "\n")
}

// TestMCPToolsAndCalls: over both revisions, tools/list serves every
// routable capability as a tool (names with '_', sorted, schemas and
// annotations from the declaration, the capability in _meta) and
// tools/call routes a task: a result, a business rejection and arguments
// that fail the input schema are all tool results, the failures with
// isError and the Reach code (the field named).
func TestMCPToolsAndCalls(t *testing.T) {
	st := newMCPStack(t)
	for _, rev := range mcpRevisions {
		t.Run(rev, func(t *testing.T) {
			cs := mcpConnect(t, st.url, rev, "", nil)
			names, tools := listTools(t, cs)
			if want := []string{"echo", "math_add", "refuse", "slow"}; !slices.Equal(names, want) {
				t.Fatalf("tools %v, want %v", names, want)
			}
			add := tools["math_add"]
			if add.Meta[mcp.MetaCapability] != "math.add" || add.Description != "Adds a and b" ||
				!add.Annotations.ReadOnlyHint || !add.Annotations.IdempotentHint {
				t.Fatalf("math_add: %+v, annotations %+v", add, add.Annotations)
			}
			schema, _ := json.Marshal(add.InputSchema)
			if !strings.Contains(string(schema), `"required":["a","b"]`) {
				t.Fatalf("math_add input schema %s", schema)
			}
			if echo, _ := json.Marshal(tools["echo"].InputSchema); string(echo) != `{"type":"object"}` {
				t.Fatalf("echo (undeclared) input schema %s", echo)
			}

			res, text := callTool(t, cs, "math_add", map[string]any{"a": 2, "b": 3})
			if res.IsError || text != `{"sum":5}` {
				t.Fatalf("math_add: isError %v, %q", res.IsError, text)
			}
			if sc, _ := json.Marshal(res.StructuredContent); string(sc) != `{"sum":5}` {
				t.Fatalf("structuredContent %s", sc)
			}
			res, text = callTool(t, cs, "echo", map[string]any{"text": "hi"})
			if res.IsError || text != `{"text":"hi"}` {
				t.Fatalf("echo: isError %v, %q", res.IsError, text)
			}
			res, text = callTool(t, cs, "math_add", map[string]any{"a": "two", "b": 3})
			if !res.IsError || !strings.HasPrefix(text, "BAD_REQUEST") || !strings.Contains(text, "payload.a") {
				t.Fatalf("math_add with a string: isError %v, %q", res.IsError, text)
			}
			res, text = callTool(t, cs, "math_add", map[string]any{"a": 1})
			if !res.IsError || !strings.HasPrefix(text, "BAD_REQUEST") || !strings.Contains(text, `"b"`) {
				t.Fatalf("math_add without b: isError %v, %q", res.IsError, text)
			}
			res, text = callTool(t, cs, "refuse", nil)
			if !res.IsError || !strings.HasPrefix(text, "BIZ_REJECT: not today") {
				t.Fatalf("refuse: isError %v, %q", res.IsError, text)
			}
		})
	}
}

// TestMCPListChanged: an agent joining and leaving is pushed as
// notifications/tools/list_changed to clients of both revisions, and the
// list follows.
func TestMCPListChanged(t *testing.T) {
	st := newMCPStack(t)
	changed := map[string]chan struct{}{}
	sessions := map[string]*sdk.ClientSession{}
	for _, rev := range mcpRevisions {
		changed[rev] = make(chan struct{}, 1)
		sessions[rev] = mcpConnect(t, st.url, rev, "", changed[rev])
	}
	wait := func(what string, want func([]string) bool) {
		t.Helper()
		for _, rev := range mcpRevisions {
			select {
			case <-changed[rev]:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: no tools/list_changed at %s", what, rev)
			}
			// A notification may come for an earlier step: list until the
			// list is as wanted, each time after a notification.
			for names, _ := listTools(t, sessions[rev]); !want(names); names, _ = listTools(t, sessions[rev]) {
				select {
				case <-changed[rev]:
				case <-time.After(20 * time.Second):
					t.Fatalf("%s at %s: tools %v", what, rev, names)
				}
			}
		}
	}
	late := st.Agent(agentkit.Config{Type: "late", ID: "late-1"}, map[string]agentkit.Handler{
		"late.join": func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil }})
	wait("join", func(names []string) bool { return slices.Contains(names, "late_join") })
	_, text := callTool(t, sessions["2026-07-28"], "late_join", map[string]any{"x": 1})
	if text != `{"x":1}` {
		t.Fatalf("late_join: %q", text)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := late.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	wait("leave", func(names []string) bool { return !slices.Contains(names, "late_join") })
}

// TestMCPCancel: a client that cancels its tools/call cancels the routed
// task: the agent's handler sees its context end.
func TestMCPCancel(t *testing.T) {
	st := newMCPStack(t)
	for i, rev := range mcpRevisions {
		t.Run(rev, func(t *testing.T) {
			cs := mcpConnect(t, st.url, rev, "", nil)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "slow", Arguments: map[string]any{}})
				done <- err
			}()
			select {
			case <-st.started:
			case <-time.After(20 * time.Second):
				t.Fatal("the slow task never started")
			}
			cancel()
			if err := <-done; err == nil {
				t.Fatal("a cancelled call returned no error")
			}
			natstest.WaitFor(t, 20*time.Second, func() error {
				if n := st.cancelled.Load(); n != int32(i+1) {
					return fmt.Errorf("%d handlers cancelled, want %d", n, i+1)
				}
				return nil
			})
		})
	}
}

// mcpACL lets alice call echo only, bob everything.
const mcpACL = `{"rules": [{"caller": "alice", "may_call": ["echo"]}, {"caller": "bob", "may_call": [">"]}]}`

// TestMCPACLFiltersTools: with auth on, /mcp serves each bearer token's
// identity the tools the ACL lets it call. Attack: alice does not see
// secret.read, cannot call it by name, cannot use bob's session; no token
// or a forged one is refused. Control: bob sees and calls it. A change of
// the ACL is pushed as list_changed.
func TestMCPACLFiltersTools(t *testing.T) {
	st := NewSecureStack(t, time.Second, mcpACL)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{
		"echo": func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil }})
	st.Agent(agentkit.Config{ID: "secret-1", Type: "secret"}, map[string]agentkit.Handler{
		"secret.read": func(context.Context, *agentkit.Request) (any, error) { return map[string]string{"s": "42"}, nil }})
	WaitRoutable(t, "echo", 1, d)
	WaitRoutable(t, "secret.read", 1, d)
	token := map[string]string{}
	for _, name := range []string{"alice", "bob"} {
		st.Identity(auth.Identity{Name: name, Role: auth.RoleCaller})
		signer, err := auth.LoadSigner(st.Store.CredsFile(name))
		if err != nil {
			t.Fatal(err)
		}
		token[name] = signer.Bearer()
	}
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
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() {
		_ = g.Shutdown(context.Background())
		srv.Close()
	})
	url := srv.URL + "/mcp"

	for _, rev := range mcpRevisions {
		t.Run(rev, func(t *testing.T) {
			alice := mcpConnect(t, url, rev, token["alice"], nil)
			if names, _ := listTools(t, alice); !slices.Equal(names, []string{"echo"}) {
				t.Fatalf("alice is served %v, want [echo]", names)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if res, err := alice.CallTool(ctx, &sdk.CallToolParams{Name: "secret_read"}); err == nil && !res.IsError {
				t.Fatalf("alice called secret_read: %+v", res)
			}
			if _, text := callTool(t, alice, "echo", map[string]any{"a": 1}); text != `{"a":1}` {
				t.Fatalf("alice's echo: %q", text)
			}
			bob := mcpConnect(t, url, rev, token["bob"], nil)
			if names, _ := listTools(t, bob); !slices.Equal(names, []string{"echo", "secret_read"}) {
				t.Fatalf("bob is served %v", names)
			}
			if res, text := callTool(t, bob, "secret_read", nil); res.IsError || text != `{"s":"42"}` {
				t.Fatalf("bob's secret_read: %v %q", res.IsError, text)
			}
		})
	}
	for what, header := range map[string]string{"no token": "", "a forged token": "Bearer ar1.bob.AAAA"} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: status %d, want 401", what, res.StatusCode)
		}
	}

	// A 2025-11-25 session is bound to its identity: bob's token on
	// alice's session is refused (attack); alice's own token passes
	// (control).
	session := mcpConnect(t, url, "2025-11-25", token["alice"], nil).ID()
	for name, want := range map[string]int{"bob": http.StatusForbidden, "alice": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		req.Header.Set("Authorization", "Bearer "+token[name])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want || (want == http.StatusOK && strings.Contains(string(b), "secret_read")) {
			t.Fatalf("%s's token on alice's session: %d %s, want %d", name, res.StatusCode, b, want)
		}
	}

	// `agentreach mcp --url` relays the endpoint as alice sees it (stdio
	// here in memory): her tools only, calls forwarded.
	relayChanged := make(chan struct{}, 1)
	relayed := mcpRelay(t, url, token["alice"], relayChanged)
	if names, _ := listTools(t, relayed); !slices.Equal(names, []string{"echo"}) {
		t.Fatalf("the relay of alice serves %v, want [echo]", names)
	}
	if res, text := callTool(t, relayed, "echo", map[string]any{"r": 1}); res.IsError || text != `{"r":1}` {
		t.Fatalf("echo through the relay: %v %q", res.IsError, text)
	}

	// An ACL change is pushed: alice is granted secret.* too.
	changed := make(chan struct{}, 1)
	alice := mcpConnect(t, url, "2026-07-28", token["alice"], changed)
	st.SetACL(`{"rules": [{"caller": "alice", "may_call": ["echo", "secret.*"]}, {"caller": "bob", "may_call": [">"]}]}`)
	select {
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Fatal("no list_changed after the ACL change")
	}
	if names, _ := listTools(t, alice); !slices.Equal(names, []string{"echo", "secret_read"}) {
		t.Fatalf("after the grant alice is served %v", names)
	}
	select {
	case <-relayChanged:
	case <-time.After(20 * time.Second):
		t.Fatal("no list_changed through the relay after the ACL change")
	}
	for names, _ := listTools(t, relayed); !slices.Equal(names, []string{"echo", "secret_read"}); names, _ = listTools(t, relayed) {
		select {
		case <-relayChanged:
		case <-time.After(20 * time.Second):
			t.Fatalf("after the grant the relay serves %v", names)
		}
	}
}

// mcpRelay runs mcp.Relay of url with token as bearer on an in-memory
// transport and returns a client of it (changed told of list_changed).
func mcpRelay(t *testing.T, url, token string, changed chan<- struct{}) *sdk.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	serverSide, clientSide := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- mcp.Relay(ctx, url, &http.Client{Transport: bearer{token: token, next: tr}}, serverSide, "test", zerolog.Nop())
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	c := sdk.NewClient(&sdk.Implementation{Name: "desktop", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	cs, err := c.Connect(cctx, clientSide, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestMCPStatelessCallOnTheWire: a tools/call of 2026-07-28 as bytes on the
// wire. Well-formed, it is answered as JSON with the result; headers that
// do not mirror the body, or an unknown tool, get the protocol's errors
// (-32020, unknown tool), never a result.
func TestMCPStatelessCallOnTheWire(t *testing.T) {
	st := newMCPStack(t)
	post := func(name, header string) (int, string, string) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + name + `","arguments":{"text":"hi"},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req, _ := http.NewRequest(http.MethodPost, st.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", header)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Content-Type"), string(b)
	}
	status, ct, body := post("echo", "echo")
	if status != http.StatusOK || ct != "application/json" ||
		!strings.HasPrefix(body, `{"jsonrpc":"2.0","id":7,"result":{`) || !strings.Contains(body, `"structuredContent":{"text":"hi"}`) ||
		!strings.Contains(body, `"resultType":"complete"`) {
		t.Fatalf("well-formed: %d %s %s", status, ct, body)
	}
	var parsed struct {
		Result sdk.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &parsed); err != nil || parsed.Result.IsError {
		t.Fatalf("the SDK's types do not read %s: %v", body, err)
	}
	if _, _, body := post("echo", "refuse"); !strings.Contains(body, "-32020") || strings.Contains(body, `"result"`) {
		t.Fatalf("Mcp-Name not mirroring the body: %s", body)
	}
	if _, _, body := post("nope", "nope"); !strings.Contains(body, `unknown tool`) || strings.Contains(body, `"result"`) {
		t.Fatalf("unknown tool: %s", body)
	}
}

// TestMCPShutdownEndsStreams: the gateway's shutdown ends the notification
// streams of connected clients of both revisions instead of waiting for
// them.
func TestMCPShutdownEndsStreams(t *testing.T) {
	st := newMCPStack(t)
	for _, rev := range mcpRevisions {
		mcpConnect(t, st.url, rev, "", make(chan struct{}, 1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := st.g.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with clients listening: %v", err)
	}
}

// TestMCPListChangedOnEveryReplica: clients of two gateway replicas (each
// beside its own dispatcher) are both told of an agent joining: each
// replica follows the registry itself.
func TestMCPListChangedOnEveryReplica(t *testing.T) {
	st := NewStack(t, time.Second)
	var urls []string
	for range 2 {
		d := st.Dispatcher(config.Config{})
		g, err := gateway.New(st.Conn(), d, gateway.Config{})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Handler())
		t.Cleanup(func() {
			_ = g.Shutdown(context.Background())
			srv.Close()
		})
		urls = append(urls, srv.URL+"/mcp")
	}
	var sessions []*sdk.ClientSession
	var changed []chan struct{}
	for i, url := range urls {
		changed = append(changed, make(chan struct{}, 1))
		sessions = append(sessions, mcpConnect(t, url, mcpRevisions[i%2], "", changed[i]))
	}
	st.Agent(agentkit.Config{Type: "joiner", ID: "joiner-1"}, map[string]agentkit.Handler{
		"joiner.work": func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil }})
	for i, cs := range sessions {
		select {
		case <-changed[i]:
		case <-time.After(20 * time.Second):
			t.Fatalf("replica %d: no list_changed", i)
		}
		for names, _ := listTools(t, cs); !slices.Contains(names, "joiner_work"); names, _ = listTools(t, cs) {
			select {
			case <-changed[i]:
			case <-time.After(20 * time.Second):
				t.Fatalf("replica %d: no list_changed; tools %v", i, names)
			}
		}
	}
}
