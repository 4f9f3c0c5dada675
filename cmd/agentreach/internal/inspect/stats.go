package inspect

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

const statsAbout = `
Both count by one model (docs/operations.md, "The counting model"): a task
is a call, a durable task or a branch of a broadcast or fan-out, and ends
FINISHED, REJECTED (the caller's own doing: BIZ_REJECT, BAD_REQUEST,
PAYLOAD_TOO_LARGE, UNAUTHORIZED, CANCELLED) or FAILED (the service's);
TASKS = FINISHED + REJECTED + FAILED. A broadcast or fan-out counts once
as itself, and each of its branches as a task.

Without --by or --since: asks every running dispatcher replica (on
<prefix>.api.stats) for its counters since start: tasks ended (finished,
rejected, failed), retries, broadcasts, fan-outs and their branches,
requests answered OVERLOADED or dropped before they became tasks, tasks in
flight, and the agents in its routing table. When no dispatcher answers
within --gather it fails with "no dispatcher answered on <subject> within
<gather>" and exit status 1.

With --by capability|agent|type (and --since, default 1h): reads the task
record in REACH_EVENTS since then and prints one row per capability, agent
instance or agent type, most tasks first: tasks, finished, rejected,
failed, success rate, latency percentiles (p50, p95, p99), retries, cost in
total and per task, and quality (the mean of callers' feedback scores, 0
to 1); then the broadcasts and fan-outs answered. A task whose
instance is no longer registered counts for type "unknown"; one nothing
was delivered for for agent and type "none". Percentiles are exact to
within about 10 %. Every dispatcher serves the same aggregate for the
last hour on <prefix>.api.summary and at GET /v1/stats.

Example:
  agentreach stats --by agent --since 15m
  agentreach stats --by type --json`

func RunStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn   cli.ConnFlags
		asJSON bool
		wait   time.Duration
		by     string
		since  time.Duration
	)
	cl := cli.NewCmdline("stats", "agentreach stats [--by capability|agent|type] [--since 1h] [flags]", statsAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.StringVar(&by, "by", "", "group the task record by `dimension`: capability, agent or type (none: the replicas' counters)")
		fs.DurationVar(&since, "since", 0, "how far back the record is read, e.g. 15m, 1h, 24h (default 1h with --by)")
		cl.JSONFlag(fs, &asJSON, `print JSON: the counters as an array, the record's aggregate as an object; a failure as {"error": …}`)
		fs.DurationVar(&wait, "gather", 500*time.Millisecond, "how long to collect replies from the replicas (counters)")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and reading the record")
	})
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	aggregate := by != "" || since != 0
	var dim eventstats.Dimension
	if aggregate {
		var err error
		if by == "" {
			by = string(eventstats.ByCapability)
		}
		if dim, err = eventstats.ParseDimension(by); err != nil {
			return cl.UsageError(stderr, "--by %q: want capability, agent or type", by)
		}
		if since == 0 {
			since = eventstats.DefaultWindow
		}
		if since < time.Second {
			return cl.UsageError(stderr, "--since must be at least 1s, got %v", since)
		}
	} else if wait <= 0 {
		return cl.UsageError(stderr, "--gather must be positive, got %v", wait)
	}
	conn.Log = conn.Logger(stderr)
	nc, err := conn.Connect("agentreach-stats")
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer nc.Close()
	if !aggregate {
		replies, err := gather(ctx, nc, conn.Subjects().API(dispatcher.APIStats), wait)
		if err == nil {
			err = printStats(stdout, replies, asJSON)
		}
		if err != nil {
			return cl.Fail(stderr, err)
		}
		return cli.ExitOK
	}
	ctx, cancel := conn.Bounded(ctx)
	defer cancel()
	s, err := readRecord(ctx, nc, &conn, dim, since)
	if err == nil {
		err = printSummary(stdout, s, asJSON)
	}
	if err != nil {
		return cl.Fail(stderr, err)
	}
	return cli.ExitOK
}

// readRecord aggregates REACH_EVENTS over the last since by dim, naming
// each instance's type from REACH_AGENTS.
func readRecord(ctx context.Context, nc *nats.Conn, conn *cli.ConnFlags, dim eventstats.Dimension, since time.Duration) (*eventstats.Summary, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	types := make(map[string]string)
	if reg, err := registry.Open(ctx, js); err == nil {
		if entries, err := reg.List(ctx); err == nil {
			for _, e := range entries {
				types[e.ID] = e.Type
			}
		}
	}
	agg, err := eventstats.New(eventstats.Config{Window: since, TypeOf: func(id string) string { return types[id] }})
	if err != nil {
		return nil, err
	}
	if _, err := eventstats.Load(ctx, js, conn.Subjects(), agg); err != nil {
		return nil, conn.NotProvisioned(err, "stream "+streams.StreamEvents)
	}
	return agg.Summary(dim, since)
}

// printStats prints the replicas' counters: a table, or with asJSON the
// Stats, sorted by name.
func printStats(w io.Writer, replies [][]byte, asJSON bool) error {
	all := []dispatcher.Stats{} // --json: an array, never null
	for _, r := range replies {
		var s dispatcher.Stats
		if err := json.Unmarshal(r, &s); err != nil {
			return fmt.Errorf("unreadable reply: %w", err)
		}
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	if asJSON {
		return cli.WriteJSON(w, all)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DISPATCHER\tTASKS\tFINISHED\tREJECTED\tFAILED\tRETRIES\tBROADCASTS\tFAN-OUTS\tBRANCHES\tOVERLOADED\tDROPPED\tIN FLIGHT\tAGENTS")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Name, s.Tasks, s.Finished, s.Rejected,
			s.Failed, s.Retries, s.Broadcasts, s.FanOuts, s.Branches, s.Overloaded, s.Dropped, s.InFlight, s.Agents)
	}
	return tw.Flush()
}

// printSummary prints the aggregate: a table, or with asJSON the Summary.
func printSummary(w io.Writer, s *eventstats.Summary, asJSON bool) error {
	if asJSON {
		return cli.WriteJSON(w, s)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tTASKS\tFINISHED\tREJECTED\tFAILED\tSUCCESS\tP50\tP95\tP99\tRETRIES\tCOST\tCOST/TASK\tQUALITY\t\n", strings.ToUpper(string(s.By)))
	for _, r := range append(s.Rows, s.Total) {
		quality := "-"
		if r.Quality != nil {
			quality = fmt.Sprintf("%.2f (%d)", *r.Quality, r.Scores)
		}
		success := "-"
		if r.Tasks > 0 {
			success = fmt.Sprintf("%.1f%%", 100*r.SuccessRate)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", r.Key, r.Tasks, r.Finished, r.Rejected,
			r.Failed, success, msText(r.LatencyP50MS),
			msText(r.LatencyP95MS), msText(r.LatencyP99MS), r.Retries, costText(r.Cost), costText(r.CostPerTask), quality)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d tasks, %d broadcasts and %d fan-outs (%d branches, counted as tasks) from %s to %s "+
		"(REACH_EVENTS, last %s)\n", s.Total.Tasks, s.Total.Broadcasts, s.Total.FanOuts, s.Total.Branches,
		s.From.Local().Format(time.DateTime), s.To.Local().Format(time.DateTime), s.Since)
	return err
}

func msText(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", v)
}

func costText(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.4g", v)
}
