package console

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agent-reach/agentreach/streams"
)

// ParseTarget takes a stream, a sequence and an action from the path:
// anything else is BAD_REQUEST, and what it accepts is one of the
// actions of its stream on a positive sequence.
func FuzzParseTarget(f *testing.F) {
	for _, s := range [][3]string{{"dlq", "1", "replay"}, {"review", "7", "rerun"}, {"dlq", "3", "drop"}, {"review", "0", "drop"},
		{"dlq", "1", "rerun"}, {"tasks", "1", "drop"}, {"dlq", "-1", "drop"}, {"dlq", "", ""}, {"review", "99999999999999999999", "drop"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, stream, seq, action string) {
		tg, e := ParseTarget(stream, seq, action)
		if e != nil {
			if e.Code != streams.CodeBadRequest || !utf8.ValidString(e.Message) && utf8.ValidString(stream+seq+action) {
				t.Fatalf("%q %q %q: %+v, want BAD_REQUEST", stream, seq, action, e)
			}
			return
		}
		if action == "" && seq == "" {
			return
		}
		n, err := strconv.ParseUint(seq, 10, 64)
		ok := (action == ActionDrop) || (action == ActionReplay && stream == StreamDLQ) || (action == ActionRerun && stream == StreamReview)
		if err != nil || n == 0 || tg.Seq != n || !ok || tg.Name == "" {
			t.Fatalf("%q %q %q accepted as %+v", stream, seq, action, tg)
		}
	})
}

// Preview keeps at most PreviewBytes of text, cut on a rune boundary and
// marked when cut, and calls anything that is not UTF-8 binary.
func FuzzPreview(f *testing.F) {
	for _, s := range []string{"", `{"a":1}`, strings.Repeat("é", 400), "\xff\xfe", strings.Repeat("x", 511) + "€"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, binary := Preview(data)
		switch {
		case binary && p != "":
			t.Fatalf("binary with a preview %q", p)
		case binary:
			return
		case !utf8.ValidString(p) || len(strings.TrimSuffix(p, "…")) > PreviewBytes:
			t.Fatalf("preview of %d bytes: %d bytes, valid %v", len(data), len(p), utf8.ValidString(p))
		case len(data) <= PreviewBytes && p != string(data):
			t.Fatalf("a short payload changed: %q → %q", data, p)
		case !strings.HasPrefix(string(data), strings.TrimSuffix(p, "…")):
			t.Fatalf("the preview %q is not the payload's start", p)
		}
	})
}

// DecodeEdit reads a write's body from outside: anything but an object
// with a non-empty string value and at most a non-negative revision is
// BAD_REQUEST, and what it accepts reads back the same.
func FuzzDecodeEdit(f *testing.F) {
	for _, s := range []string{`{"value": "retries: 2", "revision": 3}`, `{"value": "{}"}`, `{"value": "x", "revision": -1}`,
		`{"value": 1}`, `{"value": "a", "value": "b"}`, `{"value": "a", "other": 1}`, `[]`, `{"value": "a", "revision": 1.5}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := DecodeEdit(body)
		if err != nil {
			if err.Code != streams.CodeBadRequest || !strings.HasPrefix(err.Message, "body: ") {
				t.Fatalf("%q: %+v, want BAD_REQUEST about the body", body, err)
			}
			return
		}
		if strings.TrimSpace(e.Value) == "" {
			t.Fatalf("%q: accepted an empty value", body)
		}
		var back struct {
			Value    string  `json:"value"`
			Revision *uint64 `json:"revision"`
		}
		if err := json.Unmarshal(body, &back); err != nil || back.Value != e.Value || (back.Revision == nil) != (e.Revision == nil) ||
			back.Revision != nil && *back.Revision != *e.Revision {
			t.Fatalf("%q: decoded %+v, encoding/json reads %+v (%v)", body, e, back, err)
		}
	})
}
