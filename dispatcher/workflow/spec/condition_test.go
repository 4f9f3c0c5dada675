package spec

import (
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry/document"
)

// compiled reads a condition the way a definition's step 1 would see it:
// after step "score", with params limit (10) and tags (["gold","silver"]).
func compiled(t testing.TB, doc string) (*Condition, error) {
	t.Helper()
	tree, err := document.ReadTree([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	d := &Definition{index: map[string]int{"score": 0, "manual": 1}}
	params, _ := parseJSON([]byte(`{"limit": 10, "tags": ["gold", "silver"], "none": null}`))
	d.params = params.(map[string]any)
	nodes := 0
	return compileCondition(tree, "when", d.refCheck("this step"), d.params, &nodes)
}

func testScope(t testing.TB) *Scope {
	s := NewScope([]byte(`{"amount": 12000, "tier": "gold", "items": [{"sku": "a"}], "big": 9007199254740993, "flag": false, "nothing": null}`),
		[]byte(`{"limit": 10, "tags": ["gold", "silver"], "none": null}`))
	s.SetResult("score", []byte(`{"credit": {"score": 0.21}, "label": "high"}`))
	s.SetMissing("manual", "was skipped: its condition is false")
	return s
}

func TestConditionsEvaluateWithTheirTrace(t *testing.T) {
	s := testScope(t)
	for _, c := range []struct {
		doc   string
		want  bool
		trace string
	}{
		{`{"field":"$input.amount","op":"gt","value":10000}`, true, `$input.amount (12000) gt 10000 → true`},
		{`{"field":"$input.amount","op":"le","value":"$params.limit"}`, false, `$input.amount (12000) le $params.limit (10) → false`},
		{`{"field":"$input.amount","op":"eq","value":12000.0}`, true, `$input.amount (12000) eq 12000.0 → true`},
		{`{"field":"$input.big","op":"gt","value":9007199254740992}`, true, `$input.big (9007199254740993) gt 9007199254740992 → true`},
		{`{"field":"$input.tier","op":"in","value":"$params.tags"}`, true, `$input.tier ("gold") in $params.tags (["gold","silver"]) → true`},
		{`{"field":"$input.tier","op":"ne","value":"gold"}`, false, `$input.tier ("gold") ne "gold" → false`},
		{`{"field":"$input.tier","op":"lt","value":"silver"}`, true, `$input.tier ("gold") lt "silver" → true`},
		{`{"field":"$input.items.0.sku","op":"eq","value":"a"}`, true, `$input.items.0.sku ("a") eq "a" → true`},
		{`{"field":"$input.flag","op":"eq","value":false}`, true, `$input.flag (false) eq false → true`},
		{`{"field":"$input.nothing","op":"eq","value":null}`, true, `$input.nothing (null) eq null → true`},
		{`{"field":"$input.missing","op":"exists"}`, false, `$input.missing (absent) exists → false`},
		{`{"field":"$input.missing","op":"exists","value":false}`, true, `$input.missing (absent) exists false → true`},
		{`{"field":"$steps.score.result.credit.score","op":"lt","value":0.3}`, true, `$steps.score.result.credit.score (0.21) lt 0.3 → true`},
		{`{"any":[{"field":"$input.tier","op":"eq","value":"gold"},{"field":"$input.missing","op":"gt","value":1}]}`, true,
			`any[$input.tier ("gold") eq "gold" → true] → true`},
		{`{"all":[{"field":"$input.missing","op":"exists"},{"field":"$input.missing","op":"gt","value":1}]}`, false,
			`all[$input.missing (absent) exists → false] → false`},
		{`{"all":[{"field":"$input.amount","op":"ge","value":1},{"any":[{"field":"$input.flag","op":"eq","value":true},{"field":"$input.tier","op":"in","value":["gold"]}]}]}`, true,
			`all[$input.amount (12000) ge 1 → true, any[$input.flag (false) eq true → false, $input.tier ("gold") in ["gold"] → true] → true] → true`},
	} {
		cond, err := compiled(t, c.doc)
		if err != nil {
			t.Fatalf("%s: %v", c.doc, err)
		}
		var trace strings.Builder
		got, err := cond.Eval(s, "when", &trace)
		if err != nil || got != c.want || trace.String() != c.trace {
			t.Errorf("%s: %v, %v, trace %q\nwant %v, trace %q", c.doc, got, err, trace.String(), c.want, c.trace)
		}
	}
}

func TestAConditionThatCannotBeEvaluatedNamesWhy(t *testing.T) {
	s := testScope(t)
	for doc, want := range map[string]string{
		`{"field":"$input.missing","op":"gt","value":1}`:                                                                    `when: $input.missing: the input has no field "missing"`,
		`{"field":"$steps.score.result.label","op":"gt","value":0.5}`:                                                       `when: $steps.score.result.label is a string ("high"), which gt cannot compare with a number 0.5`,
		`{"field":"$steps.manual.result.ok","op":"eq","value":true}`:                                                        `when: $steps.manual.result.ok: step manual has no result (it was skipped: its condition is false)`,
		`{"field":"$input.items.3.sku","op":"eq","value":"a"}`:                                                              `the input at items is an array of 1, and "3" is not an index of it`,
		`{"field":"$input.amount.cents","op":"eq","value":1}`:                                                               `the input at amount is a number, which has no field "cents"`,
		`{"field":"$input.tier","op":"in","value":"$params.none"}`:                                                          `when: in takes an array of values, and $params.none (null) is null`,
		`{"any":[{"field":"$input.flag","op":"eq","value":true},{"field":"$input.tier","op":"ge","value":"$params.none"}]}`: `when.any[1]: $input.tier is a string ("gold"), which ge cannot compare with null`,
	} {
		cond, err := compiled(t, doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		var trace strings.Builder
		if _, err := cond.Eval(s, "when", &trace); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant an error saying %q", doc, err, want)
		}
	}
}
