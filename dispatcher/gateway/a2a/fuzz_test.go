package a2a_test

import (
	"encoding/json"
	"testing"

	"github.com/agent-reach/agentreach/dispatcher/gateway/a2a"
)

// FuzzDecodeRequest: any body decodes to a request or a JSON-RPC error
// of the spec's codes, never a panic; an accepted request has a method
// and an id that is a JSON string or number.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"GetTask","params":{"id":"t"}}`,
		`{"jsonrpc":"2.0","id":null,"method":"GetTask"}`, `[]`, `{`, `"x"`, `{"jsonrpc":"1.0","id":1,"method":"m"}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}`, `{"jsonrpc":"2.0","id":-1e3,"method":"m","params":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := a2a.DecodeRequest(body)
		if e != nil {
			switch e.Code {
			case a2a.CodeParseError, a2a.CodeInvalidRequest, a2a.CodeInvalidParams:
			default:
				t.Fatalf("error code %d", e.Code)
			}
			return
		}
		var id any
		if req.Method == "" || json.Unmarshal(req.ID, &id) != nil {
			t.Fatalf("accepted %q with method %q id %q", body, req.Method, req.ID)
		}
		switch id.(type) {
		case string, float64:
		default:
			t.Fatalf("accepted id %q", req.ID)
		}
		if len(req.Params) > 0 && req.Params[0] != '{' {
			t.Fatalf("accepted params %q", req.Params)
		}
		var p a2a.SendMessageRequest
		_ = json.Unmarshal(req.Params, &p) // must not panic
	})
}
