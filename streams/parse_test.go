package streams_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/streams"
)

func header(kv ...string) nats.Header {
	h := nats.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestHeaderParsers(t *testing.T) {
	if n, err := streams.ParseCount(header(streams.HeaderHops, "3"), streams.HeaderHops); err != nil || n != 3 {
		t.Errorf("hops 3: %d, %v", n, err)
	}
	if dl, err := streams.ParseDeadline(header(streams.HeaderDeadline, "1700000000000")); err != nil || !dl.Equal(time.UnixMilli(1700000000000)) {
		t.Errorf("deadline: %v, %v", dl, err)
	}
	if dl, err := streams.ParseDeadline(header()); err != nil || !dl.IsZero() {
		t.Errorf("absent deadline: %v, %v", dl, err)
	}
	if b, err := streams.ParseBudget(header(streams.HeaderBudget, "0.25")); err != nil || b != 0.25 {
		t.Errorf("budget: %v, %v", b, err)
	}
	if c, err := streams.ParseCost(header(streams.HeaderCost, "12")); err != nil || c != 12 {
		t.Errorf("cost: %v, %v", c, err)
	}
	if v, err := streams.ParseVisits(header(streams.HeaderVisits, "a-1,b_2,a-1")); err != nil || strings.Join(v, " ") != "a-1 b_2 a-1" {
		t.Errorf("visits: %v, %v", v, err)
	}
	for _, c := range []struct {
		name  string
		parse func() *streams.Error
		want  string // in the message
	}{
		{"negative hops", func() *streams.Error {
			_, e := streams.ParseCount(header(streams.HeaderHops, "-1"), streams.HeaderHops)
			return e
		}, "Reach-Hops"},
		{"hops word", func() *streams.Error {
			_, e := streams.ParseCount(header(streams.HeaderHops, "two"), streams.HeaderHops)
			return e
		}, `"two"`},
		{"deadline year 10000", func() *streams.Error {
			_, e := streams.ParseDeadline(header(streams.HeaderDeadline, "999999999999999"))
			return e
		}, "year 9999"},
		{"budget NaN", func() *streams.Error { _, e := streams.ParseBudget(header(streams.HeaderBudget, "NaN")); return e }, "Reach-Budget"},
		{"budget inf", func() *streams.Error { _, e := streams.ParseBudget(header(streams.HeaderBudget, "+Inf")); return e }, "Reach-Budget"},
		{"negative cost", func() *streams.Error { _, e := streams.ParseCost(header(streams.HeaderCost, "-0.1")); return e }, "Reach-Cost"},
		{"visits with an empty id", func() *streams.Error { _, e := streams.ParseVisits(header(streams.HeaderVisits, "a,,b")); return e }, "Reach-Visits"},
		{"visits with a subject", func() *streams.Error { _, e := streams.ParseVisits(header(streams.HeaderVisits, "a.b")); return e }, "Reach-Visits"},
		{"too many visits", func() *streams.Error {
			_, e := streams.ParseVisits(header(streams.HeaderVisits, strings.Repeat("a,", streams.MaxVisits)+"a"))
			return e
		}, "more than"},
	} {
		e := c.parse()
		if e == nil || e.Code != streams.CodeBadRequest || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s: %v, want BAD_REQUEST mentioning %q", c.name, e, c.want)
		}
	}
}

func TestPayloadType(t *testing.T) {
	mp, _ := msgpack.Marshal(map[string]any{"a": 1})
	for _, c := range []struct {
		name, header string
		body         []byte
		want         string
		bad          bool
	}{
		{"JSON sniffed", "", []byte(`{"a":1}`), streams.ContentTypeJSON, false},
		{"empty is JSON", "", nil, streams.ContentTypeJSON, false},
		{"msgpack sniffed", "", mp, streams.ContentTypeMsgpack, false},
		{"broken JSON answered in JSON", "", []byte(`{"a": broken`), streams.ContentTypeJSON, true},
		{"declared JSON, broken", "application/json; charset=utf-8", []byte(`[1,`), streams.ContentTypeJSON, true},
		{"declared msgpack, trailing byte", streams.ContentTypeMsgpack, append(append([]byte{}, mp...), 0xc0), streams.ContentTypeMsgpack, true},
		{"declared msgpack, JSON text", streams.ContentTypeMsgpack, []byte(`{"a":1}`), streams.ContentTypeMsgpack, true},
		{"declared msgpack, fine", streams.ContentTypeMsgpack, mp, streams.ContentTypeMsgpack, false},
		{"unsupported", "text/plain", []byte("x"), streams.ContentTypeJSON, true},
	} {
		h := nats.Header{}
		if c.header != "" {
			h.Set(streams.HeaderContentType, c.header)
		}
		ct, err := streams.PayloadType(h, c.body)
		if ct != c.want || (err != nil) != c.bad || (err != nil && err.Code != streams.CodeBadRequest) {
			t.Errorf("%s: type %q, error %v; want %q, error %v", c.name, ct, err, c.want, c.bad)
		}
	}
}

func TestDecodeErrorsSpeakJSONNotGo(t *testing.T) {
	type addInput struct {
		A float64 `json:"a"`
	}
	var in addInput
	err := streams.Decode(streams.ContentTypeJSON, []byte(`{"a":"x"}`), &in)
	if !errors.Is(err, streams.ErrBadRequest) || !strings.Contains(err.Error(), `field "a" must be a number, got string`) ||
		strings.Contains(err.Error(), "addInput") {
		t.Errorf("wrong shape: %v", err)
	}
	err = streams.Decode(streams.ContentTypeJSON, []byte(`{"a":`), &in)
	if !errors.Is(err, streams.ErrBadRequest) || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("broken JSON: %v", err)
	}
	mp, _ := msgpack.Marshal(map[string]any{"a": "x"})
	err = streams.Decode(streams.ContentTypeMsgpack, mp, &in)
	if !errors.Is(err, streams.ErrBadRequest) || !strings.Contains(err.Error(), "expected shape") || strings.Contains(err.Error(), "addInput") {
		t.Errorf("msgpack of the wrong shape: %v", err)
	}
}
