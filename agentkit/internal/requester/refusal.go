package requester

import (
	"context"
	"errors"
	"regexp"
	"runtime"
	"sync"
	"weak"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// A publish the connection's permissions do not allow (docs/security.md)
// is dropped by the server, which says so only asynchronously:
// "-ERR 'Permissions Violation for Publish to "<subject>"'", handed by
// nats.go to the connection's async error handler. Nothing answers the
// publish, so a call refused so would wait for its whole deadline. Each
// connection gets one hook, chained after the handler it had, that ends
// the requests waiting on the refused subject at once.

// publishRefused picks the subject out of nats.go's text of the server's
// refusal; a refused reply subject ("Publish with Reply of") or
// subscription does not match.
var publishRefused = regexp.MustCompile(`Publish to "([^"]+)"`)

// refusal is the cause a guarded context ends with when the server
// refused a publish to its subject.
type refusal struct {
	subject string
	err     error // nats.go's, with the server's text
}

func (r *refusal) Error() string { return r.err.Error() }

// watch holds the requests of one connection waiting on each subject.
type watch struct {
	mu      sync.Mutex
	pending map[string]map[*context.CancelCauseFunc]struct{}
}

// watches holds each connection's watch. Its keys are weak, so a closed
// connection nothing else holds is collected, and a cleanup drops its
// entry: callers that move to new connections (an ACL change) do not
// accumulate them.
var (
	watchesMu sync.Mutex
	watches   = map[weak.Pointer[nats.Conn]]*watch{}
)

// watchOf returns nc's watch, hooking it into nc's async error handler
// the first time: every Client on nc shares the one hook, and whatever
// handler nc had still sees every error, before the hook acts on it.
func watchOf(nc *nats.Conn) *watch {
	watchesMu.Lock()
	defer watchesMu.Unlock()
	key := weak.Make(nc)
	if w := watches[key]; w != nil {
		return w
	}
	w := &watch{pending: map[string]map[*context.CancelCauseFunc]struct{}{}}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if prev != nil { // first: it has seen the refusal by the time a call ends with it
			prev(nc, sub, err)
		}
		w.refuse(err)
	})
	watches[key] = w
	runtime.AddCleanup(nc, func(key weak.Pointer[nats.Conn]) {
		watchesMu.Lock()
		delete(watches, key)
		watchesMu.Unlock()
	}, key)
	return w
}

// refuse ends every request waiting on the subject err says the server
// refused a publish to: they all published there under the same
// permissions, so all were refused.
func (w *watch) refuse(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	m := publishRefused.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for cancel := range w.pending[m[1]] {
		(*cancel)(&refusal{subject: m[1], err: err})
	}
}

// Guard returns ctx, ended at once should the server refuse a publish to
// subject before stop is called: guard a request before publishing it,
// and read the end with Refused.
func (r *Requester) Guard(ctx context.Context, subject string) (guarded context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := r.watch
	w.mu.Lock()
	if w.pending[subject] == nil {
		w.pending[subject] = map[*context.CancelCauseFunc]struct{}{}
	}
	w.pending[subject][&cancel] = struct{}{}
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		delete(w.pending[subject], &cancel)
		if len(w.pending[subject]) == 0 {
			delete(w.pending, subject)
		}
		w.mu.Unlock()
		cancel(nil)
	}
}

// Refused returns the UNAUTHORIZED error of the request what when ctx, from
// Guard, ended because the server refused its publish; nil otherwise.
func Refused(ctx context.Context, what string) error {
	var r *refusal
	if !errors.As(context.Cause(ctx), &r) {
		return nil
	}
	return streams.NewError(streams.CodeUnauthorized,
		"%s: the server refused the publish to %s: this caller's permissions do not allow publishing there (%v)", what, r.subject, r.err)
}
