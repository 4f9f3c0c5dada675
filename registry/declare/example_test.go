package declare_test

import (
	"fmt"

	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// A declaration, in YAML, decides which tasks its instances may take and
// checks their payloads.
func ExampleCompiledDeclaration_Match() {
	d, err := declare.ParseDeclaration([]byte(`
type: orders-reader
capabilities:
  - name: orders.query
    input_schema: {type: object, required: [sku]}
    timeout_ms: 2000
    cost: 0.002
labels: {engine: [postgres]}
limits: {history_days: 30}
permissions: [read]
refuses: [write]
`))
	if err != nil {
		panic(err)
	}
	decl, _ := declare.Compile(d)
	for _, require := range []string{
		`{"labels": {"engine": "postgres"}, "permissions": ["read"], "max_cost": 0.01}`,
		`{"limits": {"history_days": 90}}`,
		`{"permissions": ["write"]}`,
	} {
		r, _ := declare.ParseRequirement([]byte(require))
		if ok, why := decl.Match("orders.query", r); ok {
			fmt.Println("matches")
		} else {
			fmt.Println("filtered out:", why)
		}
	}
	fmt.Println(decl.ValidateInput("orders.query", streams.ContentTypeJSON, []byte(`{"qty": 2}`)))
	// Output:
	// matches
	// filtered out: limit history_days: wants 90, declares 30
	// filtered out: refuses permission write
	// invalid payload: payload: field "sku" is required
}
