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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

const workflowAbout = `
Manages the workflow definitions in REACH_POLICY (key workflow.<name>): a
workflow is called like a capability, reach.task.<name> or
reach.submit.<name>, and runs its steps on the dispatchers — calls and
parallel groups, conditions, fallbacks, compensation (docs/workflows.md).
A workflow shadows a capability of the same name; put warns when one has
instances or a declaration. Every dispatcher takes a new version within a
second; a run keeps the version it started with. A FILE is YAML or JSON
("-" reads stdin).

Sub-commands:
  put FILE        validate FILE and store it under its name; an invalid
                  definition is refused with the step and field named, and
                  nothing is written
  validate FILE   check FILE without connecting to NATS
  ls              one row per workflow, invalid stored values marked
                  (--json: an array)
  show NAME       the definition of NAME in YAML (--json: in JSON)
  rm NAME         delete the definition of NAME (runs under way finish)

Example:
  agentreach workflow validate claim-review.yaml
  agentreach workflow put claim-review.yaml
  agentreach call claim.review '{"claim": {"id": 7, "amount": 12000}}'`

// workflowEntryJSON is one row of `workflow ls --json`.
type workflowEntryJSON struct {
	Workflow   string           `json:"workflow"`
	Revision   uint64           `json:"revision"`
	Updated    time.Time        `json:"updated"`
	Definition *spec.Definition `json:"definition,omitempty"`
	// Error says why the stored value is invalid: dispatchers ignore it
	// and keep the last good one.
	Error string `json:"error,omitempty"`
}

func RunWorkflow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn   cli.ConnFlags
		asJSON bool
	)
	cl := cli.NewCmdline("workflow", "agentreach workflow [flags] put FILE | validate FILE | ls | show NAME | rm NAME", workflowAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		cl.JSONFlag(fs, &asJSON, `print JSON: put {"workflow", "revision", "shadows"}, validate {"valid", "workflow"},`+"\n"+
			`ls an array, show the definition, rm {"removed"}; a failure as {"error": …}`)
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and on each read or write")
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	sub, argName, arg, code, ok := cl.Subcommand(stderr, pos, []cli.SubCommand{{Name: "put", Arg: "FILE"}, {Name: "validate", Arg: "FILE"}, {Name: "ls", Arg: ""}, {Name: "show", Arg: "NAME"}, {Name: "rm", Arg: "NAME"}})
	switch {
	case !ok:
		return code
	case argName == "NAME" && streams.ValidateCapability(arg) != nil:
		return cl.UsageError(stderr, "%s: %q is not a workflow name: want dotted lowercase tokens such as claim.review", sub, arg)
	}

	var def *spec.Definition
	var data []byte
	if argName == "FILE" {
		var from string
		var err error
		if data, from, err = ReadDocument(arg, policy.MaxSize); err != nil {
			return cl.UsageError(stderr, "%v", err)
		}
		if def, err = spec.Parse(data); err != nil {
			return cl.Fail(stderr, InvalidDocument(from, err))
		}
		if sub == "validate" {
			if asJSON {
				cli.WriteJSONLine(stdout, map[string]any{"valid": true, "workflow": def.Name})
			} else {
				fmt.Fprintf(stdout, "%s: a valid workflow %s (%s)\n", from, def.Name, cli.Count(len(def.Steps), "step", "steps"))
			}
			return cli.ExitOK
		}
	}

	conn.Log = conn.Logger(stderr)
	nc, kv, err := openBucket(ctx, &conn, "agentreach-workflow", streams.BucketPolicy)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer nc.Close()
	ctx, cancel := conn.Bounded(ctx)
	defer cancel()
	switch sub {
	case "put":
		js, err := jetstream.New(nc)
		if err != nil {
			return cl.Fail(stderr, err)
		}
		shadows := shadowedBy(ctx, js, def.Name)
		rev, err := registry.PutPolicy(ctx, kv, spec.PolicyPrefix+def.Name, data)
		if err != nil {
			return cl.Fail(stderr, err)
		}
		if len(shadows) > 0 {
			fmt.Fprintf(stderr, "warning: workflow %s shadows the capability %s of %s: its tasks now run the workflow\n",
				def.Name, def.Name, strings.Join(shadows, ", "))
		}
		if asJSON {
			cli.WriteJSONLine(stdout, map[string]any{"workflow": def.Name, "revision": rev, "shadows": shadows})
		} else {
			fmt.Fprintf(stdout, "put workflow %s (revision %d)\n", def.Name, rev)
		}
	case "ls":
		list, err := registry.ListPolicy(ctx, kv)
		if err != nil {
			return cl.Fail(stderr, err)
		}
		list = slices.DeleteFunc(list, func(e registry.PolicyEntry) bool { return !strings.HasPrefix(e.Key, spec.PolicyPrefix) })
		if asJSON {
			err = printWorkflowsJSON(stdout, list)
		} else {
			err = printWorkflowsTable(stdout, list, time.Now())
		}
		if err != nil {
			return cl.Fail(stderr, err)
		}
	case "show":
		e, err := registry.GetPolicy(ctx, kv, spec.PolicyPrefix+arg)
		switch {
		case errors.Is(err, registry.ErrNoPolicy):
			return cl.Fail(stderr, cli.WithCode(cli.CodeNotFound, fmt.Errorf("%s holds no workflow %q", streams.BucketPolicy, arg)))
		case err != nil:
			return cl.Fail(stderr, err)
		case e.Err != nil:
			return cl.Fail(stderr, storedInvalid(streams.BucketPolicy, e.Key, e.Revision, e.Err))
		}
		if err := printDocument(stdout, e.Value.Decoded, asJSON); err != nil {
			return cl.Fail(stderr, err)
		}
	case "rm":
		key := spec.PolicyPrefix + arg
		if _, err := registry.GetPolicy(ctx, kv, key); errors.Is(err, registry.ErrNoPolicy) {
			return cl.Fail(stderr, cli.WithCode(cli.CodeNotFound, fmt.Errorf("%s holds no workflow %q", streams.BucketPolicy, arg)))
		}
		if err := kv.Delete(ctx, key); err != nil {
			return cl.Fail(stderr, err)
		}
		if asJSON {
			cli.WriteJSONLine(stdout, map[string]string{"removed": arg})
		} else {
			fmt.Fprintf(stdout, "removed workflow %s\n", arg)
		}
	}
	return cli.ExitOK
}

// shadowedBy names what serves capability name, which a workflow of that
// name shadows: live instances offering it and agent types declaring it.
// A lookup that fails names nothing (the warning is advice).
func shadowedBy(ctx context.Context, js jetstream.JetStream, name string) []string {
	var out []string
	if reg, err := registry.Open(ctx, js); err == nil {
		entries, _ := reg.List(ctx)
		for _, e := range entries {
			if slices.Contains(e.Capabilities, name) {
				out = append(out, "instance "+e.ID)
			}
		}
	}
	if kv, err := js.KeyValue(ctx, streams.BucketCaps); err == nil {
		decls, _ := registry.ListDeclarations(ctx, kv)
		for _, d := range decls {
			if d.Declaration == nil {
				continue
			}
			for _, c := range d.Declaration.Capabilities {
				if c.Name == name {
					out = append(out, "agent type "+d.Type)
				}
			}
		}
	}
	return out
}

func printWorkflowsJSON(w io.Writer, list []registry.PolicyEntry) error {
	out := make([]workflowEntryJSON, len(list))
	for i, e := range list {
		out[i] = workflowEntryJSON{Workflow: strings.TrimPrefix(e.Key, spec.PolicyPrefix), Revision: e.Revision, Updated: e.Updated}
		if def, ok := e.Value.Decoded.(*spec.Definition); ok {
			out[i].Definition = def
		}
		if e.Err != nil {
			out[i].Error = e.Err.Error()
		}
	}
	return cli.WriteJSON(w, out)
}

func printWorkflowsTable(w io.Writer, list []registry.PolicyEntry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW\tREVISION\tAGE\tSTEPS\tSTATUS")
	for _, e := range list {
		steps, status := "-", "ok"
		if def, ok := e.Value.Decoded.(*spec.Definition); ok {
			names := make([]string, len(def.Steps))
			for i, st := range def.Steps {
				names[i] = st.Name
			}
			steps = strings.Join(names, ",")
		}
		if e.Err != nil {
			status = invalidStatus(e.Err)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", strings.TrimPrefix(e.Key, spec.PolicyPrefix), e.Revision,
			cli.HeartbeatAge(now.Sub(e.Updated)), steps, status)
	}
	return tw.Flush()
}
