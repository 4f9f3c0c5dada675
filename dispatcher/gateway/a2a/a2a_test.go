package a2a_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/gateway/a2a"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// stack is a dispatcher with its gateway and an agent of type "tools"
// (echo, refuse: BIZ_REJECT, slow: waits for its context) with a
// declaration, and an agent of type "echo" serving echo.
type stack struct {
	base string
	http *http.Client
	nc   *nats.Conn
	d    *dispatcher.Dispatcher
}

func startStack(t *testing.T) *stack {
	t.Helper()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true, Heartbeat: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := dispatcher.New(nc, config.Config{Retries: config.NoRetries})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	decl := &declare.Declaration{Type: "tools", Description: "test tools", Version: "1.2.3", Capabilities: []declare.DeclaredCapability{
		{Name: "tools.echo", Description: "answers its input", Mode: declare.ModeRead,
			InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: "tools.refuse"}, {Name: "tools.slow"},
	}}
	agent := func(cfg agentkit.Config, hs map[string]agentkit.Handler) {
		a, err := agentkit.New(natstest.Connect(t, s), cfg, agentkit.WithoutSignals())
		if err != nil {
			t.Fatal(err)
		}
		for c, h := range hs {
			_ = a.Handle(c, h)
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Drain(context.Background()) })
	}
	echo := func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil }
	agent(agentkit.Config{Type: "tools", ID: "tools-1", Declaration: decl}, map[string]agentkit.Handler{
		"tools.echo":   echo,
		"tools.refuse": func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject("not today") },
		"tools.slow": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	agent(agentkit.Config{Type: "echo", ID: "echo-1"}, map[string]agentkit.Handler{"echo": echo})
	natstest.WaitFor(t, 20*time.Second, func() error {
		if d.Table().Len() != 2 {
			return fmt.Errorf("the dispatcher sees %d agents", d.Table().Len())
		}
		return nil
	})
	g, err := gateway.New(nc, d, gateway.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &stack{base: strings.TrimSuffix(g.URL(), "/"), http: &http.Client{Transport: tr, Timeout: 20 * time.Second}, nc: nc, d: d}
}

func (st *stack) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	res, err := st.http.Get(st.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// post sends body to path with A2A-Version 1.0 unless header says
// otherwise (pairs).
func (st *stack) post(t *testing.T, path, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, st.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(a2a.HeaderVersion, a2a.ProtocolVersion)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := st.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *a2a.RPCError   `json:"error"`
}

// call sends one JSON-RPC call and decodes its answer.
func (st *stack) call(t *testing.T, path, method string, params any) rpcResponse {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	_, body := st.post(t, path, string(b))
	var r rpcResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%s: answer %q: %v", method, body, err)
	}
	return r
}

func (st *stack) task(t *testing.T, path, method string, params any) a2a.Task {
	t.Helper()
	r := st.call(t, path, method, params)
	if r.Error != nil {
		t.Fatalf("%s: %v", method, r.Error)
	}
	var out struct{ Task *a2a.Task }
	if method == a2a.MethodGetTask || method == a2a.MethodCancelTask {
		var tk a2a.Task
		if err := json.Unmarshal(r.Result, &tk); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	if err := json.Unmarshal(r.Result, &out); err != nil || out.Task == nil {
		t.Fatalf("%s: result %s: %v", method, r.Result, err)
	}
	return *out.Task
}

func message(parts ...map[string]any) map[string]any {
	return map[string]any{"message": map[string]any{"messageId": "m1", "role": a2a.RoleUser, "parts": parts}}
}

func TestCards(t *testing.T) {
	st := startStack(t)
	status, b := st.get(t, "/a2a/tools/.well-known/agent-card.json")
	var card a2a.AgentCard
	if err := json.Unmarshal(b, &card); status != 200 || err != nil {
		t.Fatalf("tools card: %d %s %v", status, b, err)
	}
	if card.Name != "tools" || card.Version != "1.2.3" || card.Description != "test tools" || len(card.Skills) != 3 ||
		card.Skills[0].ID != "tools.echo" || card.SupportedInterfaces[0].URL != st.base+"/a2a/tools" ||
		card.SupportedInterfaces[0].ProtocolBinding != "JSONRPC" || card.SecuritySchemes != nil {
		t.Fatalf("tools card: %s", b)
	}
	ext := map[string]map[string]any{}
	for _, e := range card.Capabilities.Extensions {
		ext[e.URI] = e.Params
	}
	schemas := ext[a2a.ExtensionSchemas]["skills"].(map[string]any)
	if _, ok := schemas["tools.echo"].(map[string]any)["input_schema"]; !ok {
		t.Fatalf("schemas extension: %v", ext[a2a.ExtensionSchemas])
	}
	if r := ext[a2a.ExtensionReadiness]; r["state"] != a2a.ReadinessReady || r["instances"] != 1.0 {
		t.Fatalf("readiness: %v", r)
	}
	status, b = st.get(t, "/.well-known/agent-card.json")
	if status != 200 || !bytes.Contains(b, []byte(`"tools.slow"`)) || !bytes.Contains(b, []byte(st.base+"/a2a/echo/.well-known/agent-card.json")) {
		t.Fatalf("gateway card: %d %s", status, b)
	}
	// A declared type without a live instance: its card, unavailable.
	js, _ := jetstream.New(st.nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketCaps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registry.PutDeclaration(context.Background(), kv, &declare.Declaration{Type: "ghost",
		Capabilities: []declare.DeclaredCapability{{Name: "ghost.walk"}}}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		status, b = st.get(t, "/a2a/ghost/.well-known/agent-card.json")
		if status != 200 || !bytes.Contains(b, []byte(`"state":"unavailable"`)) {
			return fmt.Errorf("ghost card: %d %s", status, b)
		}
		return nil
	})
	for path, want := range map[string]int{"/a2a/nobody/.well-known/agent-card.json": 404, "/a2a/Bad%20Type/.well-known/agent-card.json": 404,
		"/a2a/tools/x/.well-known/agent-card.json": 404, "/a2a/tools": 405} {
		if status, b := st.get(t, path); status != want || !bytes.Contains(b, []byte(`"code"`)) {
			t.Errorf("GET %s: %d %s, want %d with a JSON code", path, status, b, want)
		}
	}
}

func TestSendMessage(t *testing.T) {
	st := startStack(t)
	// A data part is the payload; the type's only skill is called.
	tk := st.task(t, "/a2a/echo", a2a.MethodSendMessage, message(map[string]any{"data": map[string]any{"n": 1}}))
	if tk.Status.State != a2a.StateCompleted || len(tk.Artifacts) != 1 || string(tk.Artifacts[0].Parts[0].Data) != `{"n":1}` {
		t.Fatalf("data part: %+v", tk)
	}
	// A text part becomes {"text": …}; the skill is named in metadata.
	p := message(map[string]any{"text": "hi"})
	p["metadata"] = map[string]any{"skill": "tools.echo"}
	tk = st.task(t, "/a2a/tools", a2a.MethodSendMessage, p)
	if tk.Status.State != a2a.StateCompleted || string(tk.Artifacts[0].Parts[0].Data) != `{"text":"hi"}` {
		t.Fatalf("text part: %+v", tk)
	}
	// The gateway's endpoint takes any skill, named.
	tk = st.task(t, "/a2a", a2a.MethodSendMessage, p)
	if tk.Status.State != a2a.StateCompleted {
		t.Fatalf("gateway endpoint: %+v", tk)
	}
	// BIZ_REJECT is a rejected task, with the reason.
	p["metadata"] = map[string]any{"skill": "tools.refuse"}
	tk = st.task(t, "/a2a/tools", a2a.MethodSendMessage, p)
	if tk.Status.State != a2a.StateRejected || tk.Status.Message == nil || !strings.Contains(*tk.Status.Message.Parts[0].Text, "not today") {
		t.Fatalf("rejected: %+v", tk)
	}
	got := st.task(t, "/a2a/tools", a2a.MethodGetTask, map[string]any{"id": tk.ID})
	if got.ID != tk.ID || got.Status.State != a2a.StateRejected {
		t.Fatalf("GetTask of the rejected task: %+v", got)
	}
	// Streaming: one final event over SSE.
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "s", "method": a2a.MethodSendStreamingMessage,
		"params": message(map[string]any{"data": []int{1, 2}})})
	res, body := st.post(t, "/a2a/echo", string(b))
	data, ok := strings.CutPrefix(string(body), "data: ")
	if res.Header.Get("Content-Type") != "text/event-stream" || !ok || !strings.HasSuffix(data, "\n\n") {
		t.Fatalf("stream: %v %q", res.Header, body)
	}
	var ev struct {
		Result a2a.StreamResponse `json:"result"`
	}
	if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Result.Task == nil || ev.Result.Task.Status.State != a2a.StateCompleted ||
		string(ev.Result.Task.Artifacts[0].Parts[0].Data) != "[1,2]" {
		t.Fatalf("stream event %q: %v", data, err)
	}
	if res.Header.Get(a2a.HeaderVersion) != a2a.ProtocolVersion {
		t.Fatalf("A2A-Version answered: %q", res.Header.Get(a2a.HeaderVersion))
	}
}

func TestReturnImmediatelyAndCancel(t *testing.T) {
	st := startStack(t)
	p := message(map[string]any{"data": map[string]any{}})
	p["metadata"] = map[string]any{"skill": "tools.slow"}
	p["configuration"] = map[string]any{"returnImmediately": true}
	tk := st.task(t, "/a2a/tools", a2a.MethodSendMessage, p)
	if tk.Status.State != a2a.StateWorking {
		t.Fatalf("returnImmediately: %+v", tk)
	}
	if got := st.task(t, "/a2a/tools", a2a.MethodGetTask, map[string]any{"id": tk.ID}); got.Status.State != a2a.StateWorking {
		t.Fatalf("GetTask while it runs: %+v", got)
	}
	var list a2a.ListTasksResponse
	r := st.call(t, "/a2a/tools", a2a.MethodListTasks, map[string]any{"status": a2a.StateWorking})
	if err := json.Unmarshal(r.Result, &list); err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != tk.ID {
		t.Fatalf("ListTasks: %s %v", r.Result, r.Error)
	}
	got := st.task(t, "/a2a/tools", a2a.MethodCancelTask, map[string]any{"id": tk.ID})
	if got.Status.State != a2a.StateCanceled {
		t.Fatalf("CancelTask: %+v", got)
	}
	if r := st.call(t, "/a2a/tools", a2a.MethodCancelTask, map[string]any{"id": tk.ID}); r.Error == nil || r.Error.Code != a2a.CodeTaskNotCancelable {
		t.Fatalf("CancelTask of an ended task: %+v", r)
	}
	if r := st.call(t, "/a2a/tools", a2a.MethodGetTask, map[string]any{"id": "nope"}); r.Error == nil || r.Error.Code != a2a.CodeTaskNotFound {
		t.Fatalf("GetTask of no task: %+v", r)
	}
	// Another caller (without auth: another Reach-Source) sees none of them.
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": a2a.MethodGetTask, "params": map[string]any{"id": tk.ID}})
	if _, body := st.post(t, "/a2a/tools", string(b), streams.HeaderSource, "mallory"); !bytes.Contains(body, []byte("-32001")) {
		t.Fatalf("another caller's GetTask: %s", body)
	}
}

func TestBadRequests(t *testing.T) {
	st := startStack(t)
	send := func(ps ...map[string]any) string {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": message(ps...)})
		return string(b)
	}
	for _, c := range []struct {
		name, path, body string
		header           []string
		want             int
	}{
		{"not JSON", "/a2a/echo", `{"jsonrpc":`, nil, a2a.CodeParseError},
		{"a batch", "/a2a/echo", `[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]`, nil, a2a.CodeInvalidRequest},
		{"no jsonrpc", "/a2a/echo", `{"id":1,"method":"GetTask"}`, nil, a2a.CodeInvalidRequest},
		{"no id", "/a2a/echo", `{"jsonrpc":"2.0","method":"GetTask"}`, nil, a2a.CodeInvalidRequest},
		{"object id", "/a2a/echo", `{"jsonrpc":"2.0","id":{},"method":"GetTask"}`, nil, a2a.CodeInvalidRequest},
		{"unknown method", "/a2a/echo", `{"jsonrpc":"2.0","id":1,"method":"Dance"}`, nil, a2a.CodeMethodNotFound},
		{"params not an object", "/a2a/echo", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}`, nil, a2a.CodeInvalidParams},
		{"no usable part", "/a2a/echo", send(map[string]any{"url": "https://example.com/x"}), nil, a2a.CodeInvalidParams},
		{"no message", "/a2a/echo", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}`, nil, a2a.CodeInvalidParams},
		{"skill not named", "/a2a/tools", send(map[string]any{"text": "x"}), nil, a2a.CodeInvalidParams},
		{"no A2A-Version", "/a2a/echo", send(map[string]any{"text": "x"}), []string{a2a.HeaderVersion, ""}, a2a.CodeVersionNotSupported},
		{"A2A-Version 0.3", "/a2a/echo", send(map[string]any{"text": "x"}), []string{a2a.HeaderVersion, "0.3"}, a2a.CodeVersionNotSupported},
		{"push config", "/a2a/echo", `{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig"}`, nil, a2a.CodePushNotSupported},
	} {
		res, body := st.post(t, c.path, c.body, c.header...)
		var r rpcResponse
		if err := json.Unmarshal(body, &r); err != nil || res.StatusCode != 200 || r.Error == nil || r.Error.Code != c.want {
			t.Errorf("%s: %d %s, want error %d", c.name, res.StatusCode, body, c.want)
		}
	}
	// The control: the same request with a version and a part succeeds.
	if res, body := st.post(t, "/a2a/echo", send(map[string]any{"text": "x"})); res.StatusCode != 200 || !bytes.Contains(body, []byte("TASK_STATE_COMPLETED")) {
		t.Fatalf("control: %s", body)
	}
	if res, body := st.post(t, "/a2a/nobody", send(map[string]any{"text": "x"})); res.StatusCode != 404 || !bytes.Contains(body, []byte(`"NOT_FOUND"`)) {
		t.Fatalf("unknown type: %d %s", res.StatusCode, body)
	}
}

func TestStateOf(t *testing.T) {
	for code, want := range map[streams.Code]a2a.TaskState{
		"": a2a.StateCompleted, streams.CodeBizReject: a2a.StateRejected, streams.CodeUnauthorized: a2a.StateAuthRequired,
		streams.CodeCancelled: a2a.StateCanceled, streams.CodeTimeout: a2a.StateFailed, streams.CodeNoAgent: a2a.StateFailed,
		streams.CodeInternal: a2a.StateFailed,
	} {
		if got := a2a.StateOf(code); got != want {
			t.Errorf("StateOf(%q) = %s, want %s", code, got, want)
		}
	}
}
