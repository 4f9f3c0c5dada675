package events_test

import (
	"fmt"

	"github.com/agent-reach/agentreach/dispatcher/events"
)

// Records travel one JSON object per line; a message holds one or many.
func ExampleDecodeEvents() {
	var msg []byte
	msg = events.Append(msg, &events.Event{RequestID: "r1", Capability: "echo", Status: "FINISHED", Attempts: 1})
	msg = events.Append(msg, &events.Event{RequestID: "r2", Capability: "echo", Status: "FAILED", Code: "BIZ_REJECT", Attempts: 1})
	evs, err := events.DecodeEvents(msg)
	if err != nil {
		panic(err)
	}
	var total events.Counts
	for i := range evs {
		total.Add(evs[i].Count())
	}
	fmt.Printf("%d records: %d finished, %d rejected\n", len(evs), total.Finished, total.Rejected)
	// Output: 2 records: 1 finished, 1 rejected
}
