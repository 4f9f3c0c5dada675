package cli

import (
	"context"
	"io"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitFail  = 1 // the command failed, e.g. a call answered with an error code
	ExitUsage = 2 // bad command line, flag or environment variable
)

// RunFunc runs one command with its arguments and returns the exit code.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int
