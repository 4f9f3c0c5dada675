package connect

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// FuzzToolDeclaration feeds tools/list results, as an upstream MCP server
// could send them, through the tool → declaration path: it never panics,
// every tool served has a valid capability, and the declaration of what is
// served validates.
func FuzzToolDeclaration(f *testing.F) {
	f.Add([]byte(`{"tools":[{"name":"add","inputSchema":{"type":"object","properties":{"a":{"type":"integer"}}}}]}`))
	f.Add([]byte(`{"tools":[{"name":"x","inputSchema":{"type":7}},{"name":"x","inputSchema":{}},{"name":"getX","annotations":{"readOnlyHint":true}}]}`))
	f.Add([]byte(`{"tools":[{"name":"a..b"},{"name":"r","inputSchema":{"$ref":"http://x/y"},"outputSchema":{"type":"object"}},null]}`))
	f.Add([]byte(`{"tools":[{"name":"d","inputSchema":{"$defs":{"n":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/n"}}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var res mcp.ListToolsResult
		if json.Unmarshal(data, &res) != nil {
			return
		}
		var entries []entry
		for _, tl := range res.Tools {
			dc, err := ToolCapability("up", tl)
			name := ""
			if tl != nil {
				name = tl.Name
			}
			entries = append(entries, entry{name: name, cap: dc, err: err})
		}
		served, _ := resolve(entries)
		if len(served) == 0 {
			return
		}
		for _, e := range served {
			if err := streams.ValidateCapability(e.cap.Name); err != nil {
				t.Fatalf("served %q: %v", e.cap.Name, err)
			}
		}
		if err := declaration("up", "", "fuzz", served).Validate(); err != nil {
			t.Fatalf("the declaration of what is served does not validate: %v", err)
		}
	})
}

// FuzzOpenAPIDeclaration feeds OpenAPI documents through the spec →
// declaration path: it never panics, and a spec it accepts gives a valid
// declaration whose every capability has an operation.
func FuzzOpenAPIDeclaration(f *testing.F) {
	if b, err := os.ReadFile("testdata/petstore.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/a/{id}":{"get":{"operationId":"getA","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"integer","exclusiveMinimum":0}}],"responses":{"200":{"description":"ok"}}}}}}`))
	f.Add([]byte("openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths:\n  /a:\n    post:\n      operationId: a\n      requestBody:\n        content:\n          application/json:\n            schema: {$ref: '#/components/schemas/A'}\n      responses: {'200': {description: ok}}\ncomponents:\n  schemas:\n    A: {type: object, properties: {self: {$ref: '#/components/schemas/A'}}}\n"))
	f.Add([]byte("openapi: 3.0.0\npaths: {/a: {get: [\n"))
	f.Fuzz(func(t *testing.T, spec []byte) {
		ops, d, _, err := parseOpenAPI("api", spec)
		if err != nil {
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("an accepted spec gives an invalid declaration: %v", err)
		}
		if _, err := declare.Compile(d); err != nil {
			t.Fatal(err)
		}
		for _, c := range d.Capabilities {
			if ops[c.Name] == nil {
				t.Fatalf("capability %s has no operation", c.Name)
			}
		}
	})
}

// FuzzCapabilityName: a name is mapped to a valid capability or refused.
func FuzzCapabilityName(f *testing.F) {
	for _, s := range []string{"getWeather", "a..b", "files/read", "", "ÄÖ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		c, err := CapabilityName("p", name)
		if err == nil && streams.ValidateCapability(c) != nil {
			t.Fatalf("%q → invalid %q", name, c)
		}
	})
}
