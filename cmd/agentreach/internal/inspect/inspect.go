package inspect

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/dispatcher"
)

const breakersAbout = `
Asks every running dispatcher replica (on <prefix>.api.breakers) for the circuit
breakers of the instances it routes to, and prints one row per replica and
instance: state (CLOSED, OPEN, HALF_OPEN), consecutive failures, failures and
outcomes in the last window, the share of traffic admitted while ramping up
after a close, the failure penalty and the latency average. Replicas share
OPEN and CLOSED transitions through the REACH_BREAKERS bucket.

LATENCY (MOVING AVG) is the replica's moving geometric average of the
instance's task latency, the figure least-load routing compares: each new task
weighs 0.05 (the first five count equally), so one stray spike moves it little.
While the instance gets no task from the replica the average fades, by a factor
of e every 5 s, so an instance once found slow is tried again. It reads - (with
--json latency_ms 0) until the instance has 5 samples.

When no dispatcher answers within --gather it fails with "no dispatcher
answered on <subject> within <gather>" and exit status 1.`

// gather sends an empty request on subject and collects every reply that
// arrives within wait: one per dispatcher replica. No reply at all is a
// NO_DISPATCHER error.
func gather(ctx context.Context, nc *nats.Conn, subject string, wait time.Duration) ([][]byte, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out [][]byte
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err == nil && len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			err = nats.ErrNoResponders // the server says no one listens
		}
		if err != nil { // the wait is over
			if len(out) == 0 {
				return nil, cli.WithCode(cli.CodeNoDispatcher, fmt.Errorf("no dispatcher answered on %s within %v "+
					"(is one running against this server, with this --prefix? a slow one may need a longer --gather)", subject, wait))
			}
			return out, nil
		}
		out = append(out, m.Data)
	}
}

// inspect runs a gathering command: flags, connection, gather, print.
func inspect(ctx context.Context, name, about, verb string, args []string, stdout, stderr io.Writer,
	print func(w io.Writer, replies [][]byte, asJSON bool) error) int {
	var (
		conn   cli.ConnFlags
		asJSON bool
		wait   time.Duration
	)
	cl := cli.NewCmdline(name, "agentreach "+name+" [flags]", about)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		cl.JSONFlag(fs, &asJSON, `print the replies as a JSON array; a failure as {"error": …}`)
		fs.DurationVar(&wait, "gather", 500*time.Millisecond, "how long to collect replies from the replicas")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting")
	})
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	if wait <= 0 {
		return cl.UsageError(stderr, "--gather must be positive, got %v", wait)
	}
	conn.Log = conn.Logger(stderr)
	nc, err := conn.Connect("agentreach-" + name)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer nc.Close()
	replies, err := gather(ctx, nc, conn.Subjects().API(verb), wait)
	if err == nil {
		err = print(stdout, replies, asJSON)
	}
	if err != nil {
		return cl.Fail(stderr, err)
	}
	return cli.ExitOK
}

func RunBreakers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return inspect(ctx, "breakers", breakersAbout, dispatcher.APIBreakers, args, stdout, stderr, printBreakers)
}

func printBreakers(w io.Writer, replies [][]byte, asJSON bool) error {
	all := []dispatcher.BreakersReply{} // --json: an array, never null
	for _, r := range replies {
		var br dispatcher.BreakersReply
		if err := json.Unmarshal(r, &br); err != nil {
			return fmt.Errorf("unreadable reply: %w", err)
		}
		all = append(all, br)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Dispatcher < all[j].Dispatcher })
	if asJSON {
		return cli.WriteJSON(w, all)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DISPATCHER\tINSTANCE\tSTATE\tCONSECUTIVE\tFAILED/TOTAL (1m)\tSHARE\tPENALTY\tLATENCY (MOVING AVG)")
	for _, br := range all {
		for _, b := range br.Breakers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d/%d\t%.0f%%\t%.2f\t%s\n", br.Dispatcher, b.Instance, b.State,
				b.ConsecutiveFailures, b.WindowFailures, b.WindowTotal, 100*b.Share, b.Penalty, msText(b.LatencyMS))
		}
	}
	return tw.Flush()
}
