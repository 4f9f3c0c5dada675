package events

import (
	"testing"
	"time"
)

// BenchmarkAppend writes a broadcast branch's record, as a dispatcher does
// for every task.
func BenchmarkAppend(b *testing.B) {
	ev := Event{RequestID: "e9c0b958-3b4e-4ac9-9962-aca6af83437c", OrchestrationID: "4dd9084f-4196-42bf-970d-8b63f638e9d7",
		Capability: "bc.echo", Tier: "direct", Dispatcher: "dispatcher-1", Status: "FINISHED", Outcome: OutcomeReply,
		Candidates: 1000, Node: "bc-0042", Attempts: 1, LatencyMS: 12.345, Start: time.Now(),
		ParentID: "4dd9084f-4196-42bf-970d-8b63f638e9d7"}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = Append(buf[:0], &ev)
	}
}
