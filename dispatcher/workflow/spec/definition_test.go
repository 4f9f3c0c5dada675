package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// step wraps one step's JSON in a definition named wf.t, after a first
// step "a" (which later steps may refer to).
func step(s string) string {
	return `{"name":"wf.t","params":{"limit":10,"tags":["x"],"any":null},"steps":[{"name":"a","call":"t.a"},` + s + `]}`
}

func TestParseRefusesABadDefinitionNamingTheStepAndField(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      string
	}{
		{"not an object", `[1]`, "want an object with name and steps"},
		{"no name", `{"steps":[{"name":"a","call":"t.a"}]}`, "name: required"},
		{"a name that is no capability", `{"name":"Claims Review","steps":[{"name":"a","call":"t.a"}]}`, "name: "},
		{"no steps", `{"name":"wf.t","steps":[]}`, "steps: a workflow needs at least one step"},
		{"an unknown top field", `{"name":"wf.t","stages":[],"steps":[{"name":"a","call":"t.a"}]}`, "stages: unknown field"},
		{"a key given twice", `{"name":"wf.t","name":"wf.u","steps":[]}`, "name: key given twice"},
		{"a bad param name", `{"name":"wf.t","params":{"a b":1},"steps":[{"name":"a","call":"t.a"}]}`, "params.a b: a parameter name"},
		{"a step name twice", step(`{"name":"a","call":"t.b"}`), `steps[1].name: "a" is also the name of steps[0]`},
		{"a bad step name", step(`{"name":"b.c","call":"t.b"}`), `steps[1].name: "b.c"`},
		{"an unknown step field", step(`{"name":"b","call":"t.b","retry":3}`), `step "b" (steps[1]).retry: unknown field`},
		{"neither call nor parallel", step(`{"name":"b"}`), `step "b" (steps[1]): want exactly one of call`},
		{"both call and parallel", step(`{"name":"b","call":"t.b","parallel":{"branches":[{"name":"x","call":"t.x"}]}}`), `step "b" (steps[1]): want exactly one of call`},
		{"a bad capability", step(`{"name":"b","call":"T B"}`), `step "b" (steps[1]).call: `},
		{"calling itself", step(`{"name":"b","call":"wf.t"}`), `step "b" (steps[1]).call: "wf.t" is this workflow`},
		{"compensating with itself", step(`{"name":"b","call":"t.b","compensate":"wf.t"}`), `step "b" (steps[1]).compensate: "wf.t" is this workflow`},
		{"a later step referred to", step(`{"name":"b","call":"t.b","input":{"x":"$steps.c.result"}},{"name":"c","call":"t.c"}`), `step "b" (steps[1]).input.x: $steps.c.result: "c" is not a step before this step`},
		{"itself referred to", step(`{"name":"b","call":"t.b","input":"$steps.b.result.x"}`), `step "b" (steps[1]).input: $steps.b.result.x: "b" is not a step before`},
		{"an unknown param", step(`{"name":"b","call":"t.b","input":{"x":"$params.max"}}`), `step "b" (steps[1]).input.x: $params.max: no parameter "max" in params (any, limit, tags)`},
		{"an unknown root", step(`{"name":"b","call":"t.b","input":{"x":"$env.HOME"}}`), `step "b" (steps[1]).input.x: "$env.HOME": not a reference`},
		{"a steps reference without result", step(`{"name":"b","call":"t.b","input":"$steps.a.output"}`), `want $steps.<name>.result`},
		{"a reference ending in a dot", step(`{"name":"b","call":"t.b","input":"$input.x."}`), `ends with a dot`},
		{"an unknown op", step(`{"name":"b","call":"t.b","when":{"field":"$input.x","op":"like","value":"a"}}`), `step "b" (steps[1]).when.op: "like" is not a comparison`},
		{"a condition on a literal", step(`{"name":"b","call":"t.b","when":{"field":"x","op":"eq","value":"x"}}`), `step "b" (steps[1]).when.field: want a reference`},
		{"a condition against the input", step(`{"name":"b","call":"t.b","when":{"field":"$input.x","op":"eq","value":"$input.y"}}`), `step "b" (steps[1]).when.value: "$input.y": a condition compares with literals or $params`},
		{"a comparison without value", step(`{"name":"b","call":"t.b","when":{"field":"$input.x","op":"gt"}}`), `when.value: gt needs a value`},
		{"ordering a boolean", step(`{"name":"b","call":"t.b","when":{"field":"$input.x","op":"lt","value":true}}`), `when: lt compares numbers or strings, not a boolean`},
		{"ordering a number param against a string", step(`{"name":"b","call":"t.b","when":{"field":"$params.limit","op":"gt","value":"ten"}}`), `when: $params.limit is a number, which gt cannot compare with a string`},
		{"in without an array", step(`{"name":"b","call":"t.b","when":{"field":"$input.x","op":"in","value":"$params.limit"}}`), `when: in takes an array of values, not a number`},
		{"exists with a value", step(`{"name":"b","call":"t.b","when":{"field":"$input.x","op":"exists","value":1}}`), `when.value: exists takes true`},
		{"all and any at once", step(`{"name":"b","call":"t.b","when":{"all":[],"any":[]}}`), `when: want exactly one of field`},
		{"an empty all", step(`{"name":"b","call":"t.b","when":{"all":[]}}`), `when.all: want a non-empty array`},
		{"op beside any", step(`{"name":"b","call":"t.b","when":{"any":[{"field":"$input.x","op":"exists"}],"op":"eq"}}`), `when.op: belongs to a comparison`},
		{"a bad nested condition", step(`{"name":"b","call":"t.b","when":{"any":[{"all":[{"field":"$input.x","op":"ge","value":[1]}]}]}}`), `when.any[0].all[0]: ge compares numbers or strings, not an array`},
		{"skip on a critical step", step(`{"name":"b","call":"t.b","critical":true,"on_failure":"skip"}`), `step "b" (steps[1]).on_failure: a critical step's failure ends the run`},
		{"an unknown on_failure", step(`{"name":"b","call":"t.b","on_failure":"retry"}`), `step "b" (steps[1]).on_failure: want skip, abort or {fallback: <capability>}`},
		{"a bad fallback", step(`{"name":"b","call":"t.b","on_failure":{"fallback":""}}`), `step "b" (steps[1]).on_failure.fallback: want a non-empty string`},
		{"critical not a boolean", step(`{"name":"b","call":"t.b","critical":"yes"}`), `step "b" (steps[1]).critical: want true or false`},
		{"a negative timeout", step(`{"name":"b","call":"t.b","timeout_ms":-5}`), `step "b" (steps[1]).timeout_ms: want whole milliseconds`},
		{"a parallel step without branches", step(`{"name":"b","parallel":{"branches":[]}}`), `step "b" (steps[1]).parallel.branches: a parallel step needs at least one branch`},
		{"a branch name twice", step(`{"name":"b","parallel":{"branches":[{"name":"x","call":"t.x"},{"name":"x","call":"t.y"}]}}`), `parallel.branches[1].name: "x" is also the name of branches[0]`},
		{"an unknown mode", step(`{"name":"b","parallel":{"mode":"most","branches":[{"name":"x","call":"t.x"}]}}`), `parallel.mode: "most": want all, quorum or first`},
		{"a quorum beyond the branches", step(`{"name":"b","parallel":{"quorum":3,"branches":[{"name":"x","call":"t.x"}]}}`), `parallel.quorum: 3, more than the 1 branches`},
		{"a quorum that is no fraction or count", step(`{"name":"b","parallel":{"quorum":1.5,"branches":[{"name":"x","call":"t.x"}]}}`), `parallel.quorum: quorum 1.5`},
		{"a quorum with mode first", step(`{"name":"b","parallel":{"mode":"first","quorum":0.5,"branches":[{"name":"x","call":"t.x"}]}}`), `parallel.quorum: applies to mode quorum`},
		{"a branch referring to a later step", step(`{"name":"b","parallel":{"branches":[{"name":"x","call":"t.x","input":"$steps.b.result"}]}}`), `parallel.branches[0].input: $steps.b.result: "b" is not a step before`},
		{"an output referring to no step", `{"name":"wf.t","steps":[{"name":"a","call":"t.a"}],"output":{"x":"$steps.z.result"}}`, `output.x: $steps.z.result: "z" is not a step before the output`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil || !errors.Is(err, ErrInvalidDefinition) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse: %v\nwant ErrInvalidDefinition saying %q", err, c.want)
			}
		})
	}
}

func TestADefinitionRoundTripsThroughItsJSON(t *testing.T) {
	yaml := `
name: claim.review
description: the seeds' claim review
params: {threshold: 10000}
steps:
  - name: verify
    call: claim.verify
    input: {claim: $input.claim, note: "$$literal"}
    critical: true
    timeout_ms: 2000
  - name: score
    parallel: {quorum: 0.6, max_wait_ms: 500, branches: [{name: credit, call: risk.credit}, {name: fraud, call: risk.fraud, input: $input.claim}]}
  - name: manual
    when: {any: [{field: $steps.score.result.credit.score, op: lt, value: 0.3},
                 {all: [{field: $input.claim.amount, op: exists}, {field: $input.claim.amount, op: gt, value: $params.threshold}]}]}
    call: review.human
    on_failure: {fallback: review.rules}
  - name: pay
    call: payment.execute
    compensate: payment.refund
output: {decision: $steps.pay.result}
`
	def, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(b)
	if err != nil {
		t.Fatalf("its own JSON does not parse: %v\n%s", err, b)
	}
	b2, _ := json.Marshal(again)
	if string(b) != string(b2) {
		t.Fatalf("round trip changed it:\n%s\n%s", b, b2)
	}
	if p := def.Steps[1].Parallel; p.Mode != "quorum" || p.quorum.Need(2) != 2 {
		t.Errorf("parallel %+v: a quorum without a mode is mode quorum", p)
	}
	if s := def.Step("manual"); s == nil || s.Action() != ActionFallback || s.OnFailure.Fallback != "review.rules" {
		t.Errorf("manual step %+v", s)
	}
	if def.Step("verify").Action() != ActionAbort {
		t.Error("a step without on_failure aborts")
	}
	// The key of a stored definition must name it.
	if _, err := decodePolicy(PolicyPrefix+"claim.other", b); err == nil || !strings.Contains(err.Error(), "the key is workflow.claim.other") {
		t.Errorf("stored under another name: %v", err)
	}
}

func TestParamsAreOverriddenOnlyByKnownNamesOfTheirType(t *testing.T) {
	def, err := Parse([]byte(step(`{"name":"b","call":"t.b"}`)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := def.ParamsFor(`{"limit": 20, "any": "text"}`)
	if err != nil || encodeJSONString(got) != `{"any":"text","limit":20,"tags":["x"]}` {
		t.Fatalf("params %v, %v", encodeJSONString(got), err)
	}
	for override, want := range map[string]string{
		`{"limit": "20"}`: "parameter limit is a number, got a string",
		`{"max": 1}`:      `has no parameter "max"`,
		`[1]`:             "want a JSON object of parameters",
		`{"limit":`:       "want a JSON object of parameters",
	} {
		if _, err := def.ParamsFor(override); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), HeaderParams) {
			t.Errorf("override %s: %v, want an error naming %s saying %q", override, err, HeaderParams, want)
		}
	}
}

func encodeJSONString(v any) string { return string(encodeJSON(v)) }
