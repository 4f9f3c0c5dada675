package document_test

import (
	"encoding/json"
	"testing"

	"github.com/agent-reach/agentreach/registry/document"
)

// FuzzYAMLToJSON: the YAML reader never panics, and what it accepts is one
// JSON document that ReadTree reads back.
func FuzzYAMLToJSON(f *testing.F) {
	for _, seed := range []string{
		"type: a\ncapabilities:\n  - &c {name: x, cost: 0}\n  - <<: *c\n    name: y\nlabels: {k: [no, '1']}\n",
		"a: 1\na: 2\n", "? [a]\n: b\n", "--- 1\n--- 2\n", "x: !custom 1\n", "n: .inf\n", "t: 2001-12-14\n",
		"a: &a [*a]\n", `{"json": "too"}`, "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := document.YAMLToJSON(data)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q: accepted as %q, not JSON", data, out)
		}
		if _, err := document.ReadTree(out); err != nil && document.CheckUTF8(out) == nil {
			t.Fatalf("%q: accepted as %s, which ReadTree refuses: %v", data, out, err)
		}
	})
}
