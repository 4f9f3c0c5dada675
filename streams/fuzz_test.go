package streams_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/streams"
)

// Fuzz targets for the wire package's decoders of outside input. Their seed
// corpora run with every `go test`; `make fuzz` explores beyond them.

// contentTypes is what a fuzzed selector byte picks from.
var contentTypes = [...]string{streams.ContentTypeJSON, streams.ContentTypeMsgpack}

// mustMsgpack encodes v as a peer in another language would (msgpack's own
// struct tags), for seeds.
func mustMsgpack(f *testing.F, v any) []byte {
	f.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzDecode checks the envelope codec in both content types, into a
// generic value and into a struct: what Decode accepts, Encode re-encodes
// and Decode reads back as the same value; what Decode refuses is
// BAD_REQUEST.
func FuzzDecode(f *testing.F) {
	for _, seed := range [][]byte{
		nil, []byte(" \t\r\n"), []byte(`{"text":"hi"}`), []byte(`[]`), []byte(`null`), []byte(`-0`),
		[]byte(`{"name":"x","count":3,"tags":["a",""],"extra":{"k":[1,2.5,null,true,{"n":"\u00e9\ud83d\ude00"}]}}`),
		[]byte(`{"count":1.5}`), []byte(`{"tags":"a"}`), []byte(`1e400`), []byte(`123456789012345678901234567890`),
		[]byte("\"\xff\xfe\""), []byte(`{"a":1}{"b":2}`), []byte(`{"name":"x","NAME":"y"}`),
		mustMsgpack(f, map[string]any{"name": "x", "count": int64(-3), "tags": []string{"a"}, "extra": map[string]any{"f": 0.5}}),
		mustMsgpack(f, math.NaN()), mustMsgpack(f, float32(1.5)), mustMsgpack(f, uint64(math.MaxUint64)),
		mustMsgpack(f, time.Unix(1700000000, 5).UTC()), mustMsgpack(f, []byte{0, 1, 2}),
		{0x81, 0x01, 0x02},                 // a map with an integer key
		{0xd4, 0x05, 0x00},                 // an extension type nobody registered
		{0x81, 0xa1, 'a', 0x01, 0xc0},      // one value and a byte after it
		{0x81}, {0xc1}, {0xdc, 0xff, 0xff}, // truncated, a code never used, an array header without its elements
		{0xdd, 0xff, 0xff, 0xff, 0xff}, {0xc6, 0xff, 0xff, 0xff, 0xff}, // 2^32 elements, 4 GiB of binary: claimed, not there
	} {
		f.Add(byte(0), seed)
		f.Add(byte(1), seed)
	}
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		ct := contentTypes[int(which)%len(contentTypes)]
		var generic any
		roundTrip(t, ct, data, &generic, func() any { return new(any) })
		var typed sample
		roundTrip(t, ct, data, &typed, func() any { return new(sample) })
	})
}

// roundTrip decodes data into v; when that succeeds, v encodes, and its
// encoding decodes into fresh() as the same value.
func roundTrip(t *testing.T, ct string, data []byte, v any, fresh func() any) {
	t.Helper()
	if err := streams.Decode(ct, data, v); err != nil {
		if !errors.Is(err, streams.ErrBadRequest) {
			t.Fatalf("%s %q into %T: %v, want BAD_REQUEST", ct, data, v, err)
		}
		return
	}
	b, err := streams.Encode(ct, v)
	if err != nil {
		t.Fatalf("%s %q decodes to %#v, which does not encode: %v", ct, data, v, err)
	}
	w := fresh()
	if err := streams.Decode(ct, b, w); err != nil {
		t.Fatalf("%s %q decodes to %#v, whose encoding %q does not decode: %v", ct, data, v, b, err)
	}
	if !sameValue(reflect.ValueOf(v), reflect.ValueOf(w)) {
		t.Fatalf("%s %q decodes to %#v, its encoding %q to %#v", ct, data, v, b, w)
	}
}

// sameValue is reflect.DeepEqual, except that NaN equals NaN (a msgpack
// float may be one) and times are equal when they are the same instant.
func sameValue(a, b reflect.Value) bool {
	if !a.IsValid() || !b.IsValid() {
		return a.IsValid() == b.IsValid()
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		return x == y || math.IsNaN(x) && math.IsNaN(y)
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			if bv := b.MapIndex(k); !bv.IsValid() || !sameValue(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	case reflect.Struct:
		if at, ok := a.Interface().(time.Time); ok {
			return at.Equal(b.Interface().(time.Time))
		}
		for i := range a.NumField() {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// FuzzPayloadType checks that PayloadType answers in a supported type and
// refuses with BAD_REQUEST; that a body it accepts really is valid for the
// type it names, which is the type ContentType names; and that a
// header-less valid JSON body is always JSON.
func FuzzPayloadType(f *testing.F) {
	mp := mustMsgpack(f, map[string]any{"a": 1})
	for _, c := range []struct {
		header string
		set    bool
		body   []byte
	}{
		{"", false, []byte(`{"text":"hi"}`)}, {"", false, nil}, {"", false, []byte(" \t\n")}, {"", false, mp},
		{"", false, []byte(`{"a": broken`)}, {"", false, append(append([]byte{}, mp...), 0xc0)}, {"", true, []byte("x")},
		{"application/json; charset=utf-8", true, []byte(`[1,`)}, {streams.ContentTypeJSON, true, mp},
		{"Application/MsgPack", true, mp}, {streams.ContentTypeMsgpack, true, []byte(`{"a":1}`)},
		{streams.ContentTypeMsgpack, true, []byte(" ")}, {streams.ContentTypeMsgpack, true, []byte{0xc1}},
		{" application/json ;", true, []byte(`1`)}, {"text/plain", true, []byte("x")}, {";", true, nil},
	} {
		f.Add(c.header, c.set, c.body)
	}
	f.Fuzz(func(t *testing.T, header string, set bool, body []byte) {
		h := nats.Header{}
		if set {
			h.Set(streams.HeaderContentType, header)
		}
		sniffed := streams.ContentType(h, body)
		ct, err := streams.PayloadType(h, body)
		if ct != streams.ContentTypeJSON && ct != streams.ContentTypeMsgpack {
			t.Fatalf("header %q body %q: answer in %q, not a supported type", header, body, ct)
		}
		blank := len(bytes.TrimSpace(body)) == 0
		if h.Get(streams.HeaderContentType) == "" && (blank || json.Valid(body)) && (err != nil || ct != streams.ContentTypeJSON) {
			t.Fatalf("header-less JSON %q: %s, %v", body, ct, err)
		}
		if err != nil {
			if err.Code != streams.CodeBadRequest {
				t.Fatalf("header %q body %q: %v, want BAD_REQUEST", header, body, err)
			}
			return
		}
		if ct != sniffed {
			t.Fatalf("header %q body %q: PayloadType says %s, ContentType %s", header, body, ct, sniffed)
		}
		if ct == streams.ContentTypeJSON && !blank && !json.Valid(body) {
			t.Fatalf("header %q: %q accepted as JSON", header, body)
		}
		if ct == streams.ContentTypeMsgpack && len(body) > 0 && !oneMsgpackValue(body) {
			t.Fatalf("header %q: %q accepted as one msgpack value", header, body)
		}
	})
}

// oneMsgpackValue reports whether b is exactly one msgpack value, measured
// by the raw value the decoder reads rather than by what it left unread.
func oneMsgpackValue(b []byte) bool {
	raw, err := msgpack.NewDecoder(bytes.NewReader(b)).DecodeRaw()
	return err == nil && len(raw) == len(b)
}

// FuzzErrorReply checks that an error reply's body is ErrorBody's and that
// its code and message come back through ErrorFromMessage in both content
// types (a JSON message as JSON can hold it: invalid UTF-8 becomes U+FFFD);
// any other type is answered in JSON.
func FuzzErrorReply(f *testing.F) {
	for _, c := range streams.Codes() {
		f.Add(byte(0), string(c), "no stock")
	}
	f.Add(byte(1), string(streams.CodeBizReject), "")
	f.Add(byte(2), string(streams.CodeTimeout), "slow")
	f.Add(byte(1), "NOT_A_CODE", "quote \" backslash \\ newline \n")
	f.Add(byte(0), string(streams.CodeInternal), "\xff\xfe é€😀 \x00")
	f.Add(byte(1), string(streams.CodeInternal), "\xff\xfe é€😀 \x00")
	f.Fuzz(func(t *testing.T, which byte, code, message string) {
		if code == "" {
			return // a reply without Reach-Error is no error reply
		}
		asked := [...]string{streams.ContentTypeJSON, streams.ContentTypeMsgpack, "text/plain"}[int(which)%3]
		ct, want := streams.ContentTypeMsgpack, message
		if asked != streams.ContentTypeMsgpack {
			ct, want = streams.ContentTypeJSON, asJSONString(t, message)
		}
		wantStatus := streams.StatusFailed
		if streams.Code(code) == streams.CodeTimeout {
			wantStatus = streams.StatusTimeout
		}
		sent := &streams.Error{Code: streams.Code(code), Message: message}
		m := streams.ErrorReply("_INBOX.x", asked, "rid", sent)
		switch e := streams.ErrorFromMessage(m); {
		case e == nil || e.Code != sent.Code || e.Message != want:
			t.Fatalf("%s %q %q reads back as %+v", asked, code, message, e)
		case m.Header.Get(streams.HeaderStatus) != string(wantStatus) || m.Header.Get(streams.HeaderContentType) != ct ||
			m.Header.Get(streams.HeaderRequestID) != "rid":
			t.Fatalf("%s %q: headers %v", asked, code, m.Header)
		case !bytes.Equal(m.Data, streams.ErrorBody(asked, sent)):
			t.Fatalf("%s %q: body %q, ErrorBody %q", asked, code, m.Data, streams.ErrorBody(asked, sent))
		}
	})
}

// asJSONString is s after a trip through a JSON string.
func asJSONString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzErrorFromMessage checks that ErrorFromMessage reads any reply: nil
// exactly when Reach-Error is absent, else that code, with the body's
// message when the body decodes.
func FuzzErrorFromMessage(f *testing.F) {
	f.Add(string(streams.CodeBizReject), "", []byte(`{"code":"BIZ_REJECT","message":"no stock"}`))
	f.Add(string(streams.CodeBizReject), streams.ContentTypeMsgpack, mustMsgpack(f, map[string]string{"code": "X", "message": "m"}))
	f.Add(string(streams.CodeInternal), streams.ContentTypeMsgpack, []byte(`{"message":"json, said to be msgpack"}`))
	f.Add(string(streams.CodeTimeout), "", []byte(`{"message":7}`))
	f.Add(string(streams.CodeTimeout), "text/plain", []byte(`{"message":"m"}`))
	f.Add("", "", []byte(`{"code":"BIZ_REJECT","message":"no header"}`))
	f.Add(string(streams.CodeInternal), "", []byte{0x81, 0xa7, 'm', 'e', 's', 's', 'a', 'g', 'e', 0xc1})
	f.Fuzz(func(t *testing.T, code, ct string, body []byte) {
		m := nats.NewMsg("_INBOX.x")
		if code != "" {
			m.Header.Set(streams.HeaderError, code)
		}
		if ct != "" {
			m.Header.Set(streams.HeaderContentType, ct)
		}
		m.Data = body
		e := streams.ErrorFromMessage(m)
		if code == "" {
			if e != nil {
				t.Fatalf("no Reach-Error, yet %+v", e)
			}
			return
		}
		if e == nil || e.Code != streams.Code(code) {
			t.Fatalf("Reach-Error %q read as %+v", code, e)
		}
		var want streams.Error
		if streams.Decode(streams.ContentType(m.Header, body), body, &want) != nil {
			want.Message = ""
		}
		if e.Message != want.Message {
			t.Fatalf("body %q: message %q, want %q", body, e.Message, want.Message)
		}
	})
}

// FuzzHeaderParsers gives one value to every header parser: none panics,
// what one accepts re-formats to a header that parses to the same value,
// and what one refuses is BAD_REQUEST naming the header.
func FuzzHeaderParsers(f *testing.F) {
	for _, v := range []string{
		"", "0", "3", "+7", "-0", "-1", "007", "two", " 1", "1 ", "9223372036854775807", "9223372036854775808",
		"1700000000000", "253402300799999", "253402300800000", "999999999999999",
		"0.25", "12", ".5", "1e3", "1E-3", "0x1p-2", "1_000", "NaN", "+Inf", "-Inf", "inf", "-0.1", "1e309", "4.9e-324",
		"a-1,b_2,a-1", "a,,b", "a.b", ",", "a,", "é", strings.Repeat("a,", streams.MaxVisits-1) + "a",
		strings.Repeat("a,", streams.MaxVisits) + "a", strings.Repeat("x", streams.MaxNameLength+1),
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		refused := func(key string, err *streams.Error) {
			t.Helper()
			if err.Code != streams.CodeBadRequest || !strings.Contains(err.Message, key) {
				t.Fatalf("%s %q: %v, want BAD_REQUEST naming the header", key, v, err)
			}
		}

		for _, key := range []string{streams.HeaderHops, streams.HeaderTimeout, streams.HeaderAttempt} {
			n, err := streams.ParseCount(header(key, v), key)
			if err != nil {
				refused(key, err)
				continue
			}
			if again, err := streams.ParseCount(header(key, v), key); n < 0 || err != nil || again != n {
				t.Fatalf("%s %q: %d", key, v, n)
			}
			if again, err := streams.ParseCount(header(key, strconv.FormatInt(n, 10)), key); err != nil || again != n {
				t.Fatalf("%s %q: %d re-formats to %d, %v", key, v, n, again, err)
			}
		}

		if dl, err := streams.ParseDeadline(header(streams.HeaderDeadline, v)); err != nil {
			refused(streams.HeaderDeadline, err)
		} else if !dl.IsZero() {
			again, err := streams.ParseDeadline(header(streams.HeaderDeadline, strconv.FormatInt(dl.UnixMilli(), 10)))
			if err != nil || !again.Equal(dl) || dl.UnixMilli() <= 0 {
				t.Fatalf("%s %q: %v re-formats to %v, %v", streams.HeaderDeadline, v, dl, again, err)
			}
		}

		for key, parse := range map[string]func(nats.Header) (float64, *streams.Error){
			streams.HeaderBudget: streams.ParseBudget, streams.HeaderCost: streams.ParseCost,
		} {
			x, err := parse(header(key, v))
			if err != nil {
				refused(key, err)
				continue
			}
			if x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("%s %q: accepted %v", key, v, x)
			}
			if again, err := parse(header(key, strconv.FormatFloat(x, 'g', -1, 64))); err != nil || again != x {
				t.Fatalf("%s %q: %v re-formats to %v, %v", key, v, x, again, err)
			}
		}

		ids, err := streams.ParseVisits(header(streams.HeaderVisits, v))
		if err != nil {
			refused(streams.HeaderVisits, err)
			return
		}
		if len(ids) > streams.MaxVisits || strings.Join(ids, ",") != v {
			t.Fatalf("%s %q: %d ids %q", streams.HeaderVisits, v, len(ids), ids)
		}
		for _, id := range ids {
			if streams.ValidateInstanceID(id) != nil {
				t.Fatalf("%s %q: accepted instance id %q", streams.HeaderVisits, v, id)
			}
		}
	})
}

// kvToken is what a KV key token may hold (protocol.md
// Idempotency); kvKey is nats.go's rule for a whole key.
var (
	kvToken = regexp.MustCompile(`^[-_=a-zA-Z0-9]{1,128}$`)
	kvKey   = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)
)

// FuzzIdempotencyKey checks that IdempotencyKey always makes a valid KV key
// "<capability>.<caller token>.<key token>", the same one every time, keeps
// a caller and a key that are valid tokens, and gives two different callers
// two different keys.
func FuzzIdempotencyKey(f *testing.F) {
	for _, k := range []string{"order-42", "a", "", ".", "a.b", "a b", "ord/1", "=_-", "\x00", "é", "sha256-0123",
		strings.Repeat("k", 128), strings.Repeat("k", 129), "run-1.step"} {
		f.Add("pay.charge", "alice", k)
		f.Add("pay.charge", k, "order-42")
	}
	f.Add("not a capability", "bob", "k")
	f.Fuzz(func(t *testing.T, capability, caller, key string) {
		if streams.ValidateCapability(capability) != nil {
			capability = "pay.charge" // the key's capability is a valid one
		}
		got := streams.IdempotencyKey(capability, caller, key)
		rest, ok := strings.CutPrefix(got, capability+".")
		callerToken, keyToken, two := strings.Cut(rest, ".")
		switch {
		case !ok || !two || !kvToken.MatchString(callerToken) || !kvToken.MatchString(keyToken):
			t.Fatalf("(%q, %q, %q) → %q: not <capability>.<token>.<token>", capability, caller, key, got)
		case !kvKey.MatchString(got) || strings.HasSuffix(got, "."):
			t.Fatalf("(%q, %q, %q) → %q: not a valid KV key", capability, caller, key, got)
		case streams.IdempotencyKey(capability, caller, key) != got:
			t.Fatalf("(%q, %q, %q) → %q, then something else", capability, caller, key, got)
		case kvToken.MatchString(key) && keyToken != key:
			t.Fatalf("(%q, %q, %q) → %q: a valid key token was changed", capability, caller, key, got)
		case kvToken.MatchString(caller) && callerToken != caller:
			t.Fatalf("(%q, %q, %q) → %q: a valid caller token was changed", capability, caller, key, got)
		case caller == "" && callerToken != streams.IdempotencyNoCaller:
			t.Fatalf("(%q, %q, %q) → %q: no caller is not %q", capability, caller, key, got, streams.IdempotencyNoCaller)
		case caller != "" && caller != streams.IdempotencyNoCaller && callerToken == streams.IdempotencyNoCaller:
			t.Fatalf("(%q, %q, %q) → %q: a caller took the token of none", capability, caller, key, got)
		}
		if other := caller + "x"; streams.IdempotencyKey(capability, other, key) == got {
			t.Fatalf("callers %q and %q share the bucket key %q", caller, other, got)
		}
	})
}

// FuzzResultSource: whatever a Reach-Source holds, ResultSource gives one
// subject token without wildcards (and NoSource only for none), or an
// error.
func FuzzResultSource(f *testing.F) {
	for _, s := range []string{"", "alice", "_", "a.b", "*", ">", "a\x00b", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := streams.ResultSource(in)
		if err != nil {
			return
		}
		if got == "" || strings.ContainsAny(got, ".*> \t\r\n") || (got == streams.NoSource) != (in == "") {
			t.Fatalf("ResultSource(%q) = %q", in, got)
		}
	})
}
