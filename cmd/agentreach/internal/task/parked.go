package task

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"io"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/streams"
)

const dlqAbout = `
Inspects and handles the dead letters in REACH_DLQ: durable tasks that failed
past their attempts (reason "failed") or can never succeed (reason "poison",
e.g. BAD_REQUEST). Each is held with its original headers and payload, the
reason, the error code, the attempts, the last error and how often it was
dead-lettered before. Dispatchers replay them on their own every hour while a
healthy capable instance exists.

Sub-commands:
  ls                 one row per dead letter, oldest first (--json: an array)
  show <seq>         every field, the headers and the payload (indented JSON)
  replay <seq>       resubmit to the durable tier with the same request id,
  replay --all       and remove the entry; prints how many were resubmitted
  purge [<seq>]      delete one dead letter, or all of them; asks for
                     confirmation on the terminal unless --yes

Example:
  agentreach dlq ls
  agentreach dlq replay --all
  agentreach dlq purge --yes 42`

const reviewAbout = `
Inspects and handles the review queue REACH_REVIEW: durable tasks held for a
person to decide, with their original headers and payload, the error code,
the attempts and the last error. Two reasons put a task there:

  deadline   its overall deadline passed before it finished
  in_doubt   an idempotent execution's outcome is unknown: the instance that
             claimed its idempotency key died before storing an outcome, so
             the side effect may or may not have happened

Sub-commands:
  ls                 one row per entry, oldest first (--json: an array)
  show <seq>         every field, the headers and the payload (indented JSON)
  replay <seq>       resubmit to the durable tier with the same request id
  replay --all       (--new-deadline gives it a new deadline) and remove the entry
  resolve --rerun <seq>
                     run the task again: delete its claim in REACH_IDEMPOTENCY
                     (so it executes, not replays), then resubmit it like replay
                     (--new-deadline applies) and remove the entry
  resolve --drop <seq>
                     remove the entry: the task runs no more

Each resolve is recorded in REACH_EVENTS (on <prefix>.event.<capability>,
outcome review_rerun or review_drop, with --by: who decided). The record is
written first; if the resolution then fails, run the same command again: a
second record within two minutes is dropped as a duplicate.

Example:
  agentreach review ls
  agentreach review replay --new-deadline 1h 7
  agentreach review resolve --rerun 7
  agentreach review resolve --drop --by alice 8`

// parkedKind describes one queue of parked tasks: the dead letters or the
// review queue.
type parkedKind struct {
	name     string // the command
	stream   string
	noun     string // one entry, e.g. "dead letter"
	nouns    string // several entries
	synopsis string
	about    string
	remove   string // the sub-command that deletes: "purge" (one or all, confirmed) or "resolve" (one)
	handles  string // what to do with entry %d, as a sentence part
}

var (
	dlqKind = parkedKind{name: "dlq", stream: streams.StreamDLQ, noun: "dead letter", nouns: "dead letters",
		synopsis: "agentreach dlq [flags] ls | show <seq> | replay (<seq>|--all) | purge [<seq>]",
		about:    dlqAbout, remove: "purge", handles: "'agentreach dlq replay %d' runs it again"}
	reviewKind = parkedKind{name: "review", stream: streams.StreamReview, noun: "review entry", nouns: "review entries",
		synopsis: "agentreach review [flags] ls | show <seq> | replay (<seq>|--all) | resolve (--rerun|--drop) <seq>",
		about:    reviewAbout, remove: "resolve", handles: "'agentreach review resolve --rerun %d' (or --drop) decides"}
)

// handle says what to do with entry seq.
func (k parkedKind) handle(seq uint64) string { return fmt.Sprintf(k.handles, seq) }

func (k parkedKind) count(n int) string {
	if n == 1 {
		return "1 " + k.noun
	}
	return strconv.Itoa(n) + " " + k.nouns
}

func RunDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runParked(ctx, dlqKind, args, stdout, stderr)
}

func RunReview(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runParked(ctx, reviewKind, args, stdout, stderr)
}

// parkedCmd runs the sub-commands of dlq and review.
type parkedCmd struct {
	kind     parkedKind
	js       jetstream.JetStream
	subjects streams.Subjects
	conn     *cli.ConnFlags // the connection flags: bounds and messages
	asJSON   bool
	stdout   io.Writer
	stderr   io.Writer
}

// resolution is how `review resolve` handles an entry.
type resolution struct {
	rerun, drop bool
	by          string
}

func runParked(ctx context.Context, k parkedKind, args []string, stdout, stderr io.Writer) int {
	var (
		conn     cli.ConnFlags
		asJSON   bool
		all      bool
		yes      bool
		deadline time.Duration
		res      resolution
	)
	cl := cli.NewCmdline(k.name, k.synopsis, k.about)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		cl.JSONFlag(fs, &asJSON, `print JSON: ls an array, show an object, the others {"<what was done>": n}; a failure {"error": …}`)
		fs.BoolVar(&all, "all", false, "replay every "+k.noun+" instead of one <seq>")
		fs.DurationVar(&deadline, "new-deadline", 0,
			"replay (and resolve --rerun): give the resubmitted task a new overall deadline (Reach-Deadline) this far from now;\n0 means the dispatchers' default for durable tasks, counted from the resubmission")
		if k.remove == "purge" {
			fs.BoolVar(&yes, "yes", false, "purge without asking for confirmation (needed when stdin is not a terminal)")
		}
		if k.remove == "resolve" {
			fs.BoolVar(&res.rerun, "rerun", false, "resolve: run the task again, even if an earlier execution went through")
			fs.BoolVar(&res.drop, "drop", false, "resolve: remove the entry; the task runs no more")
			fs.StringVar(&res.by, "by", currentUser(), "resolve: who decided, as recorded in REACH_EVENTS (`name`)")
		}
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and on each read or change")
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	subs := "ls, show, replay or " + k.remove
	if len(pos) == 0 {
		return cl.UsageError(stderr, "want a sub-command: %s", subs)
	}
	sub, rest := pos[0], pos[1:]
	var (
		seq    uint64
		hasSeq bool
	)
	switch sub {
	case "ls":
		if len(rest) > 0 {
			return cl.UsageError(stderr, "ls: unexpected argument %q", rest[0])
		}
	case "show", "replay", k.remove:
		if len(rest) > 1 {
			return cl.UsageError(stderr, "%s: want at most one <seq>, got %d arguments", sub, len(rest))
		}
		if len(rest) == 1 {
			n, err := strconv.ParseUint(rest[0], 10, 64)
			if err != nil || n == 0 {
				return cl.UsageError(stderr, "%s: <seq> must be a positive stream sequence number, got %q", sub, rest[0])
			}
			seq, hasSeq = n, true
		}
		switch {
		case hasSeq && all:
			return cl.UsageError(stderr, "%s: give one <seq> or --all, not both", sub)
		case sub == "replay" && !hasSeq && !all:
			return cl.UsageError(stderr, "replay: want a <seq> or --all")
		case sub != "replay" && sub != "purge" && !hasSeq:
			return cl.UsageError(stderr, "%s: want a <seq> (the SEQ column of '%s ls')", sub, k.name)
		}
	default:
		return cl.UsageError(stderr, "unknown sub-command %q (want %s)", sub, subs)
	}
	if deadline < 0 {
		return cl.UsageError(stderr, "--new-deadline must not be negative, got %v", deadline)
	}
	switch {
	case sub != "resolve" && (res.rerun || res.drop):
		return cl.UsageError(stderr, "--rerun and --drop go with resolve, not %s", sub)
	case sub == "resolve" && res.rerun && res.drop:
		return cl.UsageError(stderr, "resolve: give --rerun or --drop, not both")
	case sub == "resolve" && !res.rerun && !res.drop:
		return cl.UsageError(stderr, "resolve: want --rerun (run the task again) or --drop (it runs no more)")
	case sub == "resolve" && strings.TrimSpace(res.by) == "":
		return cl.UsageError(stderr, "resolve: --by is empty: say who decides")
	}
	var in io.Reader
	if sub == "purge" && !yes {
		var term bool
		if in, term = cli.ConfirmInput(); !term {
			return cl.UsageError(stderr, "stdin is not a terminal, so purge cannot ask for confirmation: pass --yes to purge")
		}
	}

	conn.Log = conn.Logger(stderr)
	nc, err := conn.Connect("agentreach-" + k.name)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	p := &parkedCmd{kind: k, js: js, subjects: conn.Subjects(), conn: &conn,
		asJSON: asJSON, stdout: stdout, stderr: stderr}
	switch sub {
	case "ls":
		err = p.list(ctx)
	case "show":
		err = p.show(ctx, seq)
	case "replay":
		var n int
		if n, err = p.replay(ctx, seq, deadline); err != nil && n > 0 {
			return cl.FailWith(stderr, p.explain(err), cli.FailureOutput{Resubmitted: &n})
		}
	case "resolve":
		err = p.resolve(ctx, seq, res, deadline)
	case "purge":
		if hasSeq {
			err = p.purgeOne(ctx, seq, in)
		} else {
			err = p.purgeAll(ctx, in)
		}
	}
	if err != nil {
		return cl.Fail(stderr, p.explain(err))
	}
	return cli.ExitOK
}

// explain names the stream of the command when err says it is missing.
func (p *parkedCmd) explain(err error) error {
	return p.conn.NotProvisioned(err, "stream "+p.kind.stream)
}

// currentUser returns the name of the user running the command, the
// default of --by.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return "unknown"
}

// Bounded returns ctx bounded by --timeout.
func (p *parkedCmd) Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return p.conn.Bounded(ctx)
}

func (p *parkedCmd) list(ctx context.Context) error {
	ctx, cancel := p.Bounded(ctx)
	defer cancel()
	list, err := durable.ListParked(ctx, p.js, p.subjects, p.kind.stream)
	if err != nil {
		return err
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Seq < list[j].Seq })
	if p.asJSON {
		out := make([]cli.ParkedJSON, len(list))
		for i, e := range list {
			out[i] = jsonOfParked(e)
		}
		return cli.WriteJSON(p.stdout, out)
	}
	return printParkedTable(p.stdout, list, time.Now())
}

// get returns one entry, with an error naming the queue when there is none.
func (p *parkedCmd) get(ctx context.Context, seq uint64) (durable.Parked, error) {
	ctx, cancel := p.Bounded(ctx)
	defer cancel()
	e, err := durable.GetParked(ctx, p.js, p.subjects, p.kind.stream, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return e, cli.WithCode(cli.CodeNotFound, fmt.Errorf("no %s with seq %d in %s", p.kind.noun, seq, p.kind.stream))
	}
	return e, err
}

func (p *parkedCmd) show(ctx context.Context, seq uint64) error {
	e, err := p.get(ctx, seq)
	if err != nil {
		return err
	}
	if p.asJSON {
		return cli.WriteJSON(p.stdout, jsonOfParked(e))
	}
	return printParked(p.stdout, e, time.Now())
}

// replay resubmits entry seq, or every entry when seq is 0, with
// dispatcher.Replay, and prints how many were resubmitted; when some were
// not, it prints nothing and returns how many were beside the error.
// deadline > 0 gives each resubmitted task a new Reach-Deadline that far
// from now.
func (p *parkedCmd) replay(ctx context.Context, seq uint64, deadline time.Duration) (int, error) {
	var list []durable.Parked
	if seq == 0 {
		lctx, cancel := p.Bounded(ctx)
		var err error
		list, err = durable.ListParked(lctx, p.js, p.subjects, p.kind.stream)
		cancel()
		if err != nil {
			return 0, err
		}
		sort.SliceStable(list, func(i, j int) bool { return list[i].Seq < list[j].Seq })
	} else {
		e, err := p.get(ctx, seq)
		if err != nil {
			return 0, err
		}
		list = append(list, e)
	}
	newDeadline := deadlineFrom(deadline)
	n := 0
	var errs []error
	opts, err := p.replayOptions()
	if err != nil {
		return 0, err
	}
	for _, e := range list {
		rctx, cancel := p.Bounded(ctx)
		err := durable.Replay(rctx, p.js, p.subjects, e, newDeadline, opts...)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s seq %d: %w", p.kind.stream, e.Seq, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%d of %s not resubmitted (%d were): %w", len(list)-n, p.kind.count(len(list)), n, errors.Join(errs...))
	}
	p.report("resubmitted", n)
	return n, nil
}

// replayOptions signs a resubmission as a replay by the identity of
// --creds when it is an Agent-Reach identity: a parked entry keeps no
// Reach-Signature, and dispatchers with auth on accept a replay as its
// caller only from a dispatcher identity (docs/security.md).
func (p *parkedCmd) replayOptions() ([]durable.ReplayOption, error) {
	if !p.conn.Signs() {
		return nil, nil
	}
	s, err := auth.LoadSigner(p.conn.Creds)
	if err != nil {
		return nil, fmt.Errorf("--creds: %w", err)
	}
	return []durable.ReplayOption{durable.ReplaySign(func(m *nats.Msg) error {
		s.SignReplay(m, time.Now())
		return nil
	})}, nil
}

// deadlineFrom returns the time d from now, or zero for 0.
func deadlineFrom(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// resolve records a person's decision on review entry seq in REACH_EVENTS,
// then carries it out: --rerun deletes the task's idempotency claim and
// resubmits it, --drop deletes the entry. The record comes first and is
// deduplicated (within REACH_EVENTS' duplicate window, two minutes), so
// running the command again after a failure finishes the resolution
// without recording it twice.
func (p *parkedCmd) resolve(ctx context.Context, seq uint64, r resolution, deadline time.Duration) error {
	e, err := p.get(ctx, seq)
	if err != nil {
		return err
	}
	outcome := events.OutcomeReviewDrop
	if r.rerun {
		outcome = events.OutcomeReviewRerun
	}
	rctx, cancel := p.Bounded(ctx)
	defer cancel()
	if err := durable.RecordResolution(rctx, p.js, p.subjects, e, outcome, r.by); err != nil {
		return p.conn.NotProvisioned(err, "stream "+streams.StreamEvents)
	}
	if r.drop {
		if err := durable.DeleteParked(rctx, p.js, p.kind.stream, e.Seq); err != nil {
			return fmt.Errorf("recorded %s, but the entry was not deleted: %w", outcome, err)
		}
		p.report("dropped", 1)
		return nil
	}
	if key := e.Header.Get(streams.HeaderIdempotencyKey); key != "" {
		kv, err := p.js.KeyValue(rctx, streams.BucketIdempotency)
		if err == nil {
			// Deleting a key that is not there is no error.
			err = kv.Delete(rctx, streams.IdempotencyKey(e.Capability, e.Header.Get(streams.HeaderSource), key))
		}
		if err != nil {
			return fmt.Errorf("recorded %s, but the idempotency claim was not deleted, so nothing was resubmitted: %w", outcome,
				p.conn.NotProvisioned(err, "bucket "+streams.BucketIdempotency))
		}
	}
	opts, err := p.replayOptions()
	if err != nil {
		return err
	}
	if err := durable.Replay(rctx, p.js, p.subjects, e, deadlineFrom(deadline), opts...); err != nil {
		return fmt.Errorf("recorded %s, but the task was not resubmitted: %w", outcome,
			p.conn.NotProvisioned(err, "stream "+streams.StreamTasks))
	}
	p.report("resubmitted", 1)
	return nil
}

func (p *parkedCmd) purgeOne(ctx context.Context, seq uint64, in io.Reader) error {
	e, err := p.get(ctx, seq)
	if err != nil {
		return err
	}
	if in != nil && !p.confirm(in, 1) {
		return errors.New("nothing purged")
	}
	dctx, cancel := p.Bounded(ctx)
	defer cancel()
	if err := durable.DeleteParked(dctx, p.js, p.kind.stream, e.Seq); err != nil {
		return err
	}
	p.report("purged", 1)
	return nil
}

// purgeAll deletes every entry up to the last one counted for the
// confirmation; entries parked after that stay.
func (p *parkedCmd) purgeAll(ctx context.Context, in io.Reader) error {
	ictx, cancel := p.Bounded(ctx)
	defer cancel()
	s, err := p.js.Stream(ictx, p.kind.stream)
	if err != nil {
		return err
	}
	info, err := s.Info(ictx)
	if err != nil {
		return err
	}
	n := int(info.State.Msgs)
	if n == 0 {
		p.report("purged", 0)
		return nil
	}
	if in != nil && !p.confirm(in, n) {
		return errors.New("nothing purged")
	}
	pctx, cancel := p.Bounded(ctx)
	defer cancel()
	if err := s.Purge(pctx, jetstream.WithPurgeSequence(info.State.LastSeq+1)); err != nil {
		return err
	}
	p.report("purged", n)
	return nil
}

// confirm asks on stderr whether to purge n entries and reads the answer
// from in: y or yes agrees.
func (p *parkedCmd) confirm(in io.Reader, n int) bool {
	fmt.Fprintf(p.stderr, "Purge %s? [y/N] ", p.kind.count(n))
	line, _ := bufio.NewReader(in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// report prints what was done to how many entries: "purged 3 dead letters",
// or with --json {"purged": 3}.
func (p *parkedCmd) report(done string, n int) {
	if p.asJSON {
		cli.WriteJSONLine(p.stdout, map[string]int{done: n})
		return
	}
	fmt.Fprintf(p.stdout, "%s %s\n", done, p.kind.count(n))
}

func jsonOfParked(e durable.Parked) cli.ParkedJSON {
	if e.Header == nil {
		e.Header = nats.Header{}
	}
	return cli.ParkedJSON{Parked: e, Data: bodyJSON(streams.ContentType(e.Header, e.Data), e.Data)}
}

func printParkedTable(w io.Writer, list []durable.Parked, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tCAPABILITY\tREQUEST ID\tREASON\tCODE\tATTEMPTS\tCOUNT\tAGE\tLAST ERROR")
	for _, e := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Seq, cli.OrDash(e.Capability), cli.OrDash(e.RequestID),
			cli.OrDash(e.Reason), cli.OrDash(e.Code), e.Attempts, e.Count, cli.HeartbeatAge(now.Sub(e.Time)),
			cli.OrDash(cli.Truncate(cli.OneLine(e.LastError), cli.LastErrorWidth)))
	}
	return tw.Flush()
}

// printParked prints every field of an entry, its headers (sorted) and its
// payload, indented when it is JSON.
func printParked(w io.Writer, e durable.Parked, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, f := range [][2]string{
		{"Stream", e.Stream},
		{"Seq", strconv.FormatUint(e.Seq, 10)},
		{"Capability", e.Capability},
		{"Request ID", e.RequestID},
		{"Reason", e.Reason},
		{"Code", e.Code},
		{"Attempts", strconv.Itoa(e.Attempts)},
		{"Count", strconv.Itoa(e.Count)},
		{"Time", e.Time.Format(time.RFC3339Nano) + " (" + cli.HeartbeatAge(now.Sub(e.Time)) + " ago)"},
		{"Last error", e.LastError},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], cli.OrDash(f[1]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Headers:")
	keys := make([]string, 0, len(e.Header))
	for k := range e.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range e.Header[k] {
			fmt.Fprintf(w, "  %s: %s\n", k, v)
		}
	}
	fmt.Fprintln(w, "Payload:")
	printBody(w, bodyJSON(streams.ContentType(e.Header, e.Data), e.Data))
	return nil
}
