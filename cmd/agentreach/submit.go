package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/streams"
)

// durableWait is the default --timeout of submit and result: how long --wait
// waits for a durable task's outcome.
const durableWait = 60 * time.Second

const submitAbout = `
Submits a task to the durable tier (<prefix>.submit.<capability>, the
REACH_TASKS stream) with a JSON payload (default {}) and prints its request
id on stdout once JetStream has accepted it. From then on the task ends in
exactly one recorded outcome — a result in REACH_RESULTS, a dead letter or a
review entry — whatever crashes; fetch it with 'agentreach result <id>'.
While no capable agent has capacity the task waits in the stream.

With --wait it then waits for the outcome (up to --timeout) and prints it like
'agentreach call' does: the body on stdout, the metadata on stderr. With
--json stdout gets {"request_id": …}, or with --wait the object of
'agentreach call --json'.

A full buffer (the capability's pending bound) is refused with
"error: OVERLOADED: …" and exit status 1: nothing is dropped silently.
Submitting the same --request-id again within two minutes is deduplicated.

Example:
  agentreach submit echo '{"text":"hi"}'
  agentreach submit --wait --request-id order-4711 orders.notify '{"order":4711}'`

const resultAbout = `
Prints the recorded outcome of a durable task (from REACH_RESULTS) like
'agentreach call' prints a result: the body on stdout (indented when it is
JSON) and the metadata on stderr; with --json one object {"result": …,
"meta": {…}} (or {"error": …, "meta": …}) on stdout. A business rejection is
an outcome too: "error: BIZ_REJECT: …" and exit status 1.

When no outcome is recorded yet it says "error: no result recorded yet for
<id>" and exits with status 1: the task still waits or runs, or ended in the
dead-letter or review queue ('agentreach dlq ls', 'agentreach review ls').
With --wait it waits for the outcome instead, up to --timeout.

Example:
  agentreach result 3f0c2a4e-7d61-4f7b-9a55-0d8c1e2b6a90
  agentreach result --wait --timeout 5m order-4711`

// submitOutput is what submit --json prints without --wait.
type submitOutput struct {
	RequestID string `json:"request_id"`
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn      connFlags
		wait      bool
		requestID string
		headers   pairList
		asJSON    bool
	)
	cl := newCmdline("submit", "agentreach submit [flags] <capability> [<json>]", submitAbout)
	cl.group("Flags", func(fs *flag.FlagSet) {
		fs.BoolVar(&wait, "wait", false, "wait for the task's outcome and print it like 'agentreach call'")
		fs.StringVar(&requestID, "request-id", "", "the task's request `id` (letters, digits, '_', '-'); none means a fresh UUID.\nResubmitting an id within two minutes is deduplicated")
		registerHeaders(fs, &headers)
		fs.BoolVar(&asJSON, "json", false, `print {"request_id": …} on stdout; with --wait the object of 'agentreach call --json'`)
	})
	cl.group("Connection flags", func(fs *flag.FlagSet) {
		conn.register(fs, durableWait, "bound on connecting and submitting; with --wait also how long to wait for the outcome")
	})
	pos, code, ok := cl.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	capability, payload, code, ok := taskArgs(cl, pos, stderr)
	if !ok {
		return code
	}
	if requestID == "" {
		requestID = streams.NewRequestID()
	} else if err := validateRequestID(requestID); err != nil {
		return cl.usageError(stderr, "--request-id: %v", err)
	}
	opts := append(headerOptions(headers), agentkit.WithRequestID(requestID))

	cctx, client, done, ok := openClient(ctx, &conn, "agentreach-submit", stderr)
	if !ok {
		return exitFail
	}
	defer done()
	if wait {
		// Watching from before the submission: an outcome recorded at
		// once (a poison task parked in milliseconds) is not missed.
		res, err := client.SubmitAndWait(cctx, capability, payload, opts...)
		return printWaited(stdout, stderr, res, err, requestID, asJSON, cctx.Err() != nil)
	}
	id, err := client.Submit(cctx, capability, payload, opts...)
	if err != nil {
		return printResult(stdout, stderr, nil, err, requestID, asJSON)
	}
	if asJSON {
		writeJSONLine(stdout, submitOutput{RequestID: id})
	} else {
		fmt.Fprintln(stdout, id)
	}
	return exitOK
}

func runResult(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn   connFlags
		wait   bool
		asJSON bool
	)
	cl := newCmdline("result", "agentreach result [flags] <request-id>", resultAbout)
	cl.group("Flags", func(fs *flag.FlagSet) {
		fs.BoolVar(&wait, "wait", false, "wait for the outcome when none is recorded yet")
		fs.BoolVar(&asJSON, "json", false, `print one JSON object {"result": …, "meta": {…}} on stdout`)
	})
	cl.group("Connection flags", func(fs *flag.FlagSet) {
		conn.register(fs, durableWait, "bound on connecting and reading; with --wait also how long to wait for the outcome")
	})
	pos, code, ok := cl.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cl.usageError(stderr, "want one <request-id>, got %d arguments", len(pos))
	}
	id := pos[0]
	if err := validateRequestID(id); err != nil {
		return cl.usageError(stderr, "%v", err)
	}

	cctx, client, done, ok := openClient(ctx, &conn, "agentreach-result", stderr)
	if !ok {
		return exitFail
	}
	defer done()
	if wait {
		return waitResult(cctx, client, id, stdout, stderr, asJSON)
	}
	res, err := client.Result(cctx, id)
	if errors.Is(err, agentkit.ErrNoResult) {
		fmt.Fprintf(stderr, "error: no result recorded yet for %s\n", id)
		fmt.Fprintf(stderr, "The task may still wait or run, or it ended in the dead-letter or review queue\n('agentreach dlq ls', 'agentreach review ls'); --wait waits for it.\n")
		return exitFail
	}
	return printResult(stdout, stderr, res, err, id, asJSON)
}

// waitResult waits until ctx ends for the outcome of durable task id and
// prints it.
func waitResult(ctx context.Context, client *agentkit.Client, id string, stdout, stderr io.Writer, asJSON bool) int {
	res, err := client.Wait(ctx, id)
	return printWaited(stdout, stderr, res, err, id, asJSON, ctx.Err() != nil)
}

// printWaited prints a waited-for outcome; when the wait ran out it adds
// that the task is still accepted.
func printWaited(stdout, stderr io.Writer, res *agentkit.Result, err error, id string, asJSON, timedOut bool) int {
	code := printResult(stdout, stderr, res, err, id, asJSON)
	if res == nil && timedOut {
		fmt.Fprintf(stderr, "The task stays accepted: 'agentreach result %s' fetches its outcome later.\n", id)
	}
	return code
}

// validateRequestID checks a request id given on the command line: it
// becomes a subject token (<prefix>.result.<id>).
func validateRequestID(id string) error {
	if streams.ValidateInstanceID(id) != nil {
		return fmt.Errorf("request id %q must be 1 to %d letters, digits, '_' or '-'", id, streams.MaxNameLength)
	}
	return nil
}
