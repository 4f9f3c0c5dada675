package dispatcher

import (
	"strconv"
	"testing"
	"time"
)

func TestRecentCallersClaimOnceWithinTheBound(t *testing.T) {
	var r recentCallers
	alice := taskCaller{source: "alice", node: "a-1"}
	r.add("t-0", alice)
	for _, c := range []taskCaller{{"mallory", "a-1"}, {"alice", "b-1"}} {
		if r.claim("t-0", c) {
			t.Errorf("claim by %+v of alice's task on a-1 accepted", c)
		}
	}
	if !r.claim("t-0", alice) {
		t.Fatal("alice's claim of her task refused after others' attempts")
	}
	if r.claim("t-0", alice) {
		t.Error("a second claim of a task accepted")
	}
	for i := range 2 * recentCallersKept {
		r.add("t-"+strconv.Itoa(i), alice)
	}
	if n := len(r.cur) + len(r.prev); n > 2*recentCallersKept {
		t.Errorf("%d tasks remembered, at most %d wanted", n, 2*recentCallersKept)
	}
	if !r.claim("t-"+strconv.Itoa(2*recentCallersKept-1), alice) || !r.claim("t-"+strconv.Itoa(recentCallersKept), alice) {
		t.Error("a task among the latest recentCallersKept is forgotten")
	}
	now := time.Now()
	if !r.logDrop("mallory", now) || r.logDrop("mallory", now.Add(feedbackLogEvery/2)) || !r.logDrop("mallory", now.Add(feedbackLogEvery)) {
		t.Error("a drop is not logged once per feedbackLogEvery per identity")
	}
}
