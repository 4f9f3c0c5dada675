package spec

import (
	"strings"
	"testing"
)

// A mapping writes JSON: literals as encoded once, keys in order, and each
// referenced value as the JSON it was found in — a whole result passes on
// byte for byte, a field is the slice of it — without decoding either.
func TestMappingsWriteTheReferencedJSONAsItIs(t *testing.T) {
	def, err := Parse([]byte(`
name: wf.t
params: {limit: 10, tags: [a, b]}
steps:
  - {name: a, call: t.a}
  - {name: b, call: t.b, input: $steps.a.result}
  - name: c
    call: t.c
    input: {z: $steps.a.result.order, a: [$input.items.1, "$$lit", 2], p: $params.tags, k: {x: 1, y: "$$y"}}
output: {all: $steps.a.result, first: $input.items.0.sku}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := NewScope([]byte(` {"items": [{"sku": "s-1"}, {"sku": "s-2" , "n": 1e3}]} `), def.paramsJSON)
	result := `{"order":  {"id": "A-1", "lines": [1, 2]}, "note": "x\"}"}`
	s.SetResult("a", []byte(result))
	for _, c := range []struct {
		step string
		want string
	}{
		{"a", `{"items": [{"sku": "s-1"}, {"sku": "s-2" , "n": 1e3}]}`},
		{"b", result},
		{"c", `{"a":[{"sku": "s-2" , "n": 1e3},"$lit",2],"k":{"x":1,"y":"$y"},"p":["a","b"],"z":{"id": "A-1", "lines": [1, 2]}}`},
	} {
		got, err := def.Step(c.step).BuildInput(s)
		if err != nil || string(got) != c.want {
			t.Errorf("step %s: input %s, %v\nwant %s", c.step, got, err, c.want)
		}
	}
	out, err := def.BuildOutput(s)
	if want := `{"all":` + result + `,"first":"s-1"}`; err != nil || string(out) != want {
		t.Errorf("output %s, %v\nwant %s", out, err, want)
	}
	s = NewScope([]byte(`{"items": []}`), def.paramsJSON)
	s.SetResult("a", []byte(`{"order": 5}`))
	if _, err := def.Step("c").BuildInput(s); err == nil || !strings.Contains(err.Error(), `$input.items.1: the input at items is an array of 0, and "1" is not an index of it`) {
		t.Errorf("a missing field: %v", err)
	}
}

// A JSON body is checked, not re-encoded: its bytes stand, without the
// space around them; empty is null; invalid UTF-8 is replaced as a decoder
// replaces it; anything else is BAD_REQUEST.
func TestDecodeBodyKeepsTheBytesOfValidJSON(t *testing.T) {
	for in, want := range map[string]string{
		" {\"b\": 1,  \"a\": [true]}\n": `{"b": 1,  "a": [true]}`,
		"":                              `null`,
		"  ":                            `null`,
		"\"\xff\"":                      "\"\ufffd\"",
		`12345678901234567890`:          `12345678901234567890`,
	} {
		got, e := DecodeBody("application/json", []byte(in))
		if e != nil || string(got) != want {
			t.Errorf("DecodeBody(%q) = %s, %v; want %s", in, got, e, want)
		}
	}
	for _, in := range []string{`{"a":`, `1 2`, `{a: 1}`} {
		if _, e := DecodeBody("application/json", []byte(in)); e == nil || e.Code != "BAD_REQUEST" || !strings.Contains(e.Message, "payload is not valid JSON") {
			t.Errorf("DecodeBody(%q): %v, want BAD_REQUEST", in, e)
		}
	}
}
