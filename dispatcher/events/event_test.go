package events

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/agent-reach/agentreach/streams"
)

// appendEvent writes what encoding/json would: both decode to the same
// record, whatever the strings hold (quotes, control characters, invalid
// UTF-8) and whatever the numbers are.
func TestAppendEventMatchesEncodingJSON(t *testing.T) {
	raw := rapid.Custom(func(rt *rapid.T) string { return string(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(rt, "bytes")) })
	str := rapid.OneOf(rapid.String(), raw,
		rapid.SampledFrom([]string{"", `"`, `\`, "\n\r\t\x00\x1f", "é€😀", "\xff\xfe"}))
	rapid.Check(t, func(rt *rapid.T) {
		ev := Event{
			RequestID: str.Draw(rt, "request_id"), OrchestrationID: str.Draw(rt, "orch"),
			Capability: str.Draw(rt, "capability"), Source: str.Draw(rt, "source"), Tier: str.Draw(rt, "tier"), Dispatcher: str.Draw(rt, "dispatcher"),
			Status: str.Draw(rt, "status"), Code: str.Draw(rt, "code"), Error: str.Draw(rt, "error"),
			Unknown: rapid.Bool().Draw(rt, "unknown"), Outcome: str.Draw(rt, "outcome"),
			Candidates: rapid.IntRange(0, 1<<20).Draw(rt, "candidates"), Node: str.Draw(rt, "node"),
			Failed:   rapid.SliceOfN(str, 0, 3).Draw(rt, "failed"),
			Attempts: rapid.IntRange(0, 100).Draw(rt, "attempts"),
			Cost:     rapid.Float64Range(-1e12, 1e12).Draw(rt, "cost"), LatencyMS: rapid.Float64Range(0, 1e9).Draw(rt, "latency"),
			Start:    time.Unix(rapid.Int64Range(0, 1<<33).Draw(rt, "s"), rapid.Int64Range(0, 1e9-1).Draw(rt, "ns")).UTC(),
			ParentID: str.Draw(rt, "parent"), Kind: str.Draw(rt, "kind"), By: str.Draw(rt, "by"),
			Hedged: rapid.Bool().Draw(rt, "hedged"), HedgeWon: rapid.Bool().Draw(rt, "hedge_won"),
			Score: rapid.Ptr(rapid.Float64Range(0, 1), true).Draw(rt, "score"),
			Excluded: rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) streams.Exclusion {
				return streams.Exclusion{Node: str.Draw(rt, "node"), Reason: str.Draw(rt, "reason")}
			}), 0, 2).Draw(rt, "excluded"),
			ExcludedTotal: rapid.IntRange(0, 10000).Draw(rt, "excluded_total"),
			Expected:      rapid.IntRange(0, 300).Draw(rt, "expected"), Answered: rapid.IntRange(0, 300).Draw(rt, "answered"),
			Succeeded: rapid.IntRange(0, 300).Draw(rt, "succeeded"),
		}
		std, err := json.Marshal(ev)
		if err != nil {
			rt.Fatal(err)
		}
		var want, got Event
		if err := json.Unmarshal(std, &want); err != nil {
			rt.Fatal(err)
		}
		line := Append(nil, &ev)
		if line[len(line)-1] != '\n' {
			rt.Fatalf("no newline: %q", line)
		}
		if err := json.Unmarshal(line, &got); err != nil {
			rt.Fatalf("%v in %q", err, line)
		}
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("got %+v\nwant %+v\nfrom %q", got, want, line)
		}
	})
}

func TestAppendEventOmitsACostThatIsNoNumber(t *testing.T) {
	for _, c := range []float64{math.NaN(), math.Inf(1)} {
		var got map[string]any
		if err := json.Unmarshal(Append(nil, &Event{Cost: c}), &got); err != nil {
			t.Fatal(err)
		}
		if _, ok := got["cost"]; ok {
			t.Fatalf("cost %v written", c)
		}
	}
}

func TestDecodeEventsReadsEveryLine(t *testing.T) {
	var b []byte
	for _, id := range []string{"a", "b", "c"} {
		b = Append(b, &Event{RequestID: id, Attempts: 1})
	}
	evs, err := DecodeEvents(b)
	if err != nil || len(evs) != 3 || evs[2].RequestID != "c" {
		t.Fatalf("%v %+v", err, evs)
	}
	if _, err := DecodeEvents(append(b, "{not json\n"...)); err == nil {
		t.Fatal("a broken line went unnoticed")
	}
}

// Every record counts by one rule: a task in exactly one class with its
// retries, a scatter-gather with its branches, anything else for nothing.
func TestEventCount(t *testing.T) {
	for _, c := range []struct {
		name string
		ev   Event
		want Counts
	}{
		{"finished", Event{Status: "FINISHED", Attempts: 1}, Counts{Tasks: 1, Finished: 1}},
		{"retried twice", Event{Status: "FINISHED", Attempts: 3}, Counts{Tasks: 1, Finished: 1, Retries: 2}},
		{"hedged, no retry", Event{Status: "FINISHED", Attempts: 2, Hedged: true}, Counts{Tasks: 1, Finished: 1}},
		{"never delivered", Event{Status: "FAILED", Code: "NO_AGENT"}, Counts{Tasks: 1, Failed: 1}},
		{"a name never registered", Event{Status: "FAILED", Code: "NO_AGENT", Unknown: true}, Counts{Tasks: 1, Rejected: 1}},
		{"unknown is only NO_AGENT's", Event{Status: "TIMEOUT", Code: "TIMEOUT", Unknown: true, Attempts: 1}, Counts{Tasks: 1, Failed: 1}},
		{"timeout", Event{Status: "TIMEOUT", Code: "TIMEOUT", Attempts: 2}, Counts{Tasks: 1, Failed: 1, Retries: 1}},
		{"business rejection", Event{Status: "FAILED", Code: "BIZ_REJECT", Attempts: 1}, Counts{Tasks: 1, Rejected: 1}},
		{"bad request", Event{Status: "FAILED", Code: "BAD_REQUEST"}, Counts{Tasks: 1, Rejected: 1}},
		{"cancelled by the caller", Event{Status: "FAILED", Code: "CANCELLED", Attempts: 1}, Counts{Tasks: 1, Rejected: 1}},
		{"durable dead letter", Event{Status: "FAILED", Code: "INTERNAL", Tier: "durable", Outcome: OutcomeDeadLetter, Attempts: 1},
			Counts{Tasks: 1, Failed: 1}},
		{"broadcast", Event{Kind: KindBroadcast, Status: "FINISHED", Expected: 2}, Counts{Broadcasts: 1, Branches: 2}},
		{"fan-out refused", Event{Kind: KindFanOut, Status: "FAILED", Code: "BAD_REQUEST"}, Counts{FanOuts: 1}},
		{"feedback", Event{Kind: "feedback", Status: "FINISHED"}, Counts{}},
		{"workflow run", Event{Kind: "workflow", Status: "FINISHED", Attempts: 3}, Counts{}},
		{"review resolution", Event{Status: "FINISHED", Outcome: OutcomeReviewDrop}, Counts{}},
	} {
		if got := c.ev.Count(); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// An error's message is kept whole up to MaxErrorInEvents bytes, and cut
// on a rune boundary past it, marked with an ellipsis.
func TestErrorText(t *testing.T) {
	if got := ErrorText("no routable instance offers x"); got != "no routable instance offers x" {
		t.Errorf("short message: %q", got)
	}
	long := strings.Repeat("é", MaxErrorInEvents)
	got := ErrorText(long)
	if len(got) > MaxErrorInEvents || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("long message cut to %d bytes, valid %v: %q", len(got), utf8.ValidString(got), got)
	}
}
