package task

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
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

The payload is the argument itself, @<file> for the contents of a file, or -
for stdin, as for 'agentreach call'.

With --wait it then waits for the outcome (up to --timeout) and prints it like
'agentreach call' does: the body on stdout, the metadata on stderr. With
--json stdout gets {"request_id": …}, or with --wait the object of
'agentreach call --json'; a failure {"error": {"code", "message"}, …}.

A full buffer (the capability's pending bound) is refused with
"error: OVERLOADED: …" and exit status 1: nothing is dropped silently.
Submitting the same --request-id again within two minutes is deduplicated.

Example:
  agentreach submit echo '{"text":"hi"}'
  agentreach submit orders.import @orders.json
  agentreach submit --wait --request-id order-4711 orders.notify '{"order":4711}'`

const resultAbout = `
Prints the recorded outcome of a durable task by request id. It looks in
REACH_RESULTS, then for a dead letter or review entry with that
Reach-Request-Id in REACH_DLQ and REACH_REVIEW, and says where the task is:

  a result     printed like 'agentreach call' prints one: the body on stdout
               (indented when it is JSON), the metadata on stderr; a business
               rejection is an outcome too ("error: BIZ_REJECT: …", status 1)
  parked       "error: parked in REACH_DLQ (seq N, reason R): CODE: message",
               status 1 ('agentreach dlq' or 'agentreach review' handles it)
  nothing      "error: no outcome recorded for <id>: …", status 1: the task
               may still wait or run, or was never submitted

With --wait it waits for the outcome instead of reporting nothing, up to
--timeout. With --json stdout gets one object: {"result": …, "meta": {…}},
or {"error": {"code", "message"}, …} with "parked": {…} (the entry, as
'dlq show --json' prints it) for a parked task.

Example:
  agentreach result 3f0c2a4e-7d61-4f7b-9a55-0d8c1e2b6a90
  agentreach result --wait --timeout 5m order-4711`

// SubmitOutput is what submit --json prints without --wait.
type SubmitOutput struct {
	RequestID string `json:"request_id"`
}

func RunSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn      cli.ConnFlags
		wait      bool
		requestID string
		headers   cli.PairList
		asJSON    bool
	)
	cl := cli.NewCmdline("submit", "agentreach submit [flags] <capability> ['<json>' | @<file> | -]", submitAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.BoolVar(&wait, "wait", false, "wait for the task's outcome and print it like 'agentreach call'")
		fs.StringVar(&requestID, "request-id", "", "the task's request `id` (letters, digits, '_', '-'); none means a fresh UUID.\nResubmitting an id within two minutes is deduplicated")
		registerHeaders(fs, &headers)
		cl.JSONFlag(fs, &asJSON, `print {"request_id": …} on stdout; with --wait the object of 'agentreach call --json'`)
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, durableWait, "bound on connecting and submitting; with --wait also how long to wait for the outcome")
		conn.RegisterJSDomain(fs)
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	capability, p, code, ok := taskArgs(cl, pos, stderr)
	if !ok {
		return code
	}
	if requestID == "" {
		requestID = streams.NewRequestID()
	} else if err := validateRequestID(requestID); err != nil {
		return cl.UsageError(stderr, "--request-id: %v", err)
	}
	opts := append(headerOptions(headers), agentkit.WithRequestID(requestID))

	s, err := openClient(ctx, &conn, "agentreach-submit", stderr)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer s.close()
	out := &durableOutput{cl: cl, s: s, stdout: stdout, stderr: stderr, asJSON: asJSON}
	if wait {
		// Watching from before the submission: an outcome recorded at
		// once (a poison task parked in milliseconds) is not missed.
		res, err := s.client.SubmitAndWait(s.ctx, capability, p.Data, opts...)
		err = s.submitError(s.tooLarge(err, p), capability)
		if res == nil && s.ctx.Err() != nil {
			code := out.print(res, err, requestID)
			fmt.Fprintf(stderr, "The task stays accepted: 'agentreach result %s' fetches its outcome later.\n", requestID)
			return code
		}
		return out.print(res, err, requestID)
	}
	id, err := s.client.Submit(s.ctx, capability, p.Data, opts...)
	if err != nil {
		return out.print(nil, s.submitError(s.tooLarge(err, p), capability), requestID)
	}
	if asJSON {
		cli.WriteJSONLine(stdout, SubmitOutput{RequestID: id})
	} else {
		fmt.Fprintln(stdout, id)
	}
	return cli.ExitOK
}

func RunResult(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn   cli.ConnFlags
		wait   bool
		asJSON bool
	)
	cl := cli.NewCmdline("result", "agentreach result [flags] <request-id>", resultAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.BoolVar(&wait, "wait", false, "wait for the outcome when none is recorded yet")
		cl.JSONFlag(fs, &asJSON, `print one JSON object {"result": …, "meta": {…}} on stdout, or {"error": …} on failure`)
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, durableWait, "bound on connecting and reading; with --wait also how long to wait for the outcome")
		conn.RegisterJSDomain(fs)
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cl.UsageError(stderr, "want one <request-id>, got %d arguments", len(pos))
	}
	id := pos[0]
	if err := validateRequestID(id); err != nil {
		return cl.UsageError(stderr, "%v", err)
	}

	s, err := openClient(ctx, &conn, "agentreach-result", stderr)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer s.close()
	out := &durableOutput{cl: cl, s: s, stdout: stdout, stderr: stderr, asJSON: asJSON}
	res, err := s.client.Result(s.ctx, id)
	if !errors.Is(err, agentkit.ErrNoResult) {
		if res == nil {
			err = conn.NotProvisioned(err, "stream "+streams.StreamResults)
		}
		return out.print(res, err, id)
	}
	p, found, err := s.findParked(s.ctx, id)
	switch {
	case err != nil:
		return cl.Fail(stderr, err)
	case found:
		return out.parked(p)
	case !wait:
		code := cl.Fail(stderr, cli.WithCode(cli.CodeNotFound, fmt.Errorf(
			"no outcome recorded for %s: no result, dead letter or review entry; the task may still wait or run, or was never submitted", id)))
		fmt.Fprintln(stderr, "--wait waits for an outcome.")
		return code
	}
	res, err = s.client.Wait(s.ctx, id)
	if res != nil || s.ctx.Err() == nil {
		return out.print(res, err, id)
	}
	// The wait ran out. A task parked between the look above and the start
	// of the wait was not seen: look once more.
	lctx, cancel := conn.Bounded(ctx)
	defer cancel()
	if p, found, lerr := s.findParked(lctx, id); lerr == nil && found {
		return out.parked(p)
	}
	code = out.print(res, err, id)
	fmt.Fprintf(stderr, "No result, dead letter or review entry for %s yet: the task may still wait or run, or was never submitted.\n"+
		"'agentreach result %s' looks again later.\n", id, id)
	return code
}

// submitError explains a submission that no stream took; other errors pass
// unchanged.
func (s *session) submitError(err error, capability string) error {
	resource := "stream " + streams.StreamResults // where SubmitAndWait looks for the outcome
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		resource = fmt.Sprintf("stream %s (capturing %s)", streams.StreamTasks, s.conn.Subjects().Submit(capability))
	}
	return s.conn.NotProvisioned(err, resource)
}

// findParked returns the newest entry for request id in REACH_DLQ or
// REACH_REVIEW, found by its Reach-Request-Id header.
func (s *session) findParked(ctx context.Context, id string) (p durable.Parked, found bool, err error) {
	for _, stream := range []string{streams.StreamDLQ, streams.StreamReview} {
		list, err := durable.ListParked(ctx, s.js, s.conn.Subjects(), stream)
		if err != nil {
			return p, false, s.conn.NotProvisioned(err, "stream "+stream)
		}
		for _, e := range list {
			if e.RequestID == id && (!found || e.Time.After(p.Time)) {
				p, found = e, true
			}
		}
	}
	return p, found, nil
}

// durableOutput prints the outcomes of durable tasks, for submit and result.
type durableOutput struct {
	cl             *cli.Cmdline
	s              *session
	stdout, stderr io.Writer
	asJSON         bool
}

// print prints an outcome like printResult, except that a failure with a
// code of the CLI's own is reported as such, and a task parked while it was
// waited for as parked.
func (o *durableOutput) print(res *agentkit.Result, err error, id string) int {
	var ce *cli.CodedError
	if errors.As(err, &ce) {
		return o.cl.Fail(o.stderr, err)
	}
	if errors.Is(err, agentkit.ErrParked) {
		if p, found, lerr := o.s.findParked(o.s.ctx, id); lerr == nil && found {
			return o.parked(p)
		}
	}
	return printResult(o.stdout, o.stderr, res, err, id, o.asJSON)
}

// parked reports that a task ended parked instead of with a result: exit 1,
// with --json the error object, the metadata and the entry.
func (o *durableOutput) parked(p durable.Parked) int {
	code := streams.Code(p.Code)
	if code == "" {
		code = streams.CodeInternal
	}
	cause := streams.NewError(code, "%s", p.LastError)
	err := fmt.Errorf("parked in %s (seq %d, reason %s): %w", p.Stream, p.Seq, cli.OrDash(p.Reason), cause)
	entry := jsonOfParked(p)
	exit := o.cl.FailWith(o.stderr, err, cli.FailureOutput{Parked: &entry, Meta: &cli.CallMeta{
		Status: string(streams.StatusFailed), Node: p.Header.Get(streams.HeaderNode), Attempt: p.Attempts, RequestID: p.RequestID,
		OrchestrationID: p.Header.Get(streams.HeaderOrchestrationID)}})
	k := dlqKind
	if p.Stream == streams.StreamReview {
		k = reviewKind
	}
	fmt.Fprintf(o.stderr, "'agentreach %s show %d' shows it; %s.\n", k.name, p.Seq, k.handle(p.Seq))
	return exit
}

// validateRequestID checks a request id given on the command line: it
// becomes a subject token (<prefix>.result.<id>).
func validateRequestID(id string) error {
	if streams.ValidateInstanceID(id) != nil {
		return fmt.Errorf("request id %q must be 1 to %d letters, digits, '_' or '-'", id, streams.MaxNameLength)
	}
	return nil
}
