package workflow

import (
	"testing"

	"github.com/agent-reach/agentreach/dispatcher"
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
		{"finished", &Run{Status: RunFinished}, dispatcher.OutcomeResult, ""},
		{"a business rejection", failed(streams.CodeBizReject), dispatcher.OutcomeResult, ""},
		{"rolled back", failed(streams.CodeTimeout, compensated), dispatcher.OutcomeResult, ""},
		{"a compensation failed", failed(streams.CodeBizReject, compensated,
			&StepRun{Name: "c", Status: StepDone, Compensation: &CallRun{Status: StepFailed}}), dispatcher.OutcomeReview, ReasonCompensation},
		{"in doubt", failed(streams.CodeInternal, &StepRun{Name: "b", Status: StepFailed, CallRun: CallRun{InDoubt: true}}),
			dispatcher.OutcomeReview, dispatcher.ReasonInDoubt},
		{"past its deadline", failed(streams.CodeDeadlineExceeded), dispatcher.OutcomeReview, dispatcher.ReasonDeadline},
		{"bad input", failed(streams.CodeBadRequest), dispatcher.OutcomeDeadLetter, dispatcher.ReasonPoison},
		{"a timeout", failed(streams.CodeTimeout), dispatcher.OutcomeDeadLetter, dispatcher.ReasonFailed},
		{"an incomplete parallel step", failed(streams.CodeIncomplete), dispatcher.OutcomeDeadLetter, dispatcher.ReasonFailed},
	} {
		if where, reason := c.run.placement(); where != c.where || reason != c.reason {
			t.Errorf("%s: %s (%s), want %s (%s)", c.name, where, reason, c.where, c.reason)
		}
	}
}
