package streams

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "reach"

// Subjects builds the subjects of one Agent-Reach deployment. The zero value
// uses DefaultPrefix.
type Subjects struct {
	// Prefix is the first subject token (or tokens), "reach" when empty.
	Prefix string
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// Task is the direct-tier subject for a capability: reach.task.<cap>.
func (s Subjects) Task(capability string) string { return s.prefix() + ".task." + capability }

// TaskWildcard matches every direct-tier task: reach.task.>.
func (s Subjects) TaskWildcard() string { return s.prefix() + ".task.>" }

// CapabilityFromTask returns the capability of a reach.task.<cap> subject, or
// "" when subject is not a task subject.
func (s Subjects) CapabilityFromTask(subject string) string {
	return s.CapabilityAfter("task", subject)
}

// CapabilityFromSubmit returns the capability of a reach.submit.<cap>
// subject, or "".
func (s Subjects) CapabilityFromSubmit(subject string) string {
	return s.CapabilityAfter("submit", subject)
}

// Feedback is where a caller sends its score of a result
// (agentkit.Client.Feedback), as a request: reach.feedback. Every
// dispatcher replica hears it; the one that finished the task checks it
// and stores it on FeedbackRecord.
func (s Subjects) Feedback() string { return s.prefix() + ".feedback" }

// FeedbackRecord is the subject of the feedback records a dispatcher
// accepted: reach.event._feedback, in the REACH_EVENTS stream, on a token no
// capability can have. Only dispatchers publish there.
func (s Subjects) FeedbackRecord() string { return s.prefix() + ".event._feedback" }

// DeadLetter is the subject of the REACH_DLQ stream for a capability.
func (s Subjects) DeadLetter(capability string) string { return s.prefix() + ".dlq." + capability }

// DeadLetterWildcard matches every dead letter.
func (s Subjects) DeadLetterWildcard() string { return s.prefix() + ".dlq.>" }

// Review is the subject of the REACH_REVIEW stream for a capability.
func (s Subjects) Review(capability string) string { return s.prefix() + ".review." + capability }

// ReviewWildcard matches every review entry.
func (s Subjects) ReviewWildcard() string { return s.prefix() + ".review.>" }

// Event is the subject of the REACH_EVENTS stream for a capability.
func (s Subjects) Event(capability string) string { return s.prefix() + ".event." + capability }

// EventWildcard matches every event record.
func (s Subjects) EventWildcard() string { return s.prefix() + ".event.>" }

// CapabilityAfter returns what follows "<prefix>.<kind>." in subject, or "".
func (s Subjects) CapabilityAfter(kind, subject string) string {
	p := s.prefix() + "." + kind + "."
	if !strings.HasPrefix(subject, p) {
		return ""
	}
	return subject[len(p):]
}

// Broadcast is the subject that delivers to every capable instance.
func (s Subjects) Broadcast(capability string) string {
	return s.prefix() + ".broadcast." + capability
}

// BroadcastWildcard matches every broadcast: reach.broadcast.>.
func (s Subjects) BroadcastWildcard() string { return s.prefix() + ".broadcast.>" }

// CapabilityFromBroadcast returns the capability of a
// reach.broadcast.<cap> subject, or "".
func (s Subjects) CapabilityFromBroadcast(subject string) string {
	return s.CapabilityAfter("broadcast", subject)
}

// FanOut is the subject of scatter-gather requests over several
// capabilities: reach.fanout.
func (s Subjects) FanOut() string { return s.prefix() + ".fanout" }

// Submit is the durable-tier subject captured by the REACH_TASKS stream.
func (s Subjects) Submit(capability string) string { return s.prefix() + ".submit." + capability }

// SubmitWildcard matches every durable-tier submission: reach.submit.>.
func (s Subjects) SubmitWildcard() string { return s.prefix() + ".submit.>" }

// Agent is the delivery subject of one agent instance: reach.agent.<id>.
func (s Subjects) Agent(instance string) string { return s.prefix() + ".agent." + instance }

// Result is the subject a durable task's result is published on:
// reach.result.<source>.<request-id>, where source is the submitter's
// token (ResultSource). Only its submitter may read it (docs/security.md).
func (s Subjects) Result(source, requestID string) string {
	return s.prefix() + ".result." + source + "." + requestID
}

// ResultsOf matches every durable result of one submitter:
// reach.result.<source>.>.
func (s Subjects) ResultsOf(source string) string { return s.prefix() + ".result." + source + ".>" }

// ResultWildcard matches every durable result: reach.result.>.
func (s Subjects) ResultWildcard() string { return s.prefix() + ".result.>" }

// Cancel is the subject on which a caller cancels a direct-tier task by
// its Reach-Request-Id; every dispatcher replica listens (no queue group).
func (s Subjects) Cancel() string { return s.prefix() + ".cancel" }

// API is the control and inspection subject for a verb: reach.api.<verb>.
func (s Subjects) API(verb string) string { return s.prefix() + ".api." + verb }

// validToken reports whether tok is one name token: a letter or digit, then
// letters, digits, '_' and '-' (lowercase letters only when lower). It runs
// on every task, so it is a loop rather than a regular expression.
func validToken(tok string, lower bool) bool {
	if tok == "" {
		return false
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c >= 'A' && c <= 'Z' && !lower:
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// validCapability reports whether name is dotted lowercase tokens.
func validCapability(name string) bool {
	for {
		tok, rest, more := strings.Cut(name, ".")
		if !validToken(tok, true) {
			return false
		}
		if !more {
			return true
		}
		name = rest
	}
}

// MaxNameLength bounds capability names and instance ids.
const MaxNameLength = 128

// ValidateCapability reports why name is not a valid capability: capabilities
// are dotted lowercase tokens such as "inventory.query", each token made of
// a-z, 0-9, '_' and '-' and starting with a letter or digit.
func ValidateCapability(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: capability name is empty", ErrInvalidName)
	case len(name) > MaxNameLength:
		return fmt.Errorf("%w: capability %q is longer than %d bytes", ErrInvalidName, name, MaxNameLength)
	case !validCapability(name):
		return fmt.Errorf("%w: capability %q must be dotted lowercase tokens of [a-z0-9_-] (e.g. \"inventory.query\")", ErrInvalidName, name)
	}
	return nil
}

// ValidateInstanceID reports why id cannot name an agent instance: it becomes
// one subject token and one KV key, so it is letters, digits, '_' and '-'.
func ValidateInstanceID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: instance id is empty", ErrInvalidName)
	case len(id) > MaxNameLength:
		return fmt.Errorf("%w: instance id %q is longer than %d bytes", ErrInvalidName, id, MaxNameLength)
	case !validToken(id, false):
		return fmt.Errorf("%w: instance id %q may hold only letters, digits, '_' and '-'", ErrInvalidName, id)
	}
	return nil
}
