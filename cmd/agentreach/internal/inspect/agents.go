package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

const agentsAbout = `
Lists the live agent instances registered in the REACH_AGENTS bucket: id, type,
capabilities, busy slots, status and the age of the last heartbeat (by the
server's clock when it was stored, compared with this machine's clock now).
With --json it prints the records as a JSON array, each with "updated" (the
server's timestamp of the last heartbeat) and "revision".`

// AgentJSON is one entry of `agents --json`: the record's fields plus the
// bucket's metadata.
type AgentJSON struct {
	registry.Record
	Updated  time.Time `json:"updated"`
	Revision uint64    `json:"revision"`
}

func RunAgents(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn   cli.ConnFlags
		asJSON bool
	)
	cl := cli.NewCmdline("agents", "agentreach agents [flags]", agentsAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		cl.JSONFlag(fs, &asJSON, `print the records as a JSON array; a failure as {"error": …}`)
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and reading the registry")
		conn.RegisterJSDomain(fs)
	})
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	conn.Log = conn.Logger(stderr)
	entries, err := listAgents(ctx, &conn)
	if err != nil && !errors.Is(err, registry.ErrInvalidRecord) {
		return cl.Fail(stderr, conn.NotProvisioned(err, "bucket "+streams.BucketAgents))
	}
	if err != nil { // some records did not decode: list the others
		fmt.Fprintf(stderr, "warning: skipped records: %v\n", err)
	}
	if asJSON {
		err = printAgentsJSON(stdout, entries)
	} else {
		err = printAgentsTable(stdout, entries, time.Now())
	}
	if err != nil {
		return cl.Fail(stderr, err)
	}
	return cli.ExitOK
}

// listAgents reads every live record. Records that do not decode are
// reported in an error wrapping registry.ErrInvalidRecord beside the others.
func listAgents(ctx context.Context, conn *cli.ConnFlags) ([]registry.Entry, error) {
	nc, err := conn.Connect("agentreach-agents")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ctx, cancel := conn.Bounded(ctx)
	defer cancel()
	js, err := conn.JetStream(nc)
	if err != nil {
		return nil, err
	}
	return readAgents(ctx, js)
}

// readAgents reads every live record of the registry on js, as listAgents:
// by a direct get first, which needs no JetStream leader (registry.ListDirect),
// then through the bucket.
func readAgents(ctx context.Context, js jetstream.JetStream) ([]registry.Entry, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	entries, err := registry.ListDirect(dctx, js)
	cancel()
	if err == nil || errors.Is(err, registry.ErrInvalidRecord) {
		return entries, err
	}
	reg, err := registry.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	return reg.List(ctx)
}

func printAgentsJSON(w io.Writer, entries []registry.Entry) error {
	out := make([]AgentJSON, len(entries))
	for i, e := range entries {
		out[i] = AgentJSON{Record: e.Record, Updated: e.Updated, Revision: e.Revision}
	}
	return cli.WriteJSON(w, out)
}

func printAgentsTable(w io.Writer, entries []registry.Entry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tCAPABILITIES\tACTIVE/MAX\tSTATUS\tHEARTBEAT AGE")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", e.ID, e.Type, strings.Join(e.Capabilities, ","),
			e.Active, e.MaxConcurrent, e.Status, cli.HeartbeatAge(now.Sub(e.Updated)))
	}
	return tw.Flush()
}
