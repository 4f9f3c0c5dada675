package fanout

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/streams"
)

func TestQuorum(t *testing.T) {
	for _, c := range []struct {
		q    Quorum
		n    int
		need int
	}{{Quorum{}, 5, 3}, {Quorum{Fraction: 0.5}, 3, 2}, {Quorum{Count: 2}, 5, 2}, {Quorum{Fraction: 0.01}, 1, 1}} {
		if got := c.q.Need(c.n); got != c.need {
			t.Errorf("%+v of %d: need %d, want %d", c.q, c.n, got, c.need)
		}
	}
	for v, want := range map[string]Quorum{"0.6": {Fraction: 0.6}, "3": {Count: 3}, "1": {Count: 1}} {
		if q, err := ParseQuorum(v); err != nil || q != want {
			t.Errorf("ParseQuorum(%q) = %+v, %v", v, q, err)
		}
	}
	for _, v := range []string{"0", "-1", "1.5", "NaN", "Inf", "most"} {
		if _, err := ParseQuorum(v); err == nil || err.Code != streams.CodeBadRequest {
			t.Errorf("ParseQuorum(%q): %v, want BAD_REQUEST", v, err)
		}
	}
}

func TestDecodeRequestInBothContentTypes(t *testing.T) {
	j, err := DecodeRequest(streams.ContentTypeJSON, []byte(`{"branches":[{"name":"a","capability":"x.y","payload":{"k":1},"timeout_ms":250}],"max_wait_ms":900}`))
	if err != nil {
		t.Fatal(err)
	}
	if b := j.Branches[0]; j.Mode != ModeQuorum || b.Name != "a" || string(b.Payload) != `{"k":1}` || b.Timeout.Milliseconds() != 250 || j.MaxWait.Milliseconds() != 900 {
		t.Errorf("JSON request %+v", j)
	}
	body, _ := msgpack.Marshal(map[string]any{"mode": "first", "branches": []map[string]any{{"name": "a", "capability": "x.y", "payload": map[string]int{"k": 1}}}})
	m, err := DecodeRequest(streams.ContentTypeMsgpack, body)
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]int
	if m.Mode != ModeFirst || msgpack.Unmarshal(m.Branches[0].Payload, &payload) != nil || payload["k"] != 1 {
		t.Errorf("msgpack request %+v", m)
	}
}

// FuzzDecodeRequest: a fan-out body never panics the decoder, and what it
// accepts holds every rule: 1–256 branches with unique valid names and
// capabilities, a known mode, a quorum no larger than the branches.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"branches":[{"name":"a","capability":"x.y","payload":{"k":1}}],"mode":"all"}`), false)
	f.Add([]byte(`{"branches":[{"name":"a","capability":"x"},{"name":"a","capability":"x"}]}`), false)
	f.Add([]byte(`{"branches":[],"quorum":0.6,"max_wait_ms":-1}`), false)
	f.Add([]byte("\x81\xa8branches\x91\x82\xa4name\xa1a\xaacapability\xa1x"), true)
	f.Fuzz(func(t *testing.T, body []byte, asMsgpack bool) {
		ct := streams.ContentTypeJSON
		if asMsgpack {
			ct = streams.ContentTypeMsgpack
		}
		req, err := DecodeRequest(ct, body)
		if err != nil {
			if err.Code != streams.CodeBadRequest {
				t.Fatalf("error code %s", err.Code)
			}
			return
		}
		if n := len(req.Branches); n == 0 || n > MaxBranches || req.Quorum.Count > n || req.MaxWait < 0 {
			t.Fatalf("accepted %+v", req)
		}
		names := map[string]bool{}
		for _, b := range req.Branches {
			if names[b.Name] || streams.ValidateInstanceID(b.Name) != nil || streams.ValidateCapability(b.Capability) != nil || b.Timeout < 0 {
				t.Fatalf("accepted branch %+v", b)
			}
			names[b.Name] = true
		}
		switch req.Mode {
		case ModeAll, ModeQuorum, ModeFirst:
		default:
			t.Fatalf("accepted mode %q", req.Mode)
		}
	})
}
