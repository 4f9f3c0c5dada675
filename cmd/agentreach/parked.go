package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher"
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
Inspects and handles the review queue REACH_REVIEW: durable tasks whose
overall deadline passed before they finished (reason "deadline"), held for a
person with their original headers and payload, the error code, the attempts
and the last error.

Sub-commands:
  ls                 one row per entry, oldest first (--json: an array)
  show <seq>         every field, the headers and the payload (indented JSON)
  replay <seq>       resubmit to the durable tier with the same request id
  replay --all       (--new-deadline gives it a new deadline) and remove the entry
  resolve <seq>      delete the entry: the person handled the task

Example:
  agentreach review ls
  agentreach review replay --new-deadline 1h 7
  agentreach review resolve 7`

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
}

var (
	dlqKind = parkedKind{name: "dlq", stream: streams.StreamDLQ, noun: "dead letter", nouns: "dead letters",
		synopsis: "agentreach dlq [flags] ls | show <seq> | replay (<seq>|--all) | purge [<seq>]",
		about:    dlqAbout, remove: "purge"}
	reviewKind = parkedKind{name: "review", stream: streams.StreamReview, noun: "review entry", nouns: "review entries",
		synopsis: "agentreach review [flags] ls | show <seq> | replay (<seq>|--all) | resolve <seq>",
		about:    reviewAbout, remove: "resolve"}
)

func (k parkedKind) count(n int) string {
	if n == 1 {
		return "1 " + k.noun
	}
	return strconv.Itoa(n) + " " + k.nouns
}

// confirmInput returns where purge reads its confirmation and whether that
// is a terminal. Tests replace it.
var confirmInput = func() (io.Reader, bool) { return os.Stdin, isTerminal(os.Stdin) }

// lastErrorWidth is where `ls` cuts the last error.
const lastErrorWidth = 60

func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runParked(ctx, dlqKind, args, stdout, stderr)
}

func runReview(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runParked(ctx, reviewKind, args, stdout, stderr)
}

// parkedCmd runs the sub-commands of dlq and review.
type parkedCmd struct {
	kind     parkedKind
	js       jetstream.JetStream
	subjects streams.Subjects
	timeout  time.Duration // bound on each read or change
	asJSON   bool
	stdout   io.Writer
	stderr   io.Writer
}

func runParked(ctx context.Context, k parkedKind, args []string, stdout, stderr io.Writer) int {
	var (
		conn     connFlags
		asJSON   bool
		all      bool
		yes      bool
		deadline time.Duration
	)
	cl := newCmdline(k.name, k.synopsis, k.about)
	cl.group("Flags", func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, `print JSON: ls an array, show an object, the others {"<what was done>": n}`)
		fs.BoolVar(&all, "all", false, "replay every "+k.noun+" instead of one <seq>")
		fs.DurationVar(&deadline, "new-deadline", 0,
			"replay: give the resubmitted task a new overall deadline (Reach-Deadline) this far from now;\n0 means the dispatchers' default for durable tasks, counted from the resubmission")
		if k.remove == "purge" {
			fs.BoolVar(&yes, "yes", false, "purge without asking for confirmation (needed when stdin is not a terminal)")
		}
	})
	cl.group("Connection flags", func(fs *flag.FlagSet) {
		conn.register(fs, 10*time.Second, "bound on connecting and on each read or change")
	})
	pos, code, ok := cl.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	subs := "ls, show, replay or " + k.remove
	if len(pos) == 0 {
		return cl.usageError(stderr, "want a sub-command: %s", subs)
	}
	sub, rest := pos[0], pos[1:]
	var (
		seq    uint64
		hasSeq bool
	)
	switch sub {
	case "ls":
		if len(rest) > 0 {
			return cl.usageError(stderr, "ls: unexpected argument %q", rest[0])
		}
	case "show", "replay", k.remove:
		if len(rest) > 1 {
			return cl.usageError(stderr, "%s: want at most one <seq>, got %d arguments", sub, len(rest))
		}
		if len(rest) == 1 {
			n, err := strconv.ParseUint(rest[0], 10, 64)
			if err != nil || n == 0 {
				return cl.usageError(stderr, "%s: <seq> must be a positive stream sequence number, got %q", sub, rest[0])
			}
			seq, hasSeq = n, true
		}
		switch {
		case hasSeq && all:
			return cl.usageError(stderr, "%s: give one <seq> or --all, not both", sub)
		case sub == "replay" && !hasSeq && !all:
			return cl.usageError(stderr, "replay: want a <seq> or --all")
		case sub != "replay" && sub != "purge" && !hasSeq:
			return cl.usageError(stderr, "%s: want a <seq> (the SEQ column of '%s ls')", sub, k.name)
		}
	default:
		return cl.usageError(stderr, "unknown sub-command %q (want %s)", sub, subs)
	}
	if deadline < 0 {
		return cl.usageError(stderr, "--new-deadline must not be negative, got %v", deadline)
	}
	var in io.Reader
	if sub == "purge" && !yes {
		var term bool
		if in, term = confirmInput(); !term {
			return cl.usageError(stderr, "stdin is not a terminal, so purge cannot ask for confirmation: pass --yes to purge")
		}
	}

	conn.log = conn.logger(stderr)
	nc, err := conn.connect("agentreach-" + k.name)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitFail
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitFail
	}
	p := &parkedCmd{kind: k, js: js, subjects: conn.subjects(), timeout: conn.timeout, asJSON: asJSON, stdout: stdout, stderr: stderr}
	switch sub {
	case "ls":
		err = p.list(ctx)
	case "show":
		err = p.show(ctx, seq)
	case "replay":
		err = p.replay(ctx, seq, deadline)
	case "resolve":
		err = p.resolve(ctx, seq)
	case "purge":
		if hasSeq {
			err = p.purgeOne(ctx, seq, in)
		} else {
			err = p.purgeAll(ctx, in)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitFail
	}
	return exitOK
}

// bounded returns ctx bounded by --timeout.
func (p *parkedCmd) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.timeout)
}

func (p *parkedCmd) list(ctx context.Context) error {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	list, err := dispatcher.ListParked(ctx, p.js, p.subjects, p.kind.stream)
	if err != nil {
		return err
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Seq < list[j].Seq })
	if p.asJSON {
		out := make([]parkedJSON, len(list))
		for i, e := range list {
			out[i] = jsonOfParked(e)
		}
		return writeJSON(p.stdout, out)
	}
	return printParkedTable(p.stdout, list, time.Now())
}

// get returns one entry, with an error naming the queue when there is none.
func (p *parkedCmd) get(ctx context.Context, seq uint64) (dispatcher.Parked, error) {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	e, err := dispatcher.GetParked(ctx, p.js, p.subjects, p.kind.stream, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return e, fmt.Errorf("no %s with seq %d in %s", p.kind.noun, seq, p.kind.stream)
	}
	return e, err
}

func (p *parkedCmd) show(ctx context.Context, seq uint64) error {
	e, err := p.get(ctx, seq)
	if err != nil {
		return err
	}
	if p.asJSON {
		return writeJSON(p.stdout, jsonOfParked(e))
	}
	return printParked(p.stdout, e, time.Now())
}

// replay resubmits entry seq, or every entry when seq is 0, with
// dispatcher.Replay, and prints how many were resubmitted. deadline > 0
// gives each resubmitted task a new Reach-Deadline that far from now.
func (p *parkedCmd) replay(ctx context.Context, seq uint64, deadline time.Duration) error {
	var list []dispatcher.Parked
	if seq == 0 {
		lctx, cancel := p.bounded(ctx)
		var err error
		list, err = dispatcher.ListParked(lctx, p.js, p.subjects, p.kind.stream)
		cancel()
		if err != nil {
			return err
		}
		sort.SliceStable(list, func(i, j int) bool { return list[i].Seq < list[j].Seq })
	} else {
		e, err := p.get(ctx, seq)
		if err != nil {
			return err
		}
		list = append(list, e)
	}
	var newDeadline time.Time
	if deadline > 0 {
		newDeadline = time.Now().Add(deadline)
	}
	n := 0
	var errs []error
	for _, e := range list {
		rctx, cancel := p.bounded(ctx)
		err := dispatcher.Replay(rctx, p.js, p.subjects, e, newDeadline)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("seq %d: %w", e.Seq, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		n++
	}
	p.report("resubmitted", n)
	if len(errs) > 0 {
		return fmt.Errorf("%d of %s not resubmitted: %w", len(list)-n, p.kind.count(len(list)), errors.Join(errs...))
	}
	return nil
}

func (p *parkedCmd) resolve(ctx context.Context, seq uint64) error {
	e, err := p.get(ctx, seq)
	if err != nil {
		return err
	}
	dctx, cancel := p.bounded(ctx)
	defer cancel()
	if err := dispatcher.DeleteParked(dctx, p.js, p.kind.stream, e.Seq); err != nil {
		return err
	}
	p.report("resolved", 1)
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
	dctx, cancel := p.bounded(ctx)
	defer cancel()
	if err := dispatcher.DeleteParked(dctx, p.js, p.kind.stream, e.Seq); err != nil {
		return err
	}
	p.report("purged", 1)
	return nil
}

// purgeAll deletes every entry up to the last one counted for the
// confirmation; entries parked after that stay.
func (p *parkedCmd) purgeAll(ctx context.Context, in io.Reader) error {
	ictx, cancel := p.bounded(ctx)
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
	pctx, cancel := p.bounded(ctx)
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
		writeJSONLine(p.stdout, map[string]int{done: n})
		return
	}
	fmt.Fprintf(p.stdout, "%s %s\n", done, p.kind.count(n))
}

// parkedJSON is one entry as `ls --json` and `show --json` print it: the
// payload as JSON (see bodyJSON) instead of base64.
type parkedJSON struct {
	dispatcher.Parked
	Data json.RawMessage `json:"data"`
}

func jsonOfParked(e dispatcher.Parked) parkedJSON {
	if e.Header == nil {
		e.Header = nats.Header{}
	}
	return parkedJSON{Parked: e, Data: bodyJSON(streams.ContentType(e.Header, e.Data), e.Data)}
}

func printParkedTable(w io.Writer, list []dispatcher.Parked, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tCAPABILITY\tREQUEST ID\tREASON\tCODE\tATTEMPTS\tCOUNT\tAGE\tLAST ERROR")
	for _, e := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Seq, orDash(e.Capability), orDash(e.RequestID),
			orDash(e.Reason), orDash(e.Code), e.Attempts, e.Count, heartbeatAge(now.Sub(e.Time)),
			orDash(truncate(oneLine(e.LastError), lastErrorWidth)))
	}
	return tw.Flush()
}

// printParked prints every field of an entry, its headers (sorted) and its
// payload, indented when it is JSON.
func printParked(w io.Writer, e dispatcher.Parked, now time.Time) error {
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
		{"Time", e.Time.Format(time.RFC3339Nano) + " (" + heartbeatAge(now.Sub(e.Time)) + " ago)"},
		{"Last error", e.LastError},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], orDash(f[1]))
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

// oneLine joins the lines of s with spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// truncate cuts s to at most n runes, ending in "…" when it cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
