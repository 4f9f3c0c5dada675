package streams_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/agent-reach/agentreach/streams"
)

// An aggregate's JSON is byte for byte what encoding/json writes, whatever
// its strings hold (quotes, control characters, HTML, invalid UTF-8), its
// results (spaces to drop, <>& and U+2028 to escape) and its numbers; a
// result that is not JSON fails both.
func TestAggregateAppendJSONIsEncodingJSON(t *testing.T) {
	str := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z0-9.-]{0,12}`),
		rapid.SampledFrom([]string{"", `"`, `\`, "\n\r\t\x00\x1f\x7f", "<a&b>", "é€😀\u2028", "\xff\xfe"}))
	result := rapid.OneOf(
		rapid.SampledFrom([]string{"", `{"ping":1}`, ` [1, 2 ,"<&>"] `, "\"\u2028\u2029\"", `{"a":{"b":[true,null]}}`, `1e400`,
			`"\xff"`, `{`, `nope`, `{"a":1}{"b":2}`}),
		rapid.Custom(func(rt *rapid.T) string {
			b, _ := json.Marshal(map[string]string{"k": str.Draw(rt, "v")})
			return string(b)
		}))
	rapid.Check(t, func(rt *rapid.T) {
		a := streams.Aggregate{Code: streams.Code(str.Draw(rt, "code")), Message: str.Draw(rt, "message"),
			Expected: rapid.IntRange(0, 5000).Draw(rt, "expected"), Answered: rapid.IntRange(-1, 5000).Draw(rt, "answered"),
			Succeeded: rapid.Int().Draw(rt, "succeeded"), Complete: rapid.Bool().Draw(rt, "complete")}
		if rapid.Bool().Draw(rt, "replies") {
			a.Replies = rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) streams.BranchReply {
				br := streams.BranchReply{Name: str.Draw(rt, "name"), Node: str.Draw(rt, "node"), Status: str.Draw(rt, "status"),
					Result: streams.Raw(result.Draw(rt, "result")), Attempts: rapid.IntRange(-1, 9).Draw(rt, "attempts"),
					LatencyMS: rapid.SampledFrom([]float64{0, 0.001, 0.402, 12.5, 1e-7, 3e21, -2}).Draw(rt, "latency")}
				if rapid.Bool().Draw(rt, "error") {
					br.Error = streams.NewError(streams.Code(str.Draw(rt, "ecode")), "%s", str.Draw(rt, "emessage"))
				}
				return br
			}), 0, 4).Draw(rt, "branches")
		}
		if rapid.Bool().Draw(rt, "missing") {
			a.Missing = []streams.Missing{{Name: str.Draw(rt, "mname"), Reason: str.Draw(rt, "reason"), Message: str.Draw(rt, "mmessage")}}
		}
		want, werr := json.Marshal(&a)
		got, gerr := a.AppendJSON([]byte("prefix"))
		if (werr != nil) != (gerr != nil) {
			rt.Fatalf("encoding/json: %v, AppendJSON: %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
			rt.Fatalf("AppendJSON wrote\n%s\nencoding/json\n%s", got, want)
		}
	})
}

// BenchmarkAggregateAppendJSON encodes a broadcast's aggregate of 1,000
// replies.
func BenchmarkAggregateAppendJSON(b *testing.B) {
	a := streams.Aggregate{Expected: 1000, Answered: 1000, Succeeded: 1000, Complete: true, Missing: []streams.Missing{}}
	for i := range 1000 {
		a.Replies = append(a.Replies, streams.BranchReply{Name: fmt.Sprintf("bc-%04d", i), Node: fmt.Sprintf("bc-%04d", i),
			Status: "FINISHED", Result: streams.Raw(`{"ping":1}`), LatencyMS: 3.217, Attempts: 1})
	}
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = a.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(&a)
		}
	})
}
