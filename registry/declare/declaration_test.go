package declare_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// ordersReader is the declaration of docs/declarations.md.
const ordersReader = `{"type": "orders-reader", "version": "1.2.0", "description": "Reads the orders database",
 "capabilities": [{"name": "orders.query", "description": "Looks orders up", "mode": "read", "idempotent": true,
                   "input_schema": {"type": "object", "required": ["sku"],
                                    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1},
                                                   "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}}}},
                   "output_schema": {"type": "object"}, "timeout_ms": 2000, "cost": 0.002}],
 "labels": {"engine": ["postgres"], "region": ["eu-west", "eu-central"]},
 "limits": {"history_days": 30, "max_rows": 10000},
 "permissions": ["read"], "refuses": ["write", "delete"],
 "depends_on": ["ext.orders-db"], "tags": ["team-a"]}`

// ordersReaderYAML is the same declaration in YAML.
const ordersReaderYAML = `
type: orders-reader
version: 1.2.0
description: Reads the orders database
capabilities:
  - name: orders.query
    description: Looks orders up
    mode: read
    idempotent: true
    input_schema:
      type: object
      required: [sku]
      properties:
        sku: {type: string}
        qty: {type: integer, minimum: 1}
        items:
          type: array
          items: {type: object, properties: {n: {type: integer}}}
    output_schema: {type: object}
    timeout_ms: 2000
    cost: 0.002
labels:
  engine: [postgres]
  region: [eu-west, eu-central]
limits: {history_days: 30, max_rows: 10000}
permissions: [read]
refuses: [write, delete]
depends_on: [ext.orders-db]
tags: [team-a]
`

func compiled(t testing.TB, src string) *declare.CompiledDeclaration {
	t.Helper()
	d, err := declare.ParseDeclaration([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c, err := declare.Compile(d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseDeclarationJSONAndYAMLAgree(t *testing.T) {
	fromJSON, err := declare.ParseDeclaration([]byte(ordersReader))
	if err != nil {
		t.Fatal(err)
	}
	fromYAML, err := declare.ParseDeclaration([]byte(ordersReaderYAML))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromJSON)
	b, _ := json.Marshal(fromYAML)
	if string(a) != string(b) {
		t.Fatalf("JSON and YAML differ:\n%s\n%s", a, b)
	}
	if fromYAML.Version != "1.2.0" || *fromYAML.Capabilities[0].Cost != 0.002 || fromYAML.Labels["region"][1] != "eu-central" {
		t.Fatalf("decoded %+v", fromYAML)
	}
}

// YAML 1.2: "no", "on" and dates stay strings; anchors and merge keys work.
func TestParseDeclarationYAMLScalarsAndAnchors(t *testing.T) {
	d, err := declare.ParseDeclaration([]byte(`
type: geo
capabilities:
  - &cap {name: geo.lookup, timeout_ms: 100}
  - <<: *cap
    name: geo.reverse
labels: {country: [no, on], since: [2024-01-02]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Labels["country"]; got[0] != "no" || got[1] != "on" || d.Labels["since"][0] != "2024-01-02" {
		t.Fatalf("labels %v", d.Labels)
	}
	if c := d.Capabilities[1]; c.Name != "geo.reverse" || c.TimeoutMS != 100 {
		t.Fatalf("merged capability %+v", c)
	}
}

func TestDeclarationErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want string // in the error
	}{
		{"unknown key", `{"type":"a","capabilities":[{"name":"x"}],"lables":{}}`, `lables: unknown field (want one of type, version`},
		{"unknown nested key", `{"type":"a","capabilities":[{"name":"x"},{"name":"y","modee":"read"}]}`, `capabilities[1].modee: unknown field`},
		{"key case", `{"Type":"a","capabilities":[{"name":"x"}]}`, `Type: unknown field`},
		{"duplicate key", `{"type":"a","type":"b","capabilities":[{"name":"x"}]}`, `type: key given twice`},
		{"duplicate YAML key", "type: a\ntype: b\n", `line 2: type: key given twice (first on line 1)`},
		{"wrong type", `{"type":"a","capabilities":[{"name":"x","timeout_ms":"2s"}]}`, `capabilities[0].timeout_ms: want an integer, got a string`},
		{"fraction for integer", `{"type":"a","capabilities":[{"name":"x","timeout_ms":1.5}]}`, `capabilities[0].timeout_ms: want an integer, got the number 1.5`},
		{"label value type", `{"type":"a","capabilities":[{"name":"x"}],"labels":{"engine":[5]}}`, `labels.engine[0]: want a string, got the number 5`},
		{"not an object", `["a"]`, `want an object, got an array`},
		{"null", `null`, `want an object, got null`},
		{"two YAML documents", "type: a\n---\ntype: b\n", `more than one YAML document`},
		{"YAML syntax", "type: [a\n", `not valid YAML or JSON`},
		{"infinite YAML number", "type: a\ncapabilities: [{name: x}]\nlimits: {n: .inf}\n", `limits.n: .inf is not a finite number`},
		{"custom tag", "type: !thing a\n", `the tag !thing is not supported`},
		{"empty", ``, `the document is empty`},
		{"bad type", `{"type":"Orders Reader","capabilities":[{"name":"x"}]}`, `type: "Orders Reader" is not a valid name`},
		{"no capabilities", `{"type":"a"}`, `capabilities: at least one is required`},
		{"bad capability name", `{"type":"a","capabilities":[{"name":"x"},{"name":"Bad"}]}`, `capabilities[1].name: invalid name: capability "Bad"`},
		{"duplicate capability", `{"type":"a","capabilities":[{"name":"x"},{"name":"x"}]}`, `capabilities[1].name: "x" is declared twice`},
		{"mode", `{"type":"a","capabilities":[{"name":"x","mode":"delete"}]}`, `capabilities[0].mode: want "read", "write" or nothing, got "delete"`},
		{"negative timeout", `{"type":"a","capabilities":[{"name":"x","timeout_ms":-1}]}`, `capabilities[0].timeout_ms: must not be negative`},
		{"negative cost", `{"type":"a","capabilities":[{"name":"x","cost":-0.5}]}`, `capabilities[0].cost: must be a finite number, 0 or more`},
		{"schema does not compile", `{"type":"a","capabilities":[{"name":"x"},{"name":"y","input_schema":{"type":5}}]}`,
			`capabilities[1].input_schema: not a valid JSON Schema: type: matches none of the shapes anyOf allows: must be one of "array", "boolean"`},
		{"schema bad regex", `{"type":"a","capabilities":[{"name":"x","input_schema":{"properties":{"id":{"pattern":"("}}}}]}`,
			`capabilities[0].input_schema: not a valid JSON Schema: properties.id.pattern:`},
		{"schema not an object", `{"type":"a","capabilities":[{"name":"x","output_schema":[1]}]}`,
			`capabilities[0].output_schema: not a valid JSON Schema: want boolean or object, got array`},
		{"schema refers outside", `{"type":"a","capabilities":[{"name":"x","input_schema":{"$ref":"file:///etc/passwd"}}]}`,
			`capabilities[0].input_schema: refers to file:///etc/passwd: a schema must be self-contained`},
		{"label name", `{"type":"a","capabilities":[{"name":"x"}],"labels":{"Engine":["pg"]}}`, `labels.Engine: "Engine" is not a valid name`},
		{"label without values", `{"type":"a","capabilities":[{"name":"x"}],"labels":{"engine":[]}}`, `labels.engine: at least one value is required`},
		{"empty label value", `{"type":"a","capabilities":[{"name":"x"}],"labels":{"engine":["pg",""]}}`, `labels.engine[1]: must not be empty`},
		{"limit name", `{"type":"a","capabilities":[{"name":"x"}],"limits":{"max rows":1}}`, `limits.max rows: "max rows" is not a valid name`},
		{"limit too large", `{"type":"a","capabilities":[{"name":"x"}],"limits":{"rows":1e400}}`, `limits.rows: 1e400 is out of range`},
		{"permission name", `{"type":"a","capabilities":[{"name":"x"}],"permissions":["read","WRITE"]}`, `permissions[1]: "WRITE" is not a valid name`},
		{"permission twice", `{"type":"a","capabilities":[{"name":"x"}],"permissions":["read","read"]}`, `permissions[1]: "read" is listed twice`},
		{"granted and refused", `{"type":"a","capabilities":[{"name":"x"}],"permissions":["read","write"],"refuses":["delete","write"]}`,
			`refuses[1]: "write" is also in permissions`},
		{"dependency name", `{"type":"a","capabilities":[{"name":"x"}],"depends_on":["ext/db"]}`, `depends_on[0]: "ext/db" is not a valid name`},
		{"empty tag", `{"type":"a","capabilities":[{"name":"x"}],"tags":[" "]}`, `tags[0]: must not be empty`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := declare.ParseDeclaration([]byte(tc.src))
			if !errors.Is(err, declare.ErrInvalidDeclaration) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want ErrInvalidDeclaration containing %q, got %v", tc.want, err)
			}
		})
	}
}

// Validate reports every problem at once, in a stable order.
func TestDeclarationValidateListsEveryProblem(t *testing.T) {
	d := &declare.Declaration{Type: "a", Capabilities: []declare.DeclaredCapability{{Name: "x", TimeoutMS: -1}},
		Labels: map[string][]string{"b": {""}, "a": {""}}}
	err := d.Validate()
	want := `invalid capability declaration: capabilities[0].timeout_ms: must not be negative, got -1; labels.a[0]: must not be empty; labels.b[0]: must not be empty`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

func TestValidateInput(t *testing.T) {
	d := compiled(t, ordersReader)
	if c, ok := d.Capability("orders.query"); !ok || c.Mode != declare.ModeRead || !c.Idempotent || c.TimeoutMS != 2000 {
		t.Fatalf("Capability(orders.query) = %+v, %v", c, ok)
	}
	if _, ok := d.Capability("orders.write"); ok {
		t.Fatal("an undeclared capability is declared")
	}
	mp := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name        string
		capability  string
		contentType string
		body        []byte
		want        string // "" for valid
	}{
		{"valid", "orders.query", streams.ContentTypeJSON, []byte(`{"sku":"a-1","qty":2}`), ""},
		{"missing field", "orders.query", streams.ContentTypeJSON, []byte(`{"qty":2}`), `payload: field "sku" is required`},
		{"wrong type", "orders.query", streams.ContentTypeJSON, []byte(`{"sku":"a","qty":"two"}`), `payload.qty: want integer, got string`},
		{"below minimum", "orders.query", streams.ContentTypeJSON, []byte(`{"sku":"a","qty":0}`), `payload.qty: must be at least 1, got 0`},
		{"inside an array", "orders.query", streams.ContentTypeJSON, []byte(`{"sku":"a","items":[{"n":1},{"n":"x"}]}`), `payload.items[1].n: want integer, got string`},
		{"several problems", "orders.query", streams.ContentTypeJSON, []byte(`{"qty":"x"}`), `payload: field "sku" is required (and 1 more problem)`},
		{"not an object", "orders.query", streams.ContentTypeJSON, []byte(`[1]`), `payload: want object, got array`},
		{"empty", "orders.query", streams.ContentTypeJSON, nil, `payload: want object, got null`},
		{"malformed JSON", "orders.query", streams.ContentTypeJSON, []byte(`{"sku":`), `payload is not valid application/json`},
		{"msgpack valid", "orders.query", streams.ContentTypeMsgpack, mp(map[string]any{"sku": "a", "qty": 3}), ""},
		{"msgpack wrong type", "orders.query", streams.ContentTypeMsgpack, mp(map[string]any{"sku": "a", "qty": 1.5}), `payload.qty: want integer, got number`},
		{"msgpack binary", "orders.query", streams.ContentTypeMsgpack, mp(map[string]any{"sku": []byte("a")}), `payload.sku: holds a value JSON cannot express`},
		{"msgpack claiming a huge map", "orders.query", streams.ContentTypeMsgpack, []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, `payload is not one well-formed msgpack value`},
		{"unsupported type", "orders.query", "text/plain", []byte(`x`), `unsupported content type "text/plain"`},
		{"undeclared capability", "orders.write", streams.ContentTypeJSON, []byte(`[]`), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := d.ValidateInput(tc.capability, tc.contentType, tc.body)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (!errors.Is(err, declare.ErrInvalidPayload) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want ErrInvalidPayload containing %q, got %v", tc.want, err)
			}
		})
	}
}

func BenchmarkValidateInput(b *testing.B) {
	d := compiled(b, ordersReader)
	body := []byte(`{"sku":"a-1","qty":2,"items":[{"n":1},{"n":2}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := d.ValidateInput("orders.query", streams.ContentTypeJSON, body); err != nil {
			b.Fatal(err)
		}
	}
}
