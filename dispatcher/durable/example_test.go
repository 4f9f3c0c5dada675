package durable_test

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/streams"
)

// A submission without Reach-Request-Id is known by the request id in its
// Nats-Msg-Id, "<source>.<request-id>".
func ExampleRequestIDOfSubmission() {
	h := nats.Header{}
	h.Set(streams.HeaderMsgID, streams.SubmissionID("alice", "order-17"))
	fmt.Println(durable.RequestIDOfSubmission(h))
	// Output: order-17
}
