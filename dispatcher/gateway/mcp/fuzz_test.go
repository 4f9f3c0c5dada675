package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

type ctxT = context.Context

// FuzzToolNames: whatever the capabilities, every name is valid, unique
// and independent of the order.
func FuzzToolNames(f *testing.F) {
	f.Add("echo,math.add,a_b,a.b", "x")
	f.Add(strings.Repeat("a.", 40)+"b", "a_b")
	f.Fuzz(func(t *testing.T, list, extra string) {
		caps := strings.Split(list, ",")
		caps = append(caps, extra)
		got := ToolNames(caps)
		seen := map[string]string{}
		for c, n := range got {
			if !ValidToolName(n) {
				t.Fatalf("%q → invalid %q", c, n)
			}
			if other, dup := seen[n]; dup {
				t.Fatalf("%q and %q share %q", c, other, n)
			}
			seen[n] = c
		}
		rev := make([]string, len(caps))
		for i, c := range caps {
			rev[len(caps)-1-i] = c
		}
		for c, n := range ToolNames(rev) {
			if got[c] != n {
				t.Fatalf("%q: %q, reversed %q", c, got[c], n)
			}
		}
	})
}

// FuzzToolSchema: any declared schema gives a tool the SDK serves, with an
// input schema of type object.
func FuzzToolSchema(f *testing.F) {
	f.Add(`{"type":"object","required":["a"]}`, `{"type":"object"}`)
	f.Add(`{"type":["string"]}`, `[]`)
	f.Add(`{"properties":{"a":{"x-mcp-header":"Nope"}}}`, `{"type":"array"}`)
	f.Fuzz(func(t *testing.T, in, out string) {
		tool := buildTool("t", Offer{Capability: "t", Decl: &declare.DeclaredCapability{Name: "t",
			InputSchema: json.RawMessage(in), OutputSchema: json.RawMessage(out)}})
		if m, ok := tool.InputSchema.(map[string]any); !ok || m["type"] != "object" {
			t.Fatalf("input schema %v", tool.InputSchema)
		}
		addable(t, tool)
	})
}

// staticSource offers echo, answering each call with its payload.
type staticSource struct{}

func (staticSource) Offers() []Offer            { return []Offer{{Capability: "echo"}} }
func (staticSource) ACL() *policy.ACL           { return nil }
func (staticSource) Changed() []<-chan struct{} { return nil }
func (staticSource) Call(_ context.Context, _ string, task *nats.Msg) *nats.Msg {
	m := &nats.Msg{Header: nats.Header{}, Data: task.Data}
	m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	return m
}

// FuzzHTTPRequest: whatever body and headers a POST to /mcp brings, the
// handler answers without panicking, never with a server error, and a
// JSON answer is one JSON value.
func FuzzHTTPRequest(f *testing.F) {
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":1},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
		"2026-07-28", "tools/call", "echo")
	f.Add(`{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{}}`, "2026-07-28", "tools/list", "")
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":[1]}}`, "2026-07-28", "tools/call", "echo")
	f.Add(`[{"jsonrpc":"2.0"}]`, "2025-11-25", "", "")
	srv := New(staticSource{}, Config{})
	h := srv.Handler(nil)
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, body, version, method, name string) {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range map[string]string{"Mcp-Protocol-Version": version, "Mcp-Method": method, "Mcp-Name": name} {
			if v != "" && !strings.ContainsAny(v, "\r\n\x00") {
				req.Header.Set(k, v)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		if rec.Header().Get("Content-Type") == "application/json" && rec.Body.Len() > 0 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("invalid JSON answer %q", rec.Body.String())
		}
	})
}

// FuzzChunkText: whatever an agent streams, a chunk's progress message is
// made without a panic, a JSON string chunk is its value and other JSON
// stays as it came.
func FuzzChunkText(f *testing.F) {
	f.Add([]byte(`"once"`), "application/json")
	f.Add([]byte(`{"words":4}`), "")
	f.Add([]byte{0xa4, 'o', 'n', 'c', 'e'}, "application/msgpack")
	f.Add([]byte{0x81, 0xa1, 'a', 0x01}, "application/msgpack")
	f.Add([]byte("\xff\xfe"), "text/plain")
	f.Add([]byte(" null "), "application/json")
	f.Fuzz(func(t *testing.T, data []byte, ct string) {
		m := &nats.Msg{Header: nats.Header{}, Data: data}
		if ct != "" {
			m.Header.Set(streams.HeaderContentType, ct)
		}
		got := chunkText(m)
		if streams.ContentType(m.Header, data) != streams.ContentTypeJSON || !json.Valid(data) {
			return
		}
		var s string
		if trimmed := strings.TrimSpace(string(data)); strings.HasPrefix(trimmed, `"`) && json.Unmarshal(data, &s) == nil {
			if got != s {
				t.Fatalf("%q → %q, want the string %q", data, got, s)
			}
		} else if got != strings.TrimSpace(string(data)) {
			t.Fatalf("%q → %q, want the JSON as it came", data, got)
		}
	})
}
