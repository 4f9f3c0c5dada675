// Package failrun logs a run of failures of an action retried every
// fraction of a second — a heartbeat's put, an account push to a server
// that is down — without an error line per try: the first failure of a
// run at the caller's level, the rest at debug with their count, and one
// line when the action succeeds again.
package failrun

import "github.com/rs/zerolog"

// Run counts the failures since the last success. The zero value is a run
// with none.
type Run struct{ n int }

// Fail counts one more failure and returns its log event, with the count
// as "failures": at level first for the first of a run, debug after.
func (r *Run) Fail(log *zerolog.Logger, first zerolog.Level) *zerolog.Event {
	r.n++
	if r.n == 1 {
		return log.WithLevel(first).Int("failures", r.n)
	}
	return log.Debug().Int("failures", r.n)
}

// Succeeded ends the run and returns how many failed before this success
// (0: none, nothing to say).
func (r *Run) Succeeded() int {
	n := r.n
	r.n = 0
	return n
}

// Failing is whether the last try failed.
func (r *Run) Failing() bool { return r.n > 0 }
