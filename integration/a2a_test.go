package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher/gateway/a2a"
)

// a2aCall sends one JSON-RPC call to the resultsStack's gateway as name
// ("" sends no token): the HTTP status and the decoded answer.
func (st *resultsStack) a2aCall(name, path, method string, params any) (int, map[string]any) {
	st.T.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, err := http.NewRequest(http.MethodPost, st.http.URL+path, strings.NewReader(string(b)))
	if err != nil {
		st.T.Fatal(err)
	}
	req.Header.Set(a2a.HeaderVersion, a2a.ProtocolVersion)
	if name != "" {
		signer, err := auth.LoadSigner(st.Store.CredsFile(name))
		if err != nil {
			st.T.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+signer.Bearer())
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		st.T.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		st.T.Fatalf("%s %s: %d %q: %v", method, path, res.StatusCode, body, err)
	}
	return res.StatusCode, out
}

// With auth on, an A2A call runs as the bearer token's identity: without
// a token it is refused (401) and nothing runs; a task is its caller's
// alone — another identity can neither read nor cancel it nor see it
// listed — the controls being the caller's own reads; and a card is
// served to a token only, naming the bearer scheme.
func TestA2AWithAuth(t *testing.T) {
	st := newResultsStack(t)
	msg := map[string]any{"message": map[string]any{"messageId": "m", "role": a2a.RoleUser, "parts": []any{map[string]any{"data": map[string]any{"n": 1}}}}}

	before := st.echoes.Load()
	if status, out := st.a2aCall("", "/a2a/echo", a2a.MethodSendMessage, msg); status != http.StatusUnauthorized || out["error"] == nil {
		t.Fatalf("SendMessage without a token: %d %v", status, out)
	}
	if st.echoes.Load() != before {
		t.Fatal("a refused SendMessage ran")
	}
	status, out := st.a2aCall("alice", "/a2a/echo", a2a.MethodSendMessage, msg)
	task, _ := out["result"].(map[string]any)["task"].(map[string]any)
	if status != 200 || task == nil || task["status"].(map[string]any)["state"] != string(a2a.StateCompleted) {
		t.Fatalf("alice's SendMessage: %d %v", status, out)
	}
	id := task["id"].(string)

	if _, out := st.a2aCall("alice", "/a2a/echo", a2a.MethodGetTask, map[string]any{"id": id}); out["result"] == nil {
		t.Fatalf("alice's GetTask of her task: %v", out)
	}
	if _, out := st.a2aCall("bob", "/a2a/echo", a2a.MethodGetTask, map[string]any{"id": id}); out["error"] == nil ||
		out["error"].(map[string]any)["code"] != float64(a2a.CodeTaskNotFound) {
		t.Fatalf("bob's GetTask of alice's task: %v", out)
	}
	if _, out := st.a2aCall("bob", "/a2a/echo", a2a.MethodCancelTask, map[string]any{"id": id}); out["error"] == nil ||
		out["error"].(map[string]any)["code"] != float64(a2a.CodeTaskNotFound) {
		t.Fatalf("bob's CancelTask of alice's task: %v", out)
	}
	count := func(name string) int {
		_, out := st.a2aCall(name, "/a2a/echo", a2a.MethodListTasks, map[string]any{})
		return len(out["result"].(map[string]any)["tasks"].([]any))
	}
	if a, b := count("alice"), count("bob"); a != 1 || b != 0 {
		t.Fatalf("ListTasks: alice sees %d, bob %d; want 1 and 0", a, b)
	}

	get := func(token bool) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, st.http.URL+"/a2a/echo/.well-known/agent-card.json", nil)
		if token {
			signer, _ := auth.LoadSigner(st.Store.CredsFile("bob"))
			req.Header.Set("Authorization", "Bearer "+signer.Bearer())
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if status, _ := get(false); status != http.StatusUnauthorized {
		t.Fatalf("card without a token: %d", status)
	}
	if status, body := get(true); status != 200 || !strings.Contains(body, `"securityRequirements":[{"schemes":{"bearer"`) {
		t.Fatalf("card with a token: %d %s", status, body)
	}
}
