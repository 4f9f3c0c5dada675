package document_test

import (
	"fmt"

	"github.com/agent-reach/agentreach/registry/document"
)

// A document is read strictly, in JSON or YAML: an error names the field by
// its path.
func ExampleDecode() {
	type step struct {
		Name    string `json:"name"`
		Timeout int    `json:"timeout_ms"`
	}
	var flow struct {
		Steps []step `json:"steps"`
	}
	_, err := document.Decode([]byte("steps:\n  - {name: verify, timeout_ms: 500}\n  - {name: pay, timout_ms: 800}\n"), &flow)
	fmt.Println(err)
	_, err = document.Decode([]byte(`{"steps": [{"name": "verify", "timeout_ms": 500}]}`), &flow)
	fmt.Println(flow.Steps, err)
	// Output:
	// steps[1].timout_ms: unknown field (want one of name, timeout_ms)
	// [{verify 500}] <nil>
}
