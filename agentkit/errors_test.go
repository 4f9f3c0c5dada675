package agentkit_test

import (
	"errors"
	"testing"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/streams"
)

// A handler's message reaches the caller as written, whatever it holds:
// Reject, Busy and BadRequest take it plainly (so go vet accepts a message
// that is not a constant), and their f forms format.
func TestErrorHelpersKeepTheirMessage(t *testing.T) {
	msg := "stock at 100%, try %s later" // not a constant, and not a format
	cases := []struct {
		name string
		err  error
		want error
		msg  string
	}{
		{"Reject", agentkit.Reject(msg), streams.ErrBizReject, msg},
		{"Rejectf", agentkit.Rejectf("only %d left", 3), streams.ErrBizReject, "only 3 left"},
		{"Busy", agentkit.Busy(msg), streams.ErrTargetBusy, msg},
		{"Busyf", agentkit.Busyf("%d in the queue", 7), streams.ErrTargetBusy, "7 in the queue"},
		{"BadRequest", agentkit.BadRequest(msg), streams.ErrBadRequest, msg},
		{"BadRequestf", agentkit.BadRequestf("field %q is missing", "sku"), streams.ErrBadRequest, `field "sku" is missing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !errors.Is(c.err, c.want) {
				t.Fatalf("%v is not %v", c.err, c.want)
			}
			if got := streams.AsError(c.err).Message; got != c.msg {
				t.Fatalf("message %q, want %q", got, c.msg)
			}
		})
	}
}
