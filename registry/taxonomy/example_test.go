package taxonomy_test

import (
	"fmt"

	"github.com/agent-reach/agentreach/registry/taxonomy"
)

func ExampleCheck() {
	tx, err := taxonomy.Parse([]byte(`{"types": [{"name": "query", "description": "reads data"}, {"name": "math"}]}`))
	if err != nil {
		panic(err)
	}
	// A declaration's capabilities against the rest of the catalog.
	for _, w := range taxonomy.Check(tx, []string{"data-query", "math.add"}, []string{"query", "math.sub"}) {
		fmt.Println(w.Kind, w.Capability, w.Other)
	}
	// Output:
	// near_duplicate data-query query
	// outside_taxonomy data-query query
}
