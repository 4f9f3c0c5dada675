package eventstats

import (
	"errors"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"math"
	"strings"
	"testing"
	"time"
)

// clock is a settable time for the aggregator.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newTestAggregator(t *testing.T, c *clock) *Aggregator {
	t.Helper()
	a, err := New(Config{Window: time.Hour, Buckets: 360, Now: c.Now,
		TypeOf: func(id string) string {
			return map[string]string{"echo-1": "echo", "echo-2": "echo", "risk-1": "risk"}[id]
		}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func score(v float64) *float64 { return &v }

// within reports whether got is within 10 % of want (the histogram's
// resolution).
func within(got, want float64) bool { return math.Abs(got-want) <= 0.1*want }

// knownSet adds: echo, 100 tasks of 1..100 ms on echo-1 (odd) and echo-2
// (even), every 25th a TIMEOUT after 3 attempts, each costing 0.5; risk, 10
// tasks of 200 ms on risk-1, the first hedged (2 attempts, no retry), one
// NO_AGENT nothing was delivered for and one BIZ_REJECT (the caller's own
// doing); feedback 0.5 and 1 for two echo tasks of echo-1; a fan-out's own
// record, which counts as a fan-out of 2 branches and no task, and a review
// resolution, which counts for nothing.
func knownSet(a *Aggregator, at time.Time) {
	for i := 1; i <= 100; i++ {
		ev := &events.Event{RequestID: fmt.Sprintf("e%d", i), Capability: "echo", Status: "FINISHED", Outcome: "reply",
			Node: "echo-1", Attempts: 1, Cost: 0.5, LatencyMS: float64(i), Start: at}
		if i%2 == 0 {
			ev.Node = "echo-2"
		}
		if i%25 == 0 {
			ev.Status, ev.Code, ev.Attempts = "TIMEOUT", "TIMEOUT", 3
		}
		a.Add(ev)
	}
	for i := range 10 {
		ev := &events.Event{RequestID: fmt.Sprintf("r%d", i), Capability: "risk", Status: "FINISHED", Outcome: "reply",
			Node: "risk-1", Attempts: 1, LatencyMS: 200, Start: at}
		if i == 0 {
			ev.Hedged, ev.Attempts = true, 2
		}
		a.Add(ev)
	}
	a.Add(&events.Event{RequestID: "b1", Capability: "risk", Status: "FAILED", Code: "BIZ_REJECT", Outcome: "reply",
		Node: "risk-1", Attempts: 1, LatencyMS: 200, Start: at})
	a.Add(&events.Event{RequestID: "n1", Capability: "risk", Status: "FAILED", Code: "NO_AGENT", Outcome: "reply", Start: at,
		Error: "no routable instance offers risk"})
	a.Add(&events.Event{RequestID: "e1", Kind: "feedback", Node: "echo-1", Score: score(0.5), Start: at})
	a.Add(&events.Event{RequestID: "e3", Kind: "feedback", Node: "echo-1", Score: score(1), Start: at})
	a.Add(&events.Event{RequestID: "f1", Capability: "fanout", Kind: "fanout", Status: "FINISHED", Expected: 2, Start: at})
	a.Add(&events.Event{RequestID: "e5", Capability: "echo", Outcome: "review_drop", Status: "FAILED", Start: at})
}

func TestSummaryOfAKnownSet(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)}
	a := newTestAggregator(t, c)
	knownSet(a, c.now.Add(-10*time.Minute))
	if got := a.Added(); got != 115 {
		t.Errorf("Added = %d, want 115 (112 tasks, 2 scores, a fan-out)", got)
	}

	s, err := a.Summary(ByCapability, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != 2 || s.Rows[0].Key != "echo" || s.Rows[1].Key != "risk" {
		t.Fatalf("rows %+v, want echo then risk", s.Rows)
	}
	echo, risk := s.Rows[0], s.Rows[1]
	if echo.Tasks != 100 || echo.Finished != 96 || echo.Failed != 4 || echo.SuccessRate != 0.96 || echo.Retries != 8 ||
		echo.Cost != 50 || echo.CostPerTask != 0.5 || echo.Errors["TIMEOUT"] != 4 || echo.Scores != 2 || *echo.Quality != 0.75 {
		t.Errorf("echo %+v", echo)
	}
	if !within(echo.LatencyP50MS, 50) || !within(echo.LatencyP95MS, 95) || !within(echo.LatencyP99MS, 99) || echo.LatencyMean != 50.5 {
		t.Errorf("echo latency p50 %v p95 %v p99 %v mean %v, want about 50, 95, 99 and exactly 50.5",
			echo.LatencyP50MS, echo.LatencyP95MS, echo.LatencyP99MS, echo.LatencyMean)
	}
	if risk.Tasks != 12 || risk.Finished != 10 || risk.Rejected != 1 || risk.Failed != 1 || risk.Hedged != 1 || risk.Retries != 0 || risk.Errors["NO_AGENT"] != 1 || risk.Quality != nil {
		t.Errorf("risk %+v", risk)
	}
	if s.Total.Tasks != 112 || s.Total.Finished != 106 || s.Total.Rejected != 1 || s.Total.Failed != 5 ||
		s.Total.FanOuts != 1 || s.Total.Branches != 2 || s.Total.Broadcasts != 0 {
		t.Errorf("total %+v, want 112 tasks: 106 finished, 1 rejected, 5 failed; 1 fan-out of 2 branches", s.Total)
	}
	if len(s.Failures) != 6 || s.Failures[0].RequestID != "n1" || s.Failures[0].Class != events.ClassFailed ||
		s.Failures[0].Message != "no routable instance offers risk" ||
		s.Failures[1].RequestID != "b1" || s.Failures[1].Class != events.ClassRejected {
		t.Errorf("failures %+v, want 6, newest (n1, failed; b1, rejected) first", s.Failures)
	}

	byAgent, err := a.Summary(ByAgent, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"echo-1": 50, "echo-2": 50, "risk-1": 11, NoneKey: 1}
	for _, r := range byAgent.Rows {
		if r.Tasks != want[r.Key] {
			t.Errorf("agent %s: %d tasks, want %d", r.Key, r.Tasks, want[r.Key])
		}
		if r.Key == "echo-1" && (r.Scores != 2 || *r.Quality != 0.75) {
			t.Errorf("echo-1 quality %v from %d scores, want 0.75 from 2", r.Quality, r.Scores)
		}
	}
	byType, err := a.Summary(ByType, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(byType.Rows) != 3 || byType.Rows[0].Key != "echo" || byType.Rows[0].Tasks != 100 || byType.Rows[1].Key != "risk" ||
		byType.Rows[2].Key != NoneKey {
		t.Errorf("by type %+v", byType.Rows)
	}
}

func TestSummaryWindowSlides(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)}
	a := newTestAggregator(t, c)
	a.Add(&events.Event{RequestID: "old", Capability: "echo", Status: "FINISHED", Attempts: 1, LatencyMS: 1, Start: c.now.Add(-50 * time.Minute)})
	a.Add(&events.Event{RequestID: "new", Capability: "echo", Status: "FINISHED", Attempts: 1, LatencyMS: 1, Start: c.now.Add(-5 * time.Minute)})
	a.Add(&events.Event{RequestID: "gone", Capability: "echo", Status: "FINISHED", Start: c.now.Add(-2 * time.Hour)})
	tasks := func(since time.Duration) int64 {
		s, err := a.Summary(ByCapability, since)
		if err != nil {
			t.Fatal(err)
		}
		return s.Total.Tasks
	}
	if got := tasks(0); got != 2 {
		t.Errorf("the hour: %d tasks, want 2 (the one older than the window is dropped)", got)
	}
	if got := tasks(10 * time.Minute); got != 1 {
		t.Errorf("the last 10 min: %d tasks, want 1", got)
	}
	c.now = c.now.Add(20 * time.Minute) // the old one leaves the window
	if got := tasks(0); got != 1 {
		t.Errorf("20 min later: %d tasks, want 1", got)
	}
	series, err := a.Series(10 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 0 {
		t.Errorf("series of the last 10 min: %v, want none (the task is 25 min old)", series)
	}
	series, err = a.Series(30 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, p := range series["echo"] {
		n += p.Tasks
	}
	if pts := len(series["echo"]); pts != 180 || n != 1 {
		t.Errorf("series of the last 30 min: %d points holding %d tasks, want 180 (10 s each) holding 1", pts, n)
	}
}

func TestBadQueries(t *testing.T) {
	a, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []Query{{By: "region"}, {Since: "yesterday"}, {Since: "-5m"}, {Since: "2h"}} {
		if _, e := a.Answer(q); e == nil || e.Code != "BAD_REQUEST" {
			t.Errorf("%+v: %v, want BAD_REQUEST", q, e)
		}
	}
	if _, err := a.Summary("x", 0); !errors.Is(err, ErrInvalidQuery) {
		t.Errorf("Summary by x: %v, want ErrInvalidQuery", err)
	}
	for _, cfg := range []Config{{Window: time.Millisecond}, {Buckets: -1}, {MaxKeys: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestKeysAreBounded(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)}
	a, err := New(Config{MaxKeys: 2, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, capability := range []string{"a", "b", "c", "d"} {
		a.Add(&events.Event{RequestID: capability, Capability: capability, Status: "FINISHED", Start: c.now})
	}
	s, _ := a.Summary(ByCapability, 0)
	got := map[string]int64{}
	for _, r := range s.Rows {
		got[r.Key] = r.Tasks
	}
	if len(got) != 3 || got["a"] != 1 || got["b"] != 1 || got[OtherKey] != 2 {
		t.Errorf("rows %v, want a, b and other with 2", got)
	}
}

func TestQuantilesStayWithinWhatWasSeen(t *testing.T) {
	var h histogram
	h.add(2000)
	if q := h.quantile(0.5); q != 2000 {
		t.Errorf("one sample of 2000 ms: p50 %v, want 2000 exactly", q)
	}
	h.add(10)
	if q := h.quantile(0.99); q != 2000 {
		t.Errorf("p99 of 10 and 2000 ms: %v, want 2000", q)
	}
	if q := h.quantile(0.01); q != 10 {
		t.Errorf("p1 of 10 and 2000 ms: %v, want 10", q)
	}
}

// NO_AGENT for a name never registered is the caller's doing: counted
// rejected and listed so, with its message; NO_AGENT for a known name
// stays the service's.
func TestUnknownNameIsTheCallers(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)}
	a := newTestAggregator(t, c)
	at := c.now.Add(-time.Minute)
	a.Add(&events.Event{RequestID: "u1", Capability: "tranlsate", Status: "FAILED", Code: "NO_AGENT", Outcome: "reply",
		Start: at, Unknown: true, Error: "no routable instance offers tranlsate; did you mean translate?"})
	a.Add(&events.Event{RequestID: "k1", Capability: "translate", Status: "FAILED", Code: "NO_AGENT", Outcome: "reply",
		Start: at.Add(time.Second), Error: "no routable instance offers translate"})
	s, err := a.Summary(ByCapability, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Total.Rejected != 1 || s.Total.Failed != 1 {
		t.Errorf("total %+v, want the unknown name rejected and the known one failed", s.Total)
	}
	if len(s.Failures) != 2 || s.Failures[1].RequestID != "u1" || s.Failures[1].Class != events.ClassRejected ||
		!s.Failures[1].Unknown || !strings.Contains(s.Failures[1].Message, "did you mean translate") ||
		s.Failures[0].Class != events.ClassFailed {
		t.Errorf("failures %+v", s.Failures)
	}
}

// The topology counts each task on its caller → capability edge and its
// capability → instance edge, by class, within the window asked for.
func TestTopology(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)}
	a := newTestAggregator(t, c)
	at := c.now.Add(-2 * time.Minute)
	for i := range 4 {
		a.Add(&events.Event{RequestID: fmt.Sprint("w", i), Source: "web", Capability: "echo", Node: "echo-1", Status: "FINISHED",
			Outcome: "reply", Attempts: 1, LatencyMS: 10, Start: at})
	}
	a.Add(&events.Event{RequestID: "b1", Source: "billing", Capability: "echo", Node: "echo-2", Status: "FAILED", Code: "TIMEOUT",
		Outcome: "reply", Attempts: 1, LatencyMS: 30, Start: at})
	a.Add(&events.Event{RequestID: "n1", Capability: "tranlsate", Status: "FAILED", Code: "NO_AGENT", Unknown: true, Outcome: "reply", Start: at})
	a.Add(&events.Event{RequestID: "old", Source: "web", Capability: "echo", Node: "echo-1", Status: "FINISHED", Outcome: "reply",
		Attempts: 1, Start: c.now.Add(-30 * time.Minute)})
	top, err := a.Topology(10 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []Edge{{From: "web", To: "echo", Tasks: 4, Finished: 4, LatencyMS: 10},
		{From: "anonymous", To: "tranlsate", Tasks: 1, Rejected: 1}, {From: "billing", To: "echo", Tasks: 1, Failed: 1, LatencyMS: 30}}
	if fmt.Sprint(top.Calls) != fmt.Sprint(want) {
		t.Errorf("calls %+v, want %+v", top.Calls, want)
	}
	want = []Edge{{From: "echo", To: "echo-1", Tasks: 4, Finished: 4, LatencyMS: 10},
		{From: "echo", To: "echo-2", Tasks: 1, Failed: 1, LatencyMS: 30}, {From: "tranlsate", To: "none", Tasks: 1, Rejected: 1}}
	if fmt.Sprint(top.Deliveries) != fmt.Sprint(want) {
		t.Errorf("deliveries %+v, want %+v", top.Deliveries, want)
	}
	hour, err := a.Topology(0)
	if err != nil || hour.Calls[0].Tasks != 5 {
		t.Errorf("over the hour web → echo: %+v (%v), want 5 tasks", hour.Calls, err)
	}
	if _, err := a.Topology(2 * time.Hour); !errors.Is(err, ErrInvalidQuery) {
		t.Errorf("beyond the window: %v, want ErrInvalidQuery", err)
	}
}
