package document

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/streams"
)

const runsAbout = `
Shows workflow runs from REACH_RUNS: a durable run's record is written
before each of its tasks is sent and when it ends, a direct-tier run's once
it has answered. Records are kept 7 days after their last change.

Sub-commands:
  ls [--workflow NAME] [--status S]   one row per run, oldest first
  show RUN-ID                         the run step by step — status, node,
                                      latency, attempts, the condition and
                                      its value, skips, fallbacks,
                                      compensations — and every decision

Example:
  agentreach runs ls --workflow claim.review --status failed
  agentreach runs show 0f8e6a1c-2b4d-4e6f-8a1b-3c5d7e9f1a2b`

// runStatuses are the values --status takes.
var runStatuses = []workflow.RunStatus{workflow.RunRunning, workflow.RunWaiting, workflow.RunCompensating,
	workflow.RunFinished, workflow.RunFailed}

// runSummaryJSON is one row of `runs ls --json`.
type runSummaryJSON struct {
	ID         string             `json:"id"`
	Workflow   string             `json:"workflow"`
	Version    uint64             `json:"version"`
	Tier       string             `json:"tier"`
	Status     workflow.RunStatus `json:"status"`
	Outcome    string             `json:"outcome,omitempty"`
	Started    time.Time          `json:"started"`
	Ended      time.Time          `json:"ended,omitzero"`
	Steps      int                `json:"steps"`
	Done       int                `json:"done"`
	FailedStep string             `json:"failed_step,omitempty"`
	Error      *streams.Error     `json:"error,omitempty"`
}

func RunRuns(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn     cli.ConnFlags
		asJSON   bool
		name     string
		statusIs string
	)
	cl := cli.NewCmdline("runs", "agentreach runs [flags] ls | show RUN-ID", runsAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		cl.JSONFlag(fs, &asJSON, "print JSON: ls an array of summaries, show the run's record; a failure as {\"error\": …}")
		fs.Var(cli.CheckedString{V: &name, Check: func(s string) error {
			if s == "" {
				return nil
			}
			return streams.ValidateCapability(s)
		}}, "workflow", "ls: only the runs of workflow `NAME`")
		fs.Var(cli.CheckedString{V: &statusIs, Check: func(s string) error {
			if s == "" || slices.Contains(runStatuses, workflow.RunStatus(s)) {
				return nil
			}
			return fmt.Errorf("unknown status %q (want running, waiting, compensating, finished or failed)", s)
		}}, "status", "ls: only the runs in `status` running, waiting, compensating, finished or failed")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and on reading the runs")
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	switch {
	case len(pos) == 0:
		return cl.UsageError(stderr, "want a sub-command: ls or show")
	case pos[0] == "ls" && len(pos) != 1:
		return cl.UsageError(stderr, "ls: unexpected argument %q", pos[1])
	case pos[0] == "show" && len(pos) != 2:
		return cl.UsageError(stderr, "show: want one RUN-ID, got %d arguments", len(pos)-1)
	case pos[0] == "show" && streams.ValidateInstanceID(pos[1]) != nil:
		return cl.UsageError(stderr, "show: %q is not a run id (a request id: letters, digits, '_' and '-')", pos[1])
	case pos[0] != "ls" && pos[0] != "show":
		return cl.UsageError(stderr, "unknown sub-command %q (want ls or show)", pos[0])
	}
	conn.Log = conn.Logger(stderr)
	nc, kv, err := openBucket(ctx, &conn, "agentreach-runs", streams.BucketRuns)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer nc.Close()
	ctx, cancel := conn.Bounded(ctx)
	defer cancel()
	if pos[0] == "show" {
		r, err := workflow.GetRun(ctx, kv, pos[1])
		if errors.Is(err, workflow.ErrNoRun) {
			return cl.Fail(stderr, cli.WithCode(cli.CodeNotFound, fmt.Errorf("%s holds no run %s (records are kept 7 days)", streams.BucketRuns, pos[1])))
		}
		if err != nil {
			return cl.Fail(stderr, err)
		}
		if asJSON {
			err = cli.WriteJSON(stdout, r)
		} else {
			err = printRun(stdout, r)
		}
		if err != nil {
			return cl.Fail(stderr, err)
		}
		return cli.ExitOK
	}
	runs, skipped, err := workflow.ListRuns(ctx, kv)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	if skipped > 0 {
		fmt.Fprintf(stderr, "warning: %d records in %s do not decode and are left out\n", skipped, streams.BucketRuns)
	}
	runs = slices.DeleteFunc(runs, func(r *workflow.Run) bool {
		return name != "" && r.Workflow != name || statusIs != "" && string(r.Status) != statusIs
	})
	if asJSON {
		err = printRunsJSON(stdout, runs)
	} else {
		err = printRunsTable(stdout, runs, time.Now())
	}
	if err != nil {
		return cl.Fail(stderr, err)
	}
	return cli.ExitOK
}

// doneSteps counts the steps of r that are done (or were, before their
// compensation).
func doneSteps(r *workflow.Run) int {
	n := 0
	for _, sr := range r.Steps {
		if sr.Status == workflow.StepDone || sr.Status == workflow.StepCompensated {
			n++
		}
	}
	return n
}

func printRunsJSON(w io.Writer, runs []*workflow.Run) error {
	out := make([]runSummaryJSON, len(runs))
	for i, r := range runs {
		out[i] = runSummaryJSON{ID: r.ID, Workflow: r.Workflow, Version: r.Version, Tier: r.Tier, Status: r.Status,
			Outcome: r.Outcome, Started: r.Started, Ended: r.Ended, Steps: len(r.Steps), Done: doneSteps(r),
			FailedStep: r.FailedStep, Error: r.Error}
	}
	return cli.WriteJSON(w, out)
}

func printRunsTable(w io.Writer, runs []*workflow.Run, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tWORKFLOW\tTIER\tSTATUS\tSTARTED\tSTEPS DONE\tOUTCOME\tERROR")
	for _, r := range runs {
		failure := "-"
		if r.Error != nil {
			failure = cli.Truncate(cli.OneLine(string(r.Error.Code)+": "+r.Error.Message), cli.LastErrorWidth)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\t%d/%d\t%s\t%s\n", r.ID, r.Workflow, r.Tier, r.Status,
			cli.HeartbeatAge(now.Sub(r.Started)), doneSteps(r), len(r.Steps), cli.OrDash(r.Outcome), failure)
	}
	return tw.Flush()
}

// printRun writes a run step by step, then its decisions.
func printRun(w io.Writer, r *workflow.Run) error {
	fmt.Fprintf(w, "run %s\n", r.ID)
	fmt.Fprintf(w, "  workflow      %s (version %d)\n", r.Workflow, r.Version)
	fmt.Fprintf(w, "  tier          %s\n", r.Tier)
	status := string(r.Status)
	if r.Outcome != "" {
		status += ", outcome " + r.Outcome
		if r.Reason != "" {
			status += " (" + r.Reason + ")"
		}
	}
	fmt.Fprintf(w, "  status        %s\n", status)
	took := ""
	if !r.Ended.IsZero() {
		took = fmt.Sprintf(", ended after %v", r.Ended.Sub(r.Started).Round(time.Microsecond))
	}
	fmt.Fprintf(w, "  started       %s%s\n", r.Started.Format(time.RFC3339Nano), took)
	if r.OrchestrationID != r.ID {
		fmt.Fprintf(w, "  orchestration %s\n", r.OrchestrationID)
	}
	if r.Owner != "" {
		fmt.Fprintf(w, "  owner         %s\n", r.Owner)
	}
	if r.Resumes > 0 || r.Replays > 0 {
		fmt.Fprintf(w, "  resumed       %d times, replayed %d times\n", r.Resumes, r.Replays)
	}
	fmt.Fprintf(w, "  input         %s\n", cli.Truncate(string(r.Input), 200))
	if string(r.Params) != "" && string(r.Params) != "{}" {
		fmt.Fprintf(w, "  params        %s\n", cli.Truncate(string(r.Params), 200))
	}
	if r.Error != nil {
		fmt.Fprintf(w, "  error         %s: %s\n", r.Error.Code, r.Error.Message)
	}
	if len(r.Output) > 0 {
		fmt.Fprintf(w, "  output        %s\n", cli.Truncate(string(r.Output), 200))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATUS\tCAPABILITY\tNODE\tLATENCY\tATTEMPTS\tSENDS\tDETAIL")
	for _, sr := range r.Steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sr.Name, sr.Status, cli.OrDash(sr.Capability), cli.OrDash(sr.Node),
			latency(sr.LatencyMS, sr.Sends), count0(sr.Attempts), count0(sr.Sends), stepDetail(sr))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ndecisions (%d)\n", len(r.Decisions))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, d := range r.Decisions {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", d.At.Format("15:04:05.000"), cli.OrDash(d.Step), d.Kind, d.Detail)
	}
	return tw.Flush()
}

// stepDetail is the last column of `runs show`: what decided the step's
// course, and how its fallback, compensation or branches went.
func stepDetail(sr *workflow.StepRun) string {
	var parts []string
	if c := sr.Condition; c != nil {
		parts = append(parts, "when "+c.Trace)
	}
	if sr.Skipped != "" {
		parts = append(parts, "skipped: "+sr.Skipped)
	}
	if sr.Error != nil {
		parts = append(parts, fmt.Sprintf("error %s: %s", sr.Error.Code, sr.Error.Message))
	}
	for _, b := range sr.Branches {
		s := fmt.Sprintf("branch %s %s on %s", b.Name, b.Status, cli.OrDash(b.Node))
		if b.Error != nil {
			s += " (" + string(b.Error.Code) + ")"
		}
		parts = append(parts, s)
	}
	for _, m := range sr.Missing {
		parts = append(parts, fmt.Sprintf("branch %s missing: %s", m.Name, m.Reason))
	}
	if f := sr.Fallback; f != nil {
		parts = append(parts, "fallback "+callText(f))
	}
	if c := sr.Compensation; c != nil {
		parts = append(parts, "compensation "+callText(c))
	}
	if len(parts) == 0 {
		return "-"
	}
	return cli.OneLine(strings.Join(parts, "; "))
}

// callText describes one call of a run (a fallback, a compensation).
func callText(c *workflow.CallRun) string {
	s := fmt.Sprintf("%s %s on %s, %s, %s, %s", c.Capability, c.Status, cli.OrDash(c.Node), latency(c.LatencyMS, c.Sends),
		cli.Count(c.Attempts, "attempt", "attempts"), cli.Count(c.Sends, "send", "sends"))
	if c.Error != nil {
		s += fmt.Sprintf(" (%s: %s)", c.Error.Code, c.Error.Message)
	}
	return s
}

// latency writes a call's latency, "-" when it was not sent.
func latency(ms float64, sends int) string {
	if sends == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", ms)
}

// count0 writes n, "-" for 0.
func count0(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
