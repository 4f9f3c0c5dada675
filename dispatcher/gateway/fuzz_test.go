package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/streams"
)

// FuzzDecodeRoute checks the POST /route decoder: it never panics; what it
// accepts has a valid capability and a payload that is one JSON value;
// what it refuses is BAD_REQUEST with a message.
func FuzzDecodeRoute(f *testing.F) {
	for _, s := range []string{`{"capability":"echo","payload":{"text":"hi"}}`, `{"capability":"echo"}`, `{}`, ``, `[]`,
		`{"capability":"a.b","payload":null}`, `{"capability":"Bad Cap"}`, `{"capability":"echo","x":1}`,
		`{"capability":"echo"} {"capability":"echo"}`, `{"capability":"echo","payload":"` + strings.Repeat("x", 100) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := DecodeRoute(body)
		if e != nil {
			if e.Code != streams.CodeBadRequest || e.Message == "" {
				t.Fatalf("refusal %+v: want BAD_REQUEST with a message", e)
			}
			return
		}
		if err := streams.ValidateCapability(req.Capability); err != nil {
			t.Fatalf("accepted capability %q: %v", req.Capability, err)
		}
		if !json.Valid(req.Payload) {
			t.Fatalf("accepted payload %q is not JSON", req.Payload)
		}
	})
}

// FuzzReadTask checks how a call's HTTP request becomes a task: it never
// panics; a refusal is a wire code with a status; an accepted task holds
// the body unchanged, a wire content type or none, and only passed
// headers.
func FuzzReadTask(f *testing.F) {
	f.Add("echo", "application/json", []byte(`{"a":1}`), "Reach-Timeout", "500")
	f.Add("echo", "", []byte("\x81\xa1a\x01"), "Reach-Request-Id", "r-1")
	f.Add("Bad..Cap", "text/plain", []byte("hi"), "X-Other", "x")
	f.Add("a.b", "application/msgpack; charset=x", []byte{}, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	f.Add("a", "multipart/form-data; boundary=", []byte(strings.Repeat("z", 300)), "Reach-Reply-To", "_INBOX.x")
	f.Fuzz(func(t *testing.T, capability, ct string, body []byte, hk, hv string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/call/x", strings.NewReader(string(body)))
		if ct != "" {
			r.Header["Content-Type"] = []string{ct}
		}
		if hk != "" {
			r.Header[http.CanonicalHeaderKey(hk)] = []string{hv}
		}
		m, f := readTask(httptest.NewRecorder(), r, capability, 256)
		if f != nil {
			if f.e == nil || f.e.Code == "" || f.e.Message == "" {
				t.Fatalf("refusal without a code or message: %+v", f)
			}
			return
		}
		if len(body) > 256 || string(m.Data) != string(body) {
			t.Fatalf("accepted body %q as %q (limit 256)", body, m.Data)
		}
		if c := m.Header.Get(streams.HeaderContentType); c != "" && c != streams.ContentTypeJSON && c != streams.ContentTypeMsgpack {
			t.Fatalf("content type %q", c)
		}
		for k := range m.Header {
			if _, ok := passed[http.CanonicalHeaderKey(k)]; !ok && k != streams.HeaderContentType {
				t.Fatalf("header %q passed", k)
			}
		}
	})
}

// FuzzWantsEventStream feeds Accept headers: the check never panics, and
// says yes only when text/event-stream is among the media types.
func FuzzWantsEventStream(f *testing.F) {
	for _, s := range []string{"text/event-stream", "application/json, text/event-stream;q=0.9", "", "text/*", ",,;", "TEXT/EVENT-STREAM"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		r := &http.Request{Header: http.Header{"Accept": {accept}}}
		if wantsEventStream(r) && !strings.Contains(strings.ToLower(accept), "text/event-stream") {
			t.Fatalf("%q taken for text/event-stream", accept)
		}
	})
}
