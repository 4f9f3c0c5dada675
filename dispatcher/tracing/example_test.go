package tracing_test

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/streams"
)

// Until the process installs a tracer provider nothing is traced: a
// branch gets no span, and the caller's traceparent travels unchanged.
func ExampleBranch() {
	h := nats.Header{}
	h.Set(streams.HeaderTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	span := tracing.Branch(h, "b1", "echo")
	fmt.Println(tracing.Enabled(), span == nil, h.Get(streams.HeaderTraceParent))
	tracing.End(span, nil) // harmless on nil
	// Output: false true 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
}
