package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestToolNames(t *testing.T) {
	long := strings.Repeat("a", 40) + "." + strings.Repeat("b", 40)
	got := ToolNames([]string{"echo", "math.add", "a_b", "a.b", "x.y_z", "x_y.z", long, "echo"})
	for c, want := range map[string]string{"echo": "echo", "math.add": "math_add", "a_b": "a_b"} {
		if got[c] != want {
			t.Errorf("%s → %q, want %q", c, got[c], want)
		}
	}
	// Collisions and overlength names get a hash suffix.
	for _, c := range []string{"a.b", "x.y_z", "x_y.z", long} {
		if n := got[c]; len(n) > MaxToolName || !strings.Contains(n, "_") || n == baseName(c) || !ValidToolName(n) {
			t.Errorf("%s → %q", c, n)
		}
	}
	if got["x.y_z"] == got["x_y.z"] {
		t.Errorf("two capabilities share %q", got["x.y_z"])
	}
	// Stable: the same set in another order, and a name unaffected by
	// capabilities it does not collide with.
	again := ToolNames([]string{long, "x_y.z", "a.b", "echo", "x.y_z", "a_b", "math.add"})
	for c, n := range got {
		if again[c] != n {
			t.Errorf("%s: %q, then %q", c, n, again[c])
		}
	}
	if ToolNames([]string{"a.b"})["a.b"] != "a_b" {
		t.Error("a.b alone is not a_b")
	}
}

func TestInputSchema(t *testing.T) {
	for raw, want := range map[string]string{
		``:                           `{"type":"object"}`,
		`{"type":"array"}`:           `{"type":"object"}`,
		`[1]`:                        `{"type":"object"}`,
		`{"required":["a"]}`:         `{"required":["a"],"type":"object"}`,
		`{"type":["object","null"]}`: `{"type":"object"}`,
		`{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A"}}}`: `{"properties":{"a":{"type":"string"}},"type":"object"}`,
	} {
		b, _ := json.Marshal(InputSchema(json.RawMessage(raw)))
		if string(b) != want {
			t.Errorf("%s → %s, want %s", raw, b, want)
		}
	}
}

// addable checks what the SDK checks of a tool before it serves it.
func addable(t *testing.T, tool *sdk.Tool) {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "t"}, nil)
	if err := addTool(srv, tool, func(_ ctxT, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return nil, nil }); err != nil {
		t.Fatalf("%s: %v", tool.Name, err)
	}
}
