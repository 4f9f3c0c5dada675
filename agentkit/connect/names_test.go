package connect

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

func TestCapabilityName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"search", "gh.search"},
		{"getWeather", "gh.get_weather"},
		{"getHTTPStatus", "gh.get_httpstatus"},
		{"list-issues", "gh.list-issues"},
		{"files/read", "gh.files_read"},
		{"v2.search", "gh.v2.search"},
		{"Search2Go", "gh.search2_go"},
		{"héllo", "gh.h_llo"},
	} {
		got, err := CapabilityName("gh", c.in)
		if err != nil || got != c.want {
			t.Errorf("CapabilityName(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", ".x", "x.", "a..b", strings.Repeat("a", 300)} {
		if got, err := CapabilityName("gh", in); err == nil {
			t.Errorf("CapabilityName(%q) = %q, want an error", in, got)
		}
	}
}

func TestToolsWithBadSchemasOrNamesAreSkipped(t *testing.T) {
	tools := []*mcp.Tool{
		{Name: "ok", InputSchema: map[string]any{"type": "object"}},
		{Name: "twice", InputSchema: map[string]any{"type": "object"}},
		{Name: "twice", InputSchema: map[string]any{"type": "object"}},
		{Name: "bad_schema", InputSchema: map[string]any{"type": 7}},
		{Name: "remote_ref", InputSchema: map[string]any{"$ref": "https://example.com/s.json"}},
		{Name: "a..b", InputSchema: map[string]any{"type": "object"}},
		{Name: "getX", InputSchema: map[string]any{"type": "object"}},
		{Name: "get_x", InputSchema: map[string]any{"type": "object"}},
		{Name: "ro", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "idem", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		nil,
	}
	var entries []entry
	for _, tl := range tools {
		dc, err := ToolCapability("up", tl)
		name := ""
		if tl != nil {
			name = tl.Name
		}
		entries = append(entries, entry{name: name, cap: dc, err: err})
	}
	served, skipped := resolve(entries)
	var names []string
	for _, e := range served {
		names = append(names, e.cap.Name)
	}
	if strings.Join(names, " ") != "up.idem up.ok up.ro" {
		t.Errorf("served %v, want up.idem up.ok up.ro", names)
	}
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Name] += s.Reason
	}
	for name, want := range map[string]string{
		"twice": "given 2 times", "bad_schema": "input_schema", "remote_ref": "input_schema", "a..b": "no valid capability",
		"getX": `"get_x"`, "get_x": `"getX"`, "": "null",
	} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("%q skipped for %q, want a reason naming %s", name, reasons[name], want)
		}
	}
	modes := map[string]string{}
	for _, e := range served {
		modes[e.cap.Name] = e.cap.Mode
		if e.cap.Name != "up.ok" && !e.cap.Idempotent {
			t.Errorf("%s is not idempotent", e.cap.Name)
		}
	}
	if modes["up.ro"] != declare.ModeRead || modes["up.idem"] != declare.ModeWrite || modes["up.ok"] != "" {
		t.Errorf("modes %v, want ro read, idem write, ok unsaid", modes)
	}
}

func TestToolResults(t *testing.T) {
	for _, c := range []struct {
		name string
		res  *mcp.CallToolResult
		want string
	}{
		{"structured", &mcp.CallToolResult{StructuredContent: map[string]any{"sum": 3}, Content: []mcp.Content{&mcp.TextContent{Text: "3"}}}, `{"sum":3}`},
		{"JSON text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: ` {"a": 12345678901234567890} `}}}, `{"a": 12345678901234567890}`},
		{"plain text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}, `{"text":"hello"}`},
		{"two texts", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}}, `{"text":"a\nb"}`},
		{"no text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: "image/png", Data: []byte{1}}}}, `{"content":[{"type":"image","mimeType":"image/png","data":"AQ=="}]}`},
		{"nothing", &mcp.CallToolResult{}, `{"content":[]}`},
	} {
		got, err := toolResult(c.res)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %s, %v; want %s", c.name, got, err, c.want)
		}
	}
	for _, c := range []struct {
		text string
		code streams.Code
		msg  string
	}{
		{"the city is unknown", streams.CodeBizReject, "the city is unknown"},
		{"TARGET_BUSY: all slots busy", streams.CodeTargetBusy, "all slots busy"},
		{"NOT_A_CODE: x", streams.CodeBizReject, "NOT_A_CODE: x"},
		{"", streams.CodeBizReject, "the tool reported an error"},
	} {
		_, err := toolResult(&mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: c.text}}})
		var we *streams.Error
		if !errors.As(err, &we) || we.Code != c.code || we.Message != c.msg {
			t.Errorf("isError %q: %v, want %s %q", c.text, err, c.code, c.msg)
		}
	}
	b, _ := json.Marshal(map[string]any{})
	_ = b
}
