package a2a_test

import (
	"fmt"

	"github.com/agent-reach/agentreach/dispatcher/gateway/a2a"
)

// A JSON-RPC request as an A2A client sends it, decoded; and one that is
// not JSON, refused with the JSON-RPC parse error.
func ExampleDecodeRequest() {
	req, e := a2a.DecodeRequest([]byte(`{"jsonrpc": "2.0", "id": "1", "method": "SendMessage",
		"params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}`))
	fmt.Println(req.Method, string(req.ID), e == nil)
	_, e = a2a.DecodeRequest([]byte(`{"jsonrpc": "2.0", "id": 1,`))
	fmt.Println(e.Code)
	// Output:
	// SendMessage "1" true
	// -32700
}
