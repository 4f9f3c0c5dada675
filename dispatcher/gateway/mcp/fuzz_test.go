package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry"
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
		tool := buildTool("t", Offer{Capability: "t", Decl: &registry.DeclaredCapability{Name: "t",
			InputSchema: json.RawMessage(in), OutputSchema: json.RawMessage(out)}})
		if m, ok := tool.InputSchema.(map[string]any); !ok || m["type"] != "object" {
			t.Fatalf("input schema %v", tool.InputSchema)
		}
		addable(t, tool)
	})
}
