package engine

import (
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"testing"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

// A task's exclusions list at most the limit — the view's first, then what
// its picks passed over — and count them all, however many the view holds.
func TestExclusionsAreListedUpToTheLimitAndAllCounted(t *testing.T) {
	d := &Engine{}
	v := &selection.View{}
	for i := range 9000 {
		v.Excluded = append(v.Excluded, streams.Exclusion{Node: fmt.Sprint("n-", i), Reason: "labels"})
	}
	tk := &Task{view: v, passed: []streams.Exclusion{{Node: "busy-1", Reason: "breaker open"}}}
	list, total := d.exclusions(tk, false, events.ExcludedInEvents)
	if total != 9001 || len(list) != events.ExcludedInEvents || list[0].Node != "n-0" || list[events.ExcludedInEvents-1].Node != fmt.Sprint("n-", events.ExcludedInEvents-1) {
		t.Fatalf("exclusions: %d listed (%v), %d in all; want %d listed from n-0, 9001 in all", len(list), list, total, events.ExcludedInEvents)
	}
	list[0].Node = "changed"
	if v.Excluded[0].Node != "n-0" {
		t.Fatal("the list shares the view's entries: changing it changed the view")
	}
	v.Excluded = v.Excluded[:3]
	if list, total = d.exclusions(tk, false, events.ExcludedInEvents); total != 4 || len(list) != 4 || list[3].Node != "busy-1" {
		t.Fatalf("a short view: %v, %d in all; want the 3 and busy-1", list, total)
	}
}
