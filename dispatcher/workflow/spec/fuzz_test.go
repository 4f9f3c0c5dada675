package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry"
)

// FuzzParseDefinition: a definition's decoder never panics, refuses with
// ErrInvalidDefinition, and what it accepts holds its rules (unique step
// names, a known mode per parallel step) and survives its own JSON
// unchanged.
func FuzzParseDefinition(f *testing.F) {
	f.Add([]byte(`{"name":"wf.t","steps":[{"name":"a","call":"t.a"}]}`))
	f.Add([]byte(step(`{"name":"b","parallel":{"quorum":0.6,"branches":[{"name":"x","call":"t.x","input":"$steps.a.result"}]},"when":{"any":[{"field":"$params.limit","op":"gt","value":3}]}}`)))
	f.Add([]byte("name: wf.t\nsteps:\n  - {name: a, call: t.a, on_failure: {fallback: t.b}, compensate: t.c}\noutput: $steps.a.result\n"))
	f.Add([]byte(`{"name":"wf.t","steps":[{"name":"a","call":"t.a","when":{"all":[{"all":[{"field":"$input","op":"exists"}]}]}}]}`))
	f.Add([]byte("name: wf.t\nsteps: &s [*s]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		def, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidDefinition) {
				t.Fatalf("error %v does not wrap ErrInvalidDefinition", err)
			}
			return
		}
		names := map[string]bool{}
		for _, st := range def.Steps {
			if names[st.Name] || (st.Call == "") == (st.Parallel == nil) {
				t.Fatalf("accepted step %+v", st)
			}
			names[st.Name] = true
			if p := st.Parallel; p != nil && p.Mode != "all" && p.Mode != "quorum" && p.Mode != "first" {
				t.Fatalf("accepted mode %q", p.Mode)
			}
		}
		b, err := json.Marshal(def)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(b)
		if err != nil {
			t.Fatalf("its own JSON %s does not parse: %v", b, err)
		}
		if b2, _ := json.Marshal(again); string(b2) != string(b) {
			t.Fatalf("round trip changed %s into %s", b, b2)
		}
	})
}

// FuzzCondition: compiling a condition and evaluating it against any input
// never panics; evaluation is deterministic, and a condition that cannot
// be evaluated says where.
func FuzzCondition(f *testing.F) {
	f.Add(`{"field":"$input.amount","op":"gt","value":10}`, `{"amount": 12}`)
	f.Add(`{"any":[{"field":"$input.a.b","op":"in","value":[1,"x",null]},{"field":"$steps.score.result","op":"exists","value":false}]}`, `{"a":{"b":"x"}}`)
	f.Add(`{"all":[{"field":"$input.0","op":"le","value":"$params.limit"}]}`, `[3]`)
	f.Add(`{"field":"$input.x","op":"lt","value":"m"}`, `{"x": 1e400}`)
	f.Fuzz(func(t *testing.T, cond, input string) {
		tree, err := registry.ReadTree([]byte(cond))
		if err != nil {
			return
		}
		d := &Definition{index: map[string]int{"score": 0}}
		params, _ := parseJSON([]byte(`{"limit": 10, "tags": ["gold"], "none": null}`))
		d.params = params.(map[string]any)
		nodes := 0
		c, err := compileCondition(tree, "when", d.refCheck("this step"), d.params, &nodes)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "when") {
				t.Fatalf("compile error %q does not name the condition", err)
			}
			return
		}
		in, err := parseJSON([]byte(input))
		if err != nil {
			return
		}
		s := &Scope{input: in, params: d.params, results: map[string]any{"score": in}, missing: map[string]string{}}
		var t1, t2 strings.Builder
		v1, err1 := c.Eval(s, "when", &t1)
		v2, err2 := c.Eval(s, "when", &t2)
		if v1 != v2 || (err1 == nil) != (err2 == nil) || t1.String() != t2.String() {
			t.Fatalf("%s on %s: %v/%v (%v/%v), traces %q and %q", cond, input, v1, v2, err1, err2, t1.String(), t2.String())
		}
		if err1 != nil && !strings.HasPrefix(err1.Error(), "when") {
			t.Fatalf("eval error %q does not name the condition", err1)
		}
		_ = c.String()
	})
}
