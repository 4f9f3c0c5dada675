package workflow

import (
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"testing"

	"github.com/agent-reach/agentreach/streams"
)

func TestAnEndedRunsOutcomeGoesWhereADurableTasksWould(t *testing.T) {
	failed := func(code streams.Code, steps ...*StepRun) *Run {
		return &Run{Status: RunFailed, Error: streams.NewError(code, "x"), FailedStep: "b", Steps: steps}
	}
	compensated := &StepRun{Name: "a", Status: StepCompensated, Compensation: &CallRun{Status: StepDone}}
	for _, c := range []struct {
		name          string
		run           *Run
		where, reason string
	}{
		{"finished", &Run{Status: RunFinished}, events.OutcomeResult, ""},
		{"a business rejection", failed(streams.CodeBizReject), events.OutcomeResult, ""},
		{"rolled back", failed(streams.CodeTimeout, compensated), events.OutcomeResult, ""},
		{"a compensation failed", failed(streams.CodeBizReject, compensated,
			&StepRun{Name: "c", Status: StepDone, Compensation: &CallRun{Status: StepFailed}}), events.OutcomeReview, ReasonCompensation},
		{"in doubt", failed(streams.CodeInternal, &StepRun{Name: "b", Status: StepFailed, CallRun: CallRun{InDoubt: true}}),
			events.OutcomeReview, durable.ReasonInDoubt},
		{"past its deadline", failed(streams.CodeDeadlineExceeded), events.OutcomeReview, durable.ReasonDeadline},
		{"bad input", failed(streams.CodeBadRequest), events.OutcomeDeadLetter, durable.ReasonPoison},
		{"a timeout", failed(streams.CodeTimeout), events.OutcomeDeadLetter, durable.ReasonFailed},
		{"an incomplete parallel step", failed(streams.CodeIncomplete), events.OutcomeDeadLetter, durable.ReasonFailed},
	} {
		if where, reason := c.run.placement(); where != c.where || reason != c.reason {
			t.Errorf("%s: %s (%s), want %s (%s)", c.name, where, reason, c.where, c.reason)
		}
	}
}
