package agentkit

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/agentkit/internal/idem"
	"github.com/agent-reach/agentreach/streams"
)

// FuzzIdemRecord reads idempotency records as they come back from
// REACH_IDEMPOTENCY, where an agent in any language may have written them:
// decoding never panics, and a decoded done record replays as a well-formed
// reply — the delivery's request id, this instance's node, Reach-Replayed,
// and either the stored result as stored or an error reply whose code and
// message read back.
func FuzzIdemRecord(f *testing.F) {
	for _, rec := range []idem.Record{
		{State: idem.StatePending, Owner: "w1", RequestID: "r1"},
		{State: idem.StateDone, Owner: "w1", RequestID: "r1", ContentType: streams.ContentTypeJSON, Data: []byte(`{"effect":1}`), Cost: "0.002"},
		{State: idem.StateDone, Owner: "w2", RequestID: "r2", ContentType: streams.ContentTypeMsgpack, Data: []byte{0x81, 0xa1, 'a', 0x01}},
		{State: idem.StateDone, RequestID: "r3", ContentType: streams.ContentTypeMsgpack,
			Error: streams.NewError(streams.CodeBizReject, "no stock")},
		{State: idem.StateDone, RequestID: "r4", Error: streams.NewError(streams.CodeTimeout, "\xff slow")},
		{State: idem.StateDone},
	} {
		b, err := msgpack.Marshal(&rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, v := range []any{
		// What another language might write: other types, other keys.
		map[string]any{"state": "done", "data": "a string, not bin", "content_type": streams.ContentTypeJSON},
		map[string]any{"state": "done", "error": map[string]any{"code": "", "message": 7}},
		map[string]any{"state": "done", "error": map[string]any{"code": "NOT_A_CODE"}, "content_type": "text/plain"},
		map[string]any{"state": "done", "error": nil, "cost": 0.5, "extra": []any{1, "x"}},
		map[string]any{"state": 1},
		[]any{"done", "w1", "r1"},
		"done",
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"state":"done"}`))
	f.Add([]byte{})
	f.Add([]byte{0x85, 0xa5, 's', 't', 'a', 't', 'e'})
	f.Add([]byte("\x82\xa5state\xa4done\xa4data\xc6\xff\xff\xff\xf0")) // 4 GiB of data: claimed, not there
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := idem.Decode(data)
		if err != nil || rec.State != idem.StateDone {
			return
		}
		if rec.Error != nil && rec.Error.Code == "" {
			t.Fatalf("a stored error without a code was accepted: %+v", rec)
		}
		m := replayMsg("_INBOX.reply", "req-1", "node-1", &rec)
		h := m.Header
		if m.Subject != "_INBOX.reply" || h.Get(streams.HeaderRequestID) != "req-1" || h.Get(streams.HeaderNode) != "node-1" ||
			h.Get(HeaderReplayed) != "true" || h.Get(streams.HeaderCost) != rec.Cost {
			t.Fatalf("%+v replays as %s %v", rec, m.Subject, h)
		}
		if rec.Error == nil {
			if h.Get(streams.HeaderStatus) != string(streams.StatusFinished) || streams.ErrorFromMessage(m) != nil ||
				h.Get(streams.HeaderContentType) != rec.ContentType || !bytes.Equal(m.Data, rec.Data) {
				t.Fatalf("result %+v replays as %v %q", rec, h, m.Data)
			}
			return
		}
		wantStatus, wantMessage := streams.StatusFailed, rec.Error.Message
		if rec.Error.Code == streams.CodeTimeout {
			wantStatus = streams.StatusTimeout
		}
		ct := h.Get(streams.HeaderContentType)
		if ct == streams.ContentTypeJSON {
			b, _ := json.Marshal(wantMessage)
			_ = json.Unmarshal(b, &wantMessage) // what JSON can carry: invalid UTF-8 becomes U+FFFD
		}
		e := streams.ErrorFromMessage(m)
		if h.Get(streams.HeaderStatus) != string(wantStatus) || e == nil || e.Code != rec.Error.Code || e.Message != wantMessage ||
			(ct != streams.ContentTypeJSON && ct != streams.ContentTypeMsgpack) {
			t.Fatalf("error %+v (%+v) replays as %v %q, reading %+v", rec, rec.Error, h, m.Data, e)
		}
	})
}
