package mcp

import (
	"bytes"
	"encoding/json"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/registry/declare"
)

// Offer is one routable capability with what its declaration says about
// it (Decl nil when no routable instance's type declares it).
type Offer struct {
	Capability string
	Decl       *declare.DeclaredCapability
	// TypeDescription is the declaring type's description, used when the
	// capability has none of its own.
	TypeDescription string
}

// MetaCapability is the key of a tool's _meta that names its capability.
const MetaCapability = capabilityMeta

// buildTool returns the tool of offer under name (docs/mcp.md): its
// description, input and output schemas from the declaration
// ({"type":"object"} when undeclared), readOnlyHint for mode "read",
// idempotentHint for a read or an idempotent capability, and the
// capability in _meta["io.agentreach/capability"].
func buildTool(name string, o Offer) *sdk.Tool {
	t := &sdk.Tool{
		Name:        name,
		InputSchema: InputSchema(nil),
		Meta:        sdk.Meta{capabilityMeta: o.Capability},
		Annotations: &sdk.ToolAnnotations{},
	}
	desc := ""
	if d := o.Decl; d != nil {
		desc = d.Description
		t.InputSchema = InputSchema(d.InputSchema)
		if out, ok := OutputSchema(d.OutputSchema); ok {
			t.OutputSchema = out
		}
		read := d.Mode == declare.ModeRead
		t.Annotations.ReadOnlyHint = read
		t.Annotations.IdempotentHint = read || d.Idempotent
		if d.Mode == declare.ModeWrite {
			f := false
			if d.Idempotent {
				t.Annotations.DestructiveHint = &f
			}
		}
	}
	if desc == "" {
		desc = o.TypeDescription
	}
	if desc == "" {
		desc = "Agent-Reach capability " + o.Capability
	}
	t.Description = trimDescription(desc)
	return t
}

// InputSchema returns the tool input schema of a declared input schema,
// always a JSON object with "type": "object" (what MCP requires): {"type":
// "object"} when raw is empty, not a JSON object, or declares another type
// (such a capability's payload cannot be a tool's arguments: a call is
// then refused by the schema check, BAD_REQUEST); a schema without a type,
// or whose type list holds "object", gets "type": "object". Keys that the
// SDK would refuse to serve (x-mcp-header annotations) are removed.
func InputSchema(raw json.RawMessage) map[string]any {
	m, ok := schemaObject(raw)
	if !ok {
		return map[string]any{"type": "object"}
	}
	switch typ := m["type"].(type) {
	case nil:
	case string:
		if typ != "object" {
			return map[string]any{"type": "object"}
		}
	case []any:
		if !slices.Contains(typ, any("object")) {
			return map[string]any{"type": "object"}
		}
	default:
		return map[string]any{"type": "object"}
	}
	m["type"] = "object"
	stripHeaderAnnotations(m)
	return m
}

// OutputSchema returns the tool output schema of a declared output
// schema, when it is one MCP accepts: a JSON object whose type is
// "object" (MCP's structuredContent is an object). Other declared output
// schemas are not served.
func OutputSchema(raw json.RawMessage) (map[string]any, bool) {
	m, ok := schemaObject(raw)
	if !ok || m["type"] != "object" {
		return nil, false
	}
	return m, true
}

// schemaObject decodes raw as one JSON object.
func schemaObject(raw json.RawMessage) (map[string]any, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || dec.More() || m == nil {
		return nil, false
	}
	return m, true
}

// stripHeaderAnnotations removes "x-mcp-header" from the properties of
// schema m: the SDK refuses a tool whose annotation it cannot serve, and
// Agent-Reach passes no argument in an HTTP header.
func stripHeaderAnnotations(m map[string]any) {
	props, ok := m["properties"].(map[string]any)
	if !ok {
		return
	}
	for _, p := range props {
		if pm, ok := p.(map[string]any); ok {
			delete(pm, "x-mcp-header")
		}
	}
}
