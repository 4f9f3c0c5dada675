package spec_test

import (
	"fmt"

	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
)

// A definition is read from YAML (or JSON) and validated before anything
// runs; a mistake is refused with the step and the field named.
func ExampleParse() {
	def, err := spec.Parse([]byte(`
name: claim.review
params: {threshold: 10000}
steps:
  - name: verify
    call: claim.verify
    input: {claim: $input.claim}
    critical: true
  - name: manual
    when: {field: $input.claim.amount, op: gt, value: $params.threshold}
    call: review.human
    on_failure: skip
`))
	fmt.Println(len(def.Steps), def.Steps[1].When, err)

	_, err = spec.Parse([]byte(`
name: claim.review
steps:
  - name: pay
    call: payment.execute
    input: {amount: $steps.verify.result.amount}
`))
	fmt.Println(err)
	// Output:
	// 2 $input.claim.amount gt $params.threshold <nil>
	// workflow: invalid definition: step "pay" (steps[0]).input.amount: $steps.verify.result.amount: "verify" is not a step before this step (a step may use only the results of earlier steps)
}
