package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/streams"
)

// envPrefix starts the environment variable of every flag.
const envPrefix = "AGENTREACH_"

// EnvName returns the environment variable that can set a flag:
// --data-dir ← AGENTREACH_DATA_DIR.
func EnvName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// envAlias is another environment variable for a flag: a name the seeds'
// deployments use (docs/operations.md lists them). It sets its flag on the
// commands that have that flag; the flag on the command line and the
// flag's own variable win over it.
type envAlias struct {
	name string // the variable
	flag string // the flag it sets
	// convert turns the variable's value into the flag's; nil: as it is.
	convert func(string) (string, error)
	unit    string // how the help names the variable's unit when it differs from the flag's
}

// envAliases are the aliases, in the order of docs/operations.md's table.
// AGENTREACH_DATA_DIR needs none: it is --data-dir's own variable.
var envAliases = []envAlias{
	{name: "AGENTREACH_TLS_ENABLED", flag: "http-tls"},
	{name: "AGENTREACH_CERT_FILE", flag: "http-cert"},
	{name: "AGENTREACH_KEY_FILE", flag: "http-key"},
	{name: "AGENTREACH_MAX_RESPONSE_MB", flag: "max-payload", convert: mebibytes, unit: " (in MiB)"},
	{name: "AGENTREACH_MAX_WORKERS", flag: "max-in-flight"},
}

// unusedAliases are variables of the seeds' deployments that have no
// equivalent here, with why; a command that has the flag named warns when
// one is set instead of ignoring it silently.
var unusedAliases = []struct{ name, flag, why string }{
	{"AGENTREACH_BUFFER_QUEUE", "max-in-flight",
		"nothing here is a queue of that size: a busy instance makes a task wait up to --queue-wait (a duration), " +
			"and the durable tier (POST /v1/submit) buffers up to " + strconv.Itoa(streams.DefaultPendingPerCapability) +
			" tasks per capability in " + streams.StreamTasks},
}

// mebibytes converts a whole number of MiB, up to the largest
// --max-payload, into bytes.
func mebibytes(v string) (string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > MaxPayloadRead>>20 {
		return "", fmt.Errorf("want a whole number of MiB from 1 to %d", MaxPayloadRead>>20)
	}
	return strconv.Itoa(n << 20), nil
}

// BindEnv sets every flag of fs that was not given on the command line from
// its environment variable, or else from its alias (envAliases), when that
// variable is set and not empty; flags given explicitly win. A repeatable
// flag reads a comma-separated list. A value the flag refuses is an error
// that names the variable.
func BindEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookup(name)
		var convert func(string) (string, error)
		if a, found := aliasFor(f.Name); found && (!ok || v == "") {
			name, convert = a.name, a.convert
			v, ok = lookup(name)
		}
		if !ok || v == "" {
			return
		}
		values := []string{v}
		if _, ok := f.Value.(repeatable); ok {
			values = SplitList(v)
		}
		for _, x := range values {
			if err := setFromEnv(fs, f, x, convert); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s=%q: invalid value for --%s: %w", name, v, f.Name, err))
				return
			}
		}
	})
	return errors.Join(errs...)
}

// setFromEnv sets f to x, converted first when convert is not nil.
func setFromEnv(fs *flag.FlagSet, f *flag.Flag, x string, convert func(string) (string, error)) error {
	if convert != nil {
		var err error
		if x, err = convert(x); err != nil {
			return err
		}
	}
	if err := fs.Set(f.Name, x); err != nil {
		return explain(f, err)
	}
	return nil
}

// warnUnusedAliases tells w about every variable of unusedAliases that is
// set, when fs has its flag.
func warnUnusedAliases(w io.Writer, fs *flag.FlagSet, lookup func(string) (string, bool)) {
	for _, a := range unusedAliases {
		if v, ok := lookup(a.name); ok && v != "" && fs.Lookup(a.flag) != nil {
			fmt.Fprintf(w, "warning: environment variable %s is not used: %s\n", a.name, a.why)
		}
	}
}

// explain replaces the flag package's bare "parse error" with what the flag
// wants.
func explain(f *flag.Flag, err error) error {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case bool:
		return errors.New("want true or false")
	case time.Duration:
		return errors.New("want a duration such as 500ms, 5s or 1m30s")
	case int, int64, uint, uint64:
		return errors.New("want an integer")
	case float64:
		return errors.New("want a number")
	}
	return err
}

func SplitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// ParseArgs parses args into fs, allowing flags before, between and after
// the positional arguments ("--" ends the flags), and returns the positional
// arguments in order.
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// Cmdline is one command's flag set and help text, and how it reports
// failures.
type Cmdline struct {
	fs       *flag.FlagSet
	synopsis string
	about    string
	groups   []flagGroup
	asJSON   *bool     // the command's --json (jsonFlag); nil when it has none
	stdout   io.Writer // set by parse: where a failure's JSON object goes
}

type flagGroup struct {
	title string
	names []string
}

// NewCmdline returns the command line of command name; synopsis and about
// open its --help.
func NewCmdline(name, synopsis, about string) *Cmdline {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {} // parse prints the help itself
	return &Cmdline{fs: fs, synopsis: synopsis, about: about}
}

// Group defines flags with define and lists them under title in the help.
func (c *Cmdline) Group(title string, define func(*flag.FlagSet)) {
	before := make(map[string]bool)
	c.fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
	define(c.fs)
	g := flagGroup{title: title}
	c.fs.VisitAll(func(f *flag.Flag) {
		if !before[f.Name] {
			g.names = append(g.names, f.Name)
		}
	})
	c.groups = append(c.groups, g)
}

// jsonFlag defines the command's --json on fs: machine output on stdout,
// and for every failure one JSON object {"error": {"code", "message"}}
// (see fail).
func (c *Cmdline) JSONFlag(fs *flag.FlagSet, p *bool, usage string) {
	fs.BoolVar(p, "json", false, usage)
	c.asJSON = p
}

// jsonMode reports whether failures print their JSON object.
func (c *Cmdline) jsonMode() bool { return c.asJSON != nil && *c.asJSON && c.stdout != nil }

// Parse parses the command line and then the environment. It returns the
// positional arguments, or ok=false and the exit code when the command must
// stop: 0 after --help, exitUsage after a bad flag.
func (c *Cmdline) Parse(args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	c.fs.SetOutput(stderr)
	c.stdout = stdout
	pos, err := ParseArgs(c.fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.usage(stdout)
		return nil, ExitOK, false
	case err != nil: // the flag package has printed the error
		fmt.Fprintf(stderr, "Run 'agentreach %s --help' for usage.\n", c.fs.Name())
		if c.asJSON != nil && !*c.asJSON {
			// The parser stopped at the bad flag: --json may follow it.
			*c.asJSON = jsonRequested(args, os.LookupEnv)
		}
		c.printFailure(FailureOutput{Error: &streams.Error{Code: CodeUsage, Message: err.Error()}})
		return nil, ExitUsage, false
	}
	if err := BindEnv(c.fs, os.LookupEnv); err != nil {
		return nil, c.UsageError(stderr, "%v", err), false
	}
	warnUnusedAliases(stderr, c.fs, os.LookupEnv)
	return pos, ExitOK, true
}

// ParseNoArgs is parse for a command that takes no positional arguments.
func (c *Cmdline) ParseNoArgs(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	pos, code, ok := c.Parse(args, stdout, stderr)
	if ok && len(pos) > 0 {
		return c.UsageError(stderr, "unexpected argument %q", pos[0]), false
	}
	return code, ok
}

// SubCommand is one sub-command of a document command (caps, workflow):
// its name and the name of its one argument ("" for none).
type SubCommand struct{ Name, Arg string }

// Subcommand reads pos as one of subs and its argument: the sub-command,
// the argument's name ("" for none) and its value, or the usage error
// naming what is wrong.
func (c *Cmdline) Subcommand(stderr io.Writer, pos []string, subs []SubCommand) (sub, argName, arg string, code int, ok bool) {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.Name
	}
	list := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	if len(pos) == 0 {
		return "", "", "", c.UsageError(stderr, "want a sub-command: %s", list), false
	}
	sub, rest := pos[0], pos[1:]
	i := slices.Index(names, sub)
	switch {
	case i < 0:
		return "", "", "", c.UsageError(stderr, "unknown sub-command %q (want %s)", sub, list), false
	case subs[i].Arg == "" && len(rest) > 0:
		return "", "", "", c.UsageError(stderr, "%s: unexpected argument %q", sub, rest[0]), false
	case subs[i].Arg != "" && len(rest) != 1:
		return "", "", "", c.UsageError(stderr, "%s: want one %s, got %d arguments", sub, subs[i].Arg, len(rest)), false
	case subs[i].Arg == "":
		return sub, "", "", ExitOK, true
	}
	return sub, subs[i].Arg, rest[0], ExitOK, true
}

// jsonRequested reports whether args (up to "--") or the environment set
// --json to true, whatever else they hold.
func jsonRequested(args []string, lookup func(string) (string, bool)) bool {
	on := false
	if v, ok := lookup(EnvName("json")); ok {
		on, _ = strconv.ParseBool(v)
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if name != "json" || !strings.HasPrefix(a, "-") {
			continue
		}
		on = true
		if hasValue {
			on, _ = strconv.ParseBool(value)
		}
	}
	return on
}

// UsageError prints a usage error (with --json also its JSON object on
// stdout) and returns exitUsage.
func (c *Cmdline) UsageError(stderr io.Writer, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(stderr, "error: %s\nRun 'agentreach %s --help' for usage.\n", msg, c.fs.Name())
	c.printFailure(FailureOutput{Error: &streams.Error{Code: CodeUsage, Message: msg}})
	return ExitUsage
}

// Fail reports a failure and returns exitFail: "error: <err>" on stderr and,
// with --json, {"error": {"code", "message"}} on stdout (see errorObject).
func (c *Cmdline) Fail(stderr io.Writer, err error) int {
	return c.FailWith(stderr, err, FailureOutput{})
}

// FailWith is fail with more fields in the JSON object.
func (c *Cmdline) FailWith(stderr io.Writer, err error, out FailureOutput) int {
	fmt.Fprintf(stderr, "error: %s\n", strings.TrimRight(err.Error(), " \t\r\n"))
	out.Error = ErrorObject(err)
	c.printFailure(out)
	return ExitFail
}

// FailureOutput is the one JSON object a failure prints with --json.
type FailureOutput struct {
	Error *streams.Error `json:"error"`
	Meta  *CallMeta      `json:"meta,omitempty"`
	// Parked is where a durable task was parked instead of a result.
	Parked *ParkedJSON `json:"parked,omitempty"`
	// Resubmitted counts the entries a replay resubmitted before failing.
	Resubmitted *int `json:"resubmitted,omitempty"`
}

// printFailure prints out on stdout in JSON mode.
func (c *Cmdline) printFailure(out FailureOutput) {
	if c.jsonMode() {
		WriteJSONLine(c.stdout, out)
	}
}

// usage prints the help: synopsis, description, then every flag with its
// default and environment variable.
func (c *Cmdline) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.synopsis, strings.TrimSpace(c.about))
	for _, g := range c.groups {
		if len(g.names) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			printFlag(w, c.fs.Lookup(name))
		}
	}
	fmt.Fprintf(w, "\nEvery flag can also be set from its environment variable; a flag on the command line wins.\n")
}

// aliasFor returns the alias of a flag.
func aliasFor(flagName string) (envAlias, bool) {
	for _, a := range envAliases {
		if a.flag == flagName {
			return a, true
		}
	}
	return envAlias{}, false
}

func printFlag(w io.Writer, f *flag.Flag) {
	typ, usage := flag.UnquoteUsage(f)
	if typ != "" {
		typ = " " + typ
	}
	def := f.DefValue
	switch {
	case def == "":
		def = "none"
	case needsQuotes(f):
		def = fmt.Sprintf("%q", def)
	}
	fmt.Fprintf(w, "  --%s%s\n", f.Name, typ)
	for _, line := range strings.Split(usage, "\n") {
		fmt.Fprintf(w, "      %s\n", line)
	}
	env := EnvName(f.Name)
	if _, ok := f.Value.(repeatable); ok {
		env += " (comma-separated)"
	}
	if a, ok := aliasFor(f.Name); ok {
		env += " or " + a.name + a.unit
	}
	fmt.Fprintf(w, "      default %s; env %s\n", def, env)
}

func needsQuotes(f *flag.Flag) bool {
	if g, ok := f.Value.(flag.Getter); ok {
		if _, ok := g.Get().(string); ok {
			return true
		}
	}
	_, ok := f.Value.(CheckedString)
	return ok
}

// CheckedString is a string flag whose value is checked when it is set, on
// the command line or from the environment.
type CheckedString struct {
	V     *string
	Check func(string) error
}

func (c CheckedString) String() string {
	if c.V == nil {
		return ""
	}
	return *c.V
}

func (c CheckedString) Set(s string) error {
	if err := c.Check(s); err != nil {
		return err
	}
	*c.V = s
	return nil
}

// repeatable is a flag that may be given several times; its environment
// variable holds a comma-separated list.
type repeatable interface {
	flag.Value
	repeatable()
}

// PairList is a repeatable key=value flag.
type PairList struct {
	Pairs []Pair
	Check func(key, value string) error
}

type Pair struct{ Key, Value string }

func (p *PairList) String() string {
	if p == nil {
		return ""
	}
	s := make([]string, len(p.Pairs))
	for i, kv := range p.Pairs {
		s[i] = kv.Key + "=" + kv.Value
	}
	return strings.Join(s, ",")
}

func (p *PairList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	if p.Check != nil {
		if err := p.Check(k, v); err != nil {
			return err
		}
	}
	p.Pairs = append(p.Pairs, Pair{k, v})
	return nil
}

func (*PairList) repeatable() {}

// GlobalFlags are the flags of every command that runs or talks to NATS.
type GlobalFlags struct {
	prefix   string
	logLevel string
}

func (g *GlobalFlags) Register(fs *flag.FlagSet) {
	g.prefix = streams.DefaultPrefix
	g.logLevel = zerolog.LevelInfoValue
	fs.Var(CheckedString{&g.prefix, validatePrefix}, "prefix",
		"first `token`(s) of every Agent-Reach subject (reach.task.<cap> …)")
	fs.Var(CheckedString{&g.logLevel, CheckLevel}, "log-level",
		"log `level`: trace, debug, info, warn, error or disabled (logs go to stderr:\nconsole format on a terminal, JSON otherwise)")
}

// Subjects returns the subject builder of --prefix.
func (g *GlobalFlags) Subjects() streams.Subjects { return streams.Subjects{Prefix: g.prefix} }

// Logger returns the logger of --log-level, writing to w.
func (g *GlobalFlags) Logger(w io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(g.logLevel) // checked when set
	return newLogger(w, level)
}

func CheckLevel(s string) error {
	if _, err := zerolog.ParseLevel(s); err != nil || s == "" {
		return fmt.Errorf("unknown log level %q (want trace, debug, info, warn, error or disabled)", s)
	}
	return nil
}

// validatePrefix accepts one or more dot-separated subject tokens without
// wildcards or spaces.
func validatePrefix(p string) error {
	if p == "" {
		return errors.New("subject prefix is empty")
	}
	for _, tok := range strings.Split(p, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return fmt.Errorf("subject prefix %q must be dot-separated tokens without spaces or wildcards", p)
		}
	}
	return nil
}

// registerHeartbeat defines --heartbeat, which up, dispatcher and demo share.
// registerStoreMB registers --store-mb: Topology.MaxBytes in MiB.
func RegisterStoreMB(fs *flag.FlagSet, mb *int64) {
	fs.Int64Var(mb, "store-mb", streams.DefaultMaxBytes>>20,
		"size limit, in `MiB`, of each stream and bucket holding tasks or their outcomes (REACH_TASKS,\n"+
			"REACH_RESULTS, REACH_DLQ, REACH_REVIEW, REACH_IDEMPOTENCY, REACH_RUNS); the small buckets hold a 16th,\n"+
			"at least 8 MiB. A full one refuses the next write. Provisioning sets it on buckets and streams\n"+
			"that have no limit; one that has keeps its own")
}

func RegisterHeartbeat(fs *flag.FlagSet, d *time.Duration) {
	fs.DurationVar(d, "heartbeat", streams.DefaultHeartbeat,
		"agents' heartbeat interval; REACH_AGENTS forgets an agent after 3 missed beats.\nProvisioning (up, dispatcher) and the agents must use the same value")
}
