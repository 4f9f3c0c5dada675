package document

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

const policyAbout = `
Manages the routing policy in REACH_POLICY, which every dispatcher follows
within a second, without a restart. Keys:
  defaults              what every capability starts from
  capability.<cap>      one capability: strategy, retries, write, idempotent,
                        ack_timeout, min_call_timeout, max_call_timeout,
                        deadline, queue_wait, max_in_flight, breaker, require,
                        hedge, quorum
  acl                   who may call what (docs/security.md)
  taxonomy              the official first-level capability types, which
                        'caps put' and the dashboard warn against
  workflow.<name>       a workflow definition ('agentreach workflow' writes it)
A value is YAML or JSON; durations are strings such as "500ms" or "3s". The
dispatcher's flags apply under the policy. docs/declarations.md lists every
field with its default.

Sub-commands:
  get KEY            the value in YAML (--json: in JSON)
  set KEY FILE|-     validate FILE (or stdin) and store it; an invalid value is
                     refused with the field named, and nothing is written
  edit KEY           open $EDITOR (default vi) on the value in YAML; an invalid
                     result is not stored: re-open the editor or give up
  validate KEY FILE  check FILE as the value of KEY without connecting to NATS
  ls                 one row per key, invalid stored values marked (--json: an
                     array)

Example:
  agentreach policy set capability.orders.query orders-policy.yaml
  agentreach policy get capability.orders.query
  agentreach policy edit defaults`

// PolicyEntryJSON is one row of `policy ls --json`.
type PolicyEntryJSON struct {
	Key      string          `json:"key"`
	Revision uint64          `json:"revision"`
	Updated  time.Time       `json:"updated"`
	Value    json.RawMessage `json:"value,omitempty"`
	// Error says why the stored value is invalid: dispatchers ignore it
	// and keep the last good one.
	Error string `json:"error,omitempty"`
}

// policyCmd runs the sub-commands of policy that talk to NATS.
type policyCmd struct {
	cl     *cli.Cmdline
	kv     jetstream.KeyValue
	conn   *cli.ConnFlags // bounds each read or write (bounded)
	asJSON bool
	stdout io.Writer
	stderr io.Writer
}

func RunPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn   cli.ConnFlags
		asJSON bool
	)
	cl := cli.NewCmdline("policy", "agentreach policy [flags] get KEY | set KEY FILE|- | edit KEY | validate KEY FILE | ls", policyAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		cl.JSONFlag(fs, &asJSON, `print JSON: get the value, set and edit {"key", "revision", "changed"},`+"\n"+
			`validate {"valid", "key"}, ls an array; a failure as {"error": …}`)
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and on each read or write")
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cl.UsageError(stderr, "want a sub-command: get, set, edit, validate or ls")
	}
	sub, rest := pos[0], pos[1:]
	want := map[string]int{"get": 1, "set": 2, "edit": 1, "validate": 2, "ls": 0}
	n, known := want[sub]
	switch {
	case !known:
		return cl.UsageError(stderr, "unknown sub-command %q (want get, set, edit, validate or ls)", sub)
	case len(rest) != n:
		return cl.UsageError(stderr, "%s: want %s, got %d arguments", sub, map[int]string{0: "no arguments", 1: "KEY", 2: "KEY and FILE"}[n], len(rest))
	}
	var key string
	if n > 0 {
		key = rest[0]
		if err := policy.ValidateKey(key); err != nil {
			return cl.UsageError(stderr, "%s: %v", sub, err)
		}
	}
	var data []byte
	var name string
	if n == 2 {
		var err error
		if data, name, err = ReadDocument(rest[1], policy.MaxSize); err != nil {
			return cl.UsageError(stderr, "%v", err)
		}
		if _, err := policy.Parse(key, data); err != nil {
			return cl.Fail(stderr, InvalidDocument(name, err))
		}
	}
	if sub == "validate" {
		if asJSON {
			cli.WriteJSONLine(stdout, map[string]any{"valid": true, "key": key})
		} else {
			fmt.Fprintf(stdout, "%s: a valid value for %s\n", name, key)
		}
		return cli.ExitOK
	}

	conn.Log = conn.Logger(stderr)
	nc, kv, err := openBucket(ctx, &conn, "agentreach-policy", streams.BucketPolicy)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer nc.Close()
	p := &policyCmd{cl: cl, kv: kv, conn: &conn, asJSON: asJSON, stdout: stdout, stderr: stderr}
	switch sub {
	case "get":
		err = p.get(ctx, key)
	case "set":
		err = p.set(ctx, key, data)
	case "edit":
		err = p.edit(ctx, key)
	case "ls":
		err = p.list(ctx)
	}
	if err != nil {
		return cl.Fail(stderr, err)
	}
	return cli.ExitOK
}

// Bounded returns ctx bounded by --timeout.
func (p *policyCmd) Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return p.conn.Bounded(ctx)
}

// read returns the entry under key; an absent key is a NOT_FOUND error.
func (p *policyCmd) read(ctx context.Context, key string) (registry.PolicyEntry, error) {
	ctx, cancel := p.Bounded(ctx)
	defer cancel()
	e, err := registry.GetPolicy(ctx, p.kv, key)
	if errors.Is(err, registry.ErrNoPolicy) {
		return e, cli.WithCode(cli.CodeNotFound, fmt.Errorf("%s holds nothing under %q", streams.BucketPolicy, key))
	}
	return e, err
}

func (p *policyCmd) get(ctx context.Context, key string) error {
	e, err := p.read(ctx, key)
	if err != nil {
		return err
	}
	if e.Err != nil {
		return storedInvalid(streams.BucketPolicy, key, e.Revision, fmt.Errorf("%w (fix it with 'agentreach policy edit %s')", e.Err, key))
	}
	if p.asJSON {
		return cli.WriteJSON(p.stdout, e.Value.JSON)
	}
	y, err := JSONToYAML(e.Value.JSON)
	if err != nil {
		return err
	}
	_, err = p.stdout.Write(y)
	return err
}

func (p *policyCmd) set(ctx context.Context, key string, data []byte) error {
	ctx, cancel := p.Bounded(ctx)
	defer cancel()
	rev, err := registry.PutPolicy(ctx, p.kv, key, data)
	if err != nil {
		return err
	}
	p.stored(key, rev, true)
	return nil
}

// stored reports a write, or that nothing changed.
func (p *policyCmd) stored(key string, rev uint64, changed bool) {
	switch {
	case p.asJSON:
		cli.WriteJSONLine(p.stdout, map[string]any{"key": key, "revision": rev, "changed": changed})
	case changed:
		fmt.Fprintf(p.stdout, "set %s (revision %d)\n", key, rev)
	default:
		fmt.Fprintf(p.stdout, "no change to %s (revision %d)\n", key, rev)
	}
}

func (p *policyCmd) list(ctx context.Context) error {
	ctx, cancel := p.Bounded(ctx)
	defer cancel()
	list, err := registry.ListPolicy(ctx, p.kv)
	if err != nil {
		return err
	}
	if p.asJSON {
		out := make([]PolicyEntryJSON, len(list))
		for i, e := range list {
			out[i] = PolicyEntryJSON{Key: e.Key, Revision: e.Revision, Updated: e.Updated, Value: e.Value.JSON}
			if e.Err != nil {
				out[i].Error = e.Err.Error()
			}
		}
		return cli.WriteJSON(p.stdout, out)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(p.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tREVISION\tAGE\tVALUE")
	for _, e := range list {
		value := cli.Truncate(string(e.Value.JSON), cli.LastErrorWidth)
		if e.Err != nil {
			value = invalidStatus(e.Err)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", e.Key, e.Revision, cli.HeartbeatAge(now.Sub(e.Updated)), value)
	}
	return tw.Flush()
}

// errorMark starts the lines edit puts above a value that did not validate.
const errorMark = "# error: "

// edit opens the editor on key's value in YAML until the result validates
// or the person gives up, and stores it unless someone else changed the key
// in between.
func (p *policyCmd) edit(ctx context.Context, key string) error {
	var (
		rev  uint64
		text []byte
	)
	rctx, cancel := p.Bounded(ctx)
	e, err := registry.GetPolicy(rctx, p.kv, key)
	cancel()
	switch {
	case errors.Is(err, registry.ErrNoPolicy):
		text = []byte("{}\n")
	case err != nil:
		return err
	default:
		rev = e.Revision
		if text, err = JSONToYAML(e.Raw); err != nil { // an invalid value put by hand may not even be JSON
			text = e.Raw
		}
	}
	header := fmt.Sprintf("# %s %s (revision %d). Save and quit to store it; an invalid value is not stored.\n%s",
		streams.BucketPolicy, key, rev, policyFields(key))
	original := append([]byte(header), text...)

	f, err := os.CreateTemp("", "agentreach-policy-*.yaml")
	if err != nil {
		return err
	}
	path := f.Name()
	f.Close()
	keep := false
	defer func() {
		if !keep {
			os.Remove(path)
		}
	}()
	current := original
	for {
		edited, err := runEditor(ctx, path, current)
		if err != nil {
			return err
		}
		if bytes.Equal(edited, original) {
			p.stored(key, rev, false)
			return nil
		}
		_, perr := policy.Parse(key, edited)
		if perr == nil {
			wctx, cancel := p.Bounded(ctx)
			newRev, err := registry.UpdatePolicy(wctx, p.kv, key, edited, rev)
			cancel()
			if IsConflict(err) {
				keep = true
				return fmt.Errorf("%s changed while the editor was open, so nothing was stored; your text is in %s (run 'agentreach policy edit %s' again)",
					key, path, key)
			}
			if err != nil {
				return err
			}
			p.stored(key, newRev, true)
			return nil
		}
		fmt.Fprintf(p.stderr, "error: %v\n", perr)
		in, terminal := cli.ConfirmInput()
		if !terminal || !ask(p.stderr, in, "Edit again? [Y/n] ", true) {
			return fmt.Errorf("nothing stored: the edited value is invalid: %w", perr)
		}
		current = append([]byte(errorMark+cli.OneLine(perr.Error())+"\n"), dropErrorLines(edited)...)
	}
}

// policyFields is the comment edit puts above a capability policy.
func policyFields(key string) string {
	if key != policy.KeyDefaults && !strings.HasPrefix(key, policy.KeyCapabilityPrefix) {
		return ""
	}
	return "# Fields, all optional: strategy, retries, write, idempotent, ack_timeout, min_call_timeout,\n" +
		"# max_call_timeout, deadline, queue_wait, max_in_flight, breaker, require (docs/declarations.md).\n"
}

// dropErrorLines removes the error lines edit put at the top of text.
func dropErrorLines(text []byte) []byte {
	for bytes.HasPrefix(text, []byte(errorMark)) {
		_, text, _ = bytes.Cut(text, []byte("\n"))
	}
	return text
}

// runEditor writes text to path, runs $EDITOR (default vi) on it on the
// terminal, and returns what it holds afterwards.
func runEditor(ctx context.Context, path string, text []byte) ([]byte, error) {
	if err := os.WriteFile(path, text, 0o600); err != nil {
		return nil, err
	}
	editor := strings.Fields(os.Getenv("EDITOR"))
	if len(editor) == 0 {
		editor = []string{"vi"}
	}
	cmd := exec.CommandContext(ctx, editor[0], append(editor[1:], path)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("editor %s: %w; nothing stored", strings.Join(editor, " "), err)
	}
	return os.ReadFile(path)
}

// IsConflict reports whether a conditional write failed because the key
// moved on: created meanwhile (Create) or at another revision (Update).
func IsConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// ask prints question on w and reads a yes or no from in; an empty answer
// is def.
func ask(w io.Writer, in io.Reader, question string, def bool) bool {
	fmt.Fprint(w, question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "":
		return def
	case "y", "yes":
		return true
	}
	return false
}
