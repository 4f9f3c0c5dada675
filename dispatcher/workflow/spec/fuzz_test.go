package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry/document"
	"github.com/agent-reach/agentreach/streams"
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
		tree, err := document.ReadTree([]byte(cond))
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
		in, e := DecodeBody(streams.ContentTypeJSON, []byte(input))
		if e != nil {
			return
		}
		s := NewScope(in, encodeJSON(d.params))
		s.SetResult("score", in)
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

// FuzzLazyFieldAccess: a reference read by scanning a value's JSON (the
// input, a step's result) finds what the decoded value holds at its path,
// and where the path is not there fails as a walk of the decoded value
// does, with the same message.
func FuzzLazyFieldAccess(f *testing.F) {
	f.Add(`{"a": {"b": [1, {"c": "x\"y"}]}, "a": {"b": [2, {"c": 3}]}}`, "a.b.1.c")
	f.Add(`{"\u0061": [true, null, "]}"], "b": 1e400}`, "a.2")
	f.Add(`[[], {}, "x", -0.5]`, "1.k")
	f.Add(` {"items": [{"sku": "a"}], "n": 12} `, "items.3.sku")
	f.Add(`"text"`, "")
	f.Fuzz(func(t *testing.T, doc, path string) {
		raw, e := DecodeBody(streams.ContentTypeJSON, []byte(doc))
		if e != nil {
			return
		}
		text := "$input"
		if path != "" {
			text += "." + path
		}
		r, err := parseRef(text)
		if err != nil {
			return
		}
		got, gotErr := NewScope(raw, []byte(`{}`)).resolve(r)
		tree, err := parseJSON(raw)
		if err != nil {
			t.Fatalf("DecodeBody passed %q, which does not decode: %v", raw, err)
		}
		want, wantErr := walk(tree, r)
		switch {
		case (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error():
			t.Fatalf("%s in %s: error %v, want %v", text, raw, gotErr, wantErr)
		case gotErr == nil && (!equal(got, want) || typeName(got) != typeName(want)):
			t.Fatalf("%s in %s: %s, want %s", text, raw, describe(got), describe(want))
		}
	})
}

// walk resolves r's path in a decoded value, as references were resolved
// before they read JSON: the oracle of FuzzLazyFieldAccess.
func walk(v any, r *ref) (any, error) {
	for i, seg := range r.path {
		at := "the input"
		if i > 0 {
			at += " at " + strings.Join(r.path[:i], ".")
		}
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[seg]
			if !ok {
				return nil, fmt.Errorf("%s: %s has no field %q", r.text, at, seg)
			}
			v = next
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(x) {
				return nil, fmt.Errorf("%s: %s is an array of %d, and %q is not an index of it", r.text, at, len(x), seg)
			}
			v = x[n]
		default:
			return nil, fmt.Errorf("%s: %s is %s, which has no field %q", r.text, at, typeName(v), seg)
		}
	}
	return v, nil
}
