package feedback

import (
	"strconv"
	"testing"
	"time"
)

func TestRecentCallersClaimOnceWithinTheBound(t *testing.T) {
	var r recentCallers
	alice := taskCaller{source: "alice", node: "a-1"}
	r.add("t-0", alice)
	for _, c := range []struct {
		by   taskCaller
		want claimVerdict
	}{
		{taskCaller{source: "mallory", node: "a-1"}, claimNotCaller},
		{taskCaller{source: "alice", node: "b-1"}, claimWrongNode},
		{alice, claimAccepted}, // after the others' attempts
		{alice, claimScoredOnce},
	} {
		if got := r.claim("t-0", c.by, true); got != c.want {
			t.Errorf("claim by %+v of alice's task on a-1: %d, want %d", c.by, got, c.want)
		}
	}
	if got := r.claim("t-never", alice, true); got != claimUnknown {
		t.Errorf("claim of a task never finished here: %d, want claimUnknown", got)
	}
	for i := range 2 * recentCallersKept {
		r.add("t-"+strconv.Itoa(i), alice)
	}
	if n := len(r.cur) + len(r.prev); n > 2*recentCallersKept {
		t.Errorf("%d tasks remembered, at most %d wanted", n, 2*recentCallersKept)
	}
	if r.claim("t-"+strconv.Itoa(2*recentCallersKept-1), alice, true) != claimAccepted ||
		r.claim("t-"+strconv.Itoa(recentCallersKept), alice, true) != claimAccepted {
		t.Error("a task among the latest recentCallersKept is forgotten")
	}
	// Without auth the source proves nothing and is not compared; the
	// instance still is, and a task is still scored once.
	r.add("t-x", alice)
	for _, c := range []struct {
		by   taskCaller
		want claimVerdict
	}{
		{taskCaller{node: "b-1"}, claimWrongNode},
		{taskCaller{node: "a-1"}, claimAccepted},
		{taskCaller{node: "a-1"}, claimScoredOnce},
	} {
		if got := r.claim("t-x", c.by, false); got != c.want {
			t.Errorf("without auth, claim by %+v: %d, want %d", c.by, got, c.want)
		}
	}
	now := time.Now()
	if !r.logDrop("mallory", now) || r.logDrop("mallory", now.Add(feedbackLogEvery/2)) || !r.logDrop("mallory", now.Add(feedbackLogEvery)) {
		t.Error("a drop is not logged once per feedbackLogEvery per identity")
	}
}
