package agentkit

import "context"

// Handler serves one capability. It returns the result, which is encoded in
// the request's content type ([]byte is sent as is), or an error: Reject for
// a business rejection, Busy when it cannot take the task now, BadRequest
// for malformed input, anything else for a failure.
//
// Handlers run concurrently, at most max_concurrent at once per agent. The
// context ends when the caller's deadline passes or the agent is stopped
// hard.
type Handler func(ctx context.Context, req *Request) (any, error)

// Typed adapts a function taking a decoded input to a Handler. A payload that
// does not decode into In is answered with BAD_REQUEST without calling fn.
func Typed[In, Out any](fn func(ctx context.Context, req *Request, in In) (Out, error)) Handler {
	return func(ctx context.Context, req *Request) (any, error) {
		var in In
		if err := req.Decode(&in); err != nil {
			return nil, err
		}
		return fn(ctx, req, in)
	}
}
