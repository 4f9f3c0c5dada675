package taxonomy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry/policy"
)

func TestParse(t *testing.T) {
	tx, err := Parse([]byte("types:\n  - name: query\n    description: reads data\n  - name: transform\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tx.Names(); !slices.Equal(got, []string{"query", "transform"}) || tx.Types[0].Description != "reads data" {
		t.Errorf("parsed %+v", tx)
	}
	for _, c := range []struct{ doc, field string }{
		{`{}`, "types: required"},
		{`{"types": "query"}`, "types: want a list"},
		{`{"types": [{"name": "query"}], "extra": 1}`, "extra: unknown key"},
		{`{"types": [{"name": "Query"}]}`, "types[0].name"},
		{`{"types": [{"name": "a.b"}]}`, "types[0].name: \"a.b\": a type is one token"},
		{`{"types": [{"name": "q"}, {"name": "q"}]}`, "types[1].name: \"q\" is also types[0]"},
		{`{"types": [{"name": "q", "colour": "red"}]}`, "types[0].colour: unknown key"},
		{`{"types": [{"name": 3}]}`, "types[0].name: want a string"},
		{`{"types": [{}]}`, "types[0].name: required"},
		{`{"types": [{"name": "q"}], "types": []}`, "types"},
		{`[1]`, "want an object"},
	} {
		_, err := Parse([]byte(c.doc))
		if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Parse(%s) = %v, want ErrInvalidPolicy naming %q", c.doc, err, c.field)
		}
	}
	if err := policy.ValidateKey(PolicyKey); err != nil {
		t.Errorf("the key %s is not accepted: %v", PolicyKey, err)
	}
	if _, err := policy.Parse("taxonomy.other", []byte(`{"types": []}`)); err == nil {
		t.Error("a taxonomy under another key is accepted")
	}
}

func TestNearDuplicate(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"query", "data-query", true},
		{"data-query", "database.query", true},
		{"query", "database_query", true},
		{"data query", "Database Query", true},
		{"data-query", "data_query", true},
		{"orders.query", "orders.qeury", true},  // one swap
		{"orders.query", "orders.querys", true}, // one insertion
		{"orders.query", "users.query", false},
		{"math.add", "math.sub", false}, // short words must be equal
		{"math.add", "math.and", false},
		{"cap001.work", "cap002.work", false}, // words with digits must be equal
		{"model.gpt4", "model.gpt", false},
		{"echo", "echo", false},                     // the same name
		{"translate", "translate.fr.formal", false}, // two words more
		{"echo", "slow", false},
		{"", "x", false},
	} {
		if got := NearDuplicate(c.a, c.b); got != c.want {
			t.Errorf("NearDuplicate(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := NearDuplicate(c.b, c.a); got != c.want {
			t.Errorf("NearDuplicate(%q, %q) = %v, want %v (symmetric)", c.b, c.a, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	tx, err := Parse([]byte(`{"types": [{"name": "query"}, {"name": "math"}, {"name": "echo"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := Check(tx, []string{"query.orders", "querry.users", "math.add", "math.add"}, []string{"query.order", "echo", "math.add"})
	var lines []string
	for _, w := range got {
		lines = append(lines, w.Capability+" "+w.Kind+" "+w.Other)
	}
	want := []string{
		"querry.users outside_taxonomy query",
		"query.orders near_duplicate query.order",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("Check = %q, want %q", lines, want)
	}
	if !strings.Contains(got[0].Message, `its type "querry" is not in the taxonomy (query, math, echo); did you mean "query"?`) {
		t.Errorf("message: %s", got[0].Message)
	}
	// Without a taxonomy only near-duplicates are warned of.
	if got := Check(nil, []string{"storage.write", "weird.thing"}, []string{"storage.writes"}); len(got) != 1 || got[0].Kind != KindNearDuplicate {
		t.Errorf("Check without a taxonomy = %+v, want one near-duplicate", got)
	}
	if TypeOf("orders.query") != "orders" || TypeOf("echo") != "echo" {
		t.Error("TypeOf is not the first token")
	}
	var none *Taxonomy
	if !none.Has("anything") || none.Names() != nil {
		t.Error("a nil taxonomy must have every type")
	}
}

// BenchmarkCheckCatalog: the dashboard checks every pair of a catalog's
// names (200 here, as in the dashboard's scale benchmark).
func BenchmarkCheckCatalog(b *testing.B) {
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("cap%03d.work", i)
	}
	tx := &Taxonomy{Types: []Type{{Name: "cap001"}}}
	b.ReportAllocs()
	for b.Loop() {
		Check(tx, names, nil)
	}
}
