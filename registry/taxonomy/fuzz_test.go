package taxonomy

import "testing"

// FuzzParse: any document is parsed or refused without panicking, and one
// parsed holds only valid, distinct type names.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"types": [{"name": "query", "description": "reads"}]}`, "types:\n  - name: a\n", `{"types": [{"name": 1}]}`, `[]`, `{"types": null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tx, err := Parse(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, ty := range tx.Types {
			if validateTypeName(ty.Name) != nil || seen[ty.Name] {
				t.Fatalf("parsed a bad or repeated type %q", ty.Name)
			}
			seen[ty.Name] = true
		}
	})
}

// FuzzNearDuplicate: the relation is symmetric, irreflexive and never
// panics.
func FuzzNearDuplicate(f *testing.F) {
	f.Add("query", "data-query")
	f.Add("orders.qeury", "orders.query")
	f.Fuzz(func(t *testing.T, a, b string) {
		if NearDuplicate(a, b) != NearDuplicate(b, a) {
			t.Fatalf("not symmetric for %q, %q", a, b)
		}
		if NearDuplicate(a, a) {
			t.Fatalf("%q is its own near-duplicate", a)
		}
	})
}
