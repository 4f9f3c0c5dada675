package main

import (
	"context"
	"io"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command failed, e.g. a call answered with an error code
	exitUsage = 2 // bad command line, flag or environment variable
)

// runFunc runs one command with its arguments and returns the exit code.
type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int
