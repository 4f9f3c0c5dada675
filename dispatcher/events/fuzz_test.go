package events

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeEvents reads REACH_EVENTS messages, whoever wrote them:
// DecodeEvents never panics, a refusal names the line's record, and what it
// returns re-encodes, as Append and as encoding/json write it, to the
// same records.
func FuzzDecodeEvents(f *testing.F) {
	start := time.Date(2025, 5, 6, 7, 8, 9, 123456789, time.UTC)
	var batch []byte
	for _, ev := range []Event{
		{RequestID: "r1", OrchestrationID: "o1", Capability: "echo", Tier: "direct", Dispatcher: "d1", Status: "FINISHED",
			Outcome: "reply", Candidates: 3, Node: "echo-1", Attempts: 1, LatencyMS: 1.25, Start: start},
		{RequestID: "r2", Capability: "pay.charge", Tier: "durable", Status: "FAILED", Code: "TIMEOUT", Outcome: "dead_letter",
			Failed: []string{"a", "b"}, Attempts: 3, Cost: 0.002, Start: start.In(time.FixedZone("", -90*60))},
		{RequestID: "quote \" backslash \\ \x00 \xff é", Start: time.Time{}},
	} {
		batch = Append(batch, &ev)
	}
	for _, seed := range []string{
		string(batch), "", "\n\n", " \r\n", `null`, `{}`, `{"failed":[],"cost":-0,"latency_ms":1e308}`,
		`{"start":"0000-01-01T00:00:00+01:00"}` + "\n" + `{"start":"9999-12-31T23:59:59.9999999999-23:59"}`,
		`{"start":"2025-05-06T07:08:09Z"}` + "\r\n" + `{"request_id":"\ud800"}`,
		`{"candidates":1.5}`, `{"attempts":"1"}`, `{"start":"yesterday"}`, `{"request_id":"a"}` + "\n{not json\n",
		`{"request_id":"a","REQUEST_ID":"b","Request_Id":"c"}`, `{"failed":null,"node":""}`, "{\n}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := DecodeEvents(data)
		if err != nil {
			if want := fmt.Sprintf("event record %d: ", len(evs)+1); !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("%q: %v after %d records, want %q", data, err, len(evs), want)
			}
			return
		}
		var ours, std []byte
		for i := range evs {
			ours = Append(ours, &evs[i])
			b, err := json.Marshal(&evs[i])
			if err != nil {
				t.Fatalf("%q: record %+v does not encode: %v", data, evs[i], err)
			}
			std = append(append(std, b...), '\n')
		}
		for name, b := range map[string][]byte{"Append": ours, "encoding/json": std} {
			again, err := DecodeEvents(b)
			if err != nil || !sameEvents(again, evs) {
				t.Fatalf("%q decodes to %+v; as %s %q reads back as %+v, %v", data, evs, name, b, again, err)
			}
		}
	})
}

// sameEvents reports whether a and b hold the same records: times are the
// same instant, and no failed instances is one value, nil or empty.
func sameEvents(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.Start.Equal(y.Start) {
			return false
		}
		x.Start, y.Start = time.Time{}, time.Time{}
		if len(x.Failed) == 0 && len(y.Failed) == 0 {
			x.Failed, y.Failed = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}
