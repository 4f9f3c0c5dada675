package agenttest

import "errors"

var (
	// ErrUnknownRule is returned by Check when Only names a rule that does
	// not exist.
	ErrUnknownRule = errors.New("agenttest: unknown rule")
	// ErrAlreadyStarted is returned by the Start of a Command agent that
	// was started before: one process per Check.
	ErrAlreadyStarted = errors.New("agenttest: agent already started")
)
