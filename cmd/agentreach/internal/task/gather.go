package task

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/streams"
)

const broadcastAbout = `
Sends a JSON payload (default {}) to every instance of a capability that is
routable now, once each, through the dispatchers (<prefix>.broadcast.<cap>),
and prints one row per instance: its status, latency, attempts and result or
error, then the instances that did not answer with the reason. Every
instance must succeed unless --quorum asks for fewer (a fraction below 1,
or a count). With --json, stdout gets the aggregate as the dispatcher sent
it ({"expected", "answered", "succeeded", "complete", "replies",
"missing"}).

Exit status 1 when the completion policy was not met (INCOMPLETE) or the
broadcast failed (NO_AGENT when no instance is routable).

Example:
  agentreach broadcast peer.status '{}'
  agentreach broadcast --quorum 0.5 risk.score @claim.json`

const fanoutAbout = `
Sends a fan-out request (<prefix>.fanout) from a file, or - for stdin, and
prints one row per branch like 'agentreach broadcast'. The request is JSON:

  {"branches": [{"name": "credit", "capability": "risk.credit", "payload": {"id": 7}, "timeout_ms": 2000},
                {"name": "fraud",  "capability": "risk.fraud",  "payload": {"id": 7}}],
   "mode": "quorum", "quorum": 0.6, "max_wait_ms": 0}

mode is all, quorum (the default, quorum 0.6) or first; see
docs/reference.md, "Broadcast and fan-out". With --json, stdout gets the
aggregate as the dispatcher sent it.

Example:
  agentreach fanout underwriting.json
  echo '{"branches":[{"name":"a","capability":"echo","payload":{"text":"hi"}}]}' | agentreach fanout -`

func RunBroadcast(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn    cli.ConnFlags
		quorum  float64
		headers cli.PairList
		asJSON  bool
	)
	cl := cli.NewCmdline("broadcast", "agentreach broadcast [flags] <capability> ['<json>' | @<file> | -]", broadcastAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.Float64Var(&quorum, "quorum", 0, "how many instances must succeed: a `fraction` below 1 of them, or a count; 0 means all")
		registerHeaders(fs, &headers)
		cl.JSONFlag(fs, &asJSON, "print the aggregate as JSON on stdout, or {\"error\": …} on failure")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 30*time.Second, "how long to wait for the answers: the broadcast's overall deadline")
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
	if quorum < 0 {
		return cl.UsageError(stderr, "--quorum must not be negative, got %v", quorum)
	}
	opts := headerOptions(headers)
	if quorum > 0 {
		opts = append(opts, agentkit.WithQuorum(quorum))
	}
	s, err := openClient(ctx, &conn, "agentreach-broadcast", stderr)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer s.close()
	g, err := s.client.Broadcast(s.ctx, capability, p.Data, opts...)
	return printGathered(cl, stdout, stderr, g, s.explain(err, p), asJSON)
}

func RunFanOut(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn    cli.ConnFlags
		headers cli.PairList
		asJSON  bool
	)
	cl := cli.NewCmdline("fanout", "agentreach fanout [flags] (<file> | -)", fanoutAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		registerHeaders(fs, &headers)
		cl.JSONFlag(fs, &asJSON, "print the aggregate as JSON on stdout, or {\"error\": …} on failure")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 30*time.Second, "how long to wait for the answers: the fan-out's overall deadline")
		conn.RegisterJSDomain(fs)
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cl.UsageError(stderr, "want the fan-out request: a file, or - for stdin; got %d arguments", len(pos))
	}
	arg := pos[0]
	if arg != "-" {
		arg = "@" + arg
	}
	p, err := cli.ReadPayload(arg)
	if err != nil {
		var we *streams.Error
		if errors.As(err, &we) {
			return cl.Fail(stderr, err)
		}
		return cl.UsageError(stderr, "%v", err)
	}
	var req streams.FanOutRequest
	if err := json.Unmarshal(p.Data, &req); err != nil {
		return cl.UsageError(stderr, "%s is not a fan-out request: %v", p.What(), err)
	}
	s, err := openClient(ctx, &conn, "agentreach-fanout", stderr)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer s.close()
	// The request goes as it was written (the dispatcher checks it and
	// names what is wrong), with the client's headers.
	g, err := s.client.FanOutRaw(s.ctx, p.Data, headerOptions(headers)...)
	return printGathered(cl, stdout, stderr, g, s.explain(err, p), asJSON)
}

// printGathered prints a broadcast's or fan-out's outcome and returns the
// exit code: a table of branches, or with asJSON the aggregate; errors as
// the other commands print them.
func printGathered(cl *cli.Cmdline, stdout, stderr io.Writer, g *agentkit.Gathered, err error, asJSON bool) int {
	if g == nil {
		return cl.Fail(stderr, err)
	}
	if asJSON {
		cli.WriteJSONLine(stdout, gatheredJSON(g))
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "BRANCH\tNODE\tSTATUS\tLATENCY\tATTEMPTS\tRESULT OR ERROR")
		for _, r := range g.Replies {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1fms\t%d\t%s\n", r.Name, cli.OrDash(r.Node), r.Status,
				float64(r.Latency.Microseconds())/1000, r.Attempts, cli.Truncate(cli.OneLine(branchText(r)), cli.LastErrorWidth))
		}
		for _, m := range g.Missing {
			fmt.Fprintf(tw, "%s\t-\tMISSING\t-\t-\t%s\n", m.Name, cli.Truncate(cli.OneLine(m.Reason+": "+m.Message), cli.LastErrorWidth))
		}
		_ = tw.Flush()
		fmt.Fprintf(stderr, "expected=%d answered=%d succeeded=%d complete=%t request_id=%s\n",
			g.Expected, g.Answered, g.Succeeded, g.Complete, cli.OrDash(g.RequestID))
	}
	if err != nil {
		printWireError(stderr, cli.ErrorObject(err))
		return cli.ExitFail
	}
	return cli.ExitOK
}

// branchText is a branch's result as JSON, or its error.
func branchText(r agentkit.BranchResult) string {
	if r.Err != nil {
		e := streams.AsError(r.Err)
		return string(e.Code) + ": " + e.Message
	}
	var v any
	if err := r.Decode(&v); err != nil {
		return "(unreadable result: " + err.Error() + ")"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// gatheredJSON is the aggregate as --json prints it.
func gatheredJSON(g *agentkit.Gathered) map[string]any {
	replies := make([]map[string]any, 0, len(g.Replies))
	for _, r := range g.Replies {
		entry := map[string]any{"name": r.Name, "node": r.Node, "status": r.Status, "attempts": r.Attempts,
			"latency_ms": float64(r.Latency.Microseconds()) / 1000}
		if r.Err != nil {
			entry["error"] = streams.AsError(r.Err)
		} else {
			var v any
			if r.Decode(&v) == nil {
				entry["result"] = v
			}
		}
		replies = append(replies, entry)
	}
	return map[string]any{"expected": g.Expected, "answered": g.Answered, "succeeded": g.Succeeded, "complete": g.Complete,
		"request_id": g.RequestID, "replies": replies, "missing": g.Missing}
}
