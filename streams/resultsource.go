package streams

import "fmt"

// NoSource is the <source> token of a durable task that names no
// Reach-Source (auth off): its result is published on
// reach.result._.<request-id>. No identity, agent instance or Reach-Source
// can be named "_" (a name starts with a letter or digit), so it collides
// with none.
const NoSource = "_"

// ResultSource returns the token that stands for a task's caller in its
// result subject and its deduplication id: the Reach-Source (proven where
// auth is on, as sent where it is off), or NoSource when there is none. A
// Reach-Source that is not one name token (letters, digits, '_' and '-',
// starting with a letter or digit) cannot be a subject token and is an
// error.
func ResultSource(source string) (string, error) {
	if source == "" {
		return NoSource, nil
	}
	if len(source) > MaxNameLength || !validToken(source, false) {
		return "", fmt.Errorf("%w: %s %q must be one token of letters, digits, '_' and '-' (at most %d bytes)",
			ErrInvalidName, HeaderSource, source, MaxNameLength)
	}
	return source, nil
}

// SubmissionID is the Nats-Msg-Id of a durable submission: "<source>.<request-id>",
// with source as ResultSource gives it, so that REACH_TASKS deduplicates a
// caller's resubmission of a request id but not another caller's task
// under the same id (docs/protocol.md, durable tier).
func SubmissionID(source, requestID string) string { return source + "." + requestID }
