package agenttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/streams"
)

// Agent is the agent under test. Check calls Start once, runs the checks,
// and calls Stop once (during the drain rule, or at the end).
//
// Start runs the agent against env and returns once it is starting; it need
// not wait for the agent to register, which the register rule watches for.
// Stop asks the agent to drain, with SIGTERM semantics (mark the record
// draining, finish the tasks in flight, delete the key), waits for it to
// exit, and returns an error when it did not end cleanly (for a process: a
// non-zero exit status). When ctx ends first, Stop ends the agent at once.
//
// An Agent that also has a method Output() string (as Command's does) has
// what it returns put into Report.Output.
type Agent interface {
	Start(ctx context.Context, env Env) error
	Stop(ctx context.Context) error
}

// Env is what an agent under test is given: where the suite's NATS server
// is, the instance id it must register under and, with auth (WithAuth),
// its identity's credentials. A process gets it as environment variables
// (Environ).
type Env struct {
	// ServerURL is the NATS URL of the suite's server (loopback).
	ServerURL string
	// AgentID is the instance id the agent must use: its key in
	// REACH_AGENTS and the last token of its delivery subject.
	AgentID string
	// Subjects names the subjects; the suite uses the default prefix.
	Subjects streams.Subjects
	// CredsFile is, with auth (WithAuth), the credentials file of the
	// agent's identity (an agent named AgentID of type "conformance");
	// the agent connects with it (user JWT and nkey seed, inbox prefix
	// _INBOX.<AgentID>). Empty without auth.
	CredsFile string
}

// Environment variables an agent under test reads (Env.Environ).
const (
	EnvServer  = "AGENTREACH_SERVER"
	EnvAgentID = "AGENTREACH_AGENT_ID"
	EnvPrefix  = "AGENTREACH_PREFIX"
	// EnvCreds is set only with auth (WithAuth): the agent's credentials
	// file, as `agentreach --creds` reads it from AGENTREACH_CREDS.
	EnvCreds = "AGENTREACH_CREDS"
)

// Environ returns env as environment variables, "KEY=value":
// AGENTREACH_SERVER, AGENTREACH_AGENT_ID, AGENTREACH_PREFIX (the subject
// prefix, "reach") and, with auth, AGENTREACH_CREDS.
func (e Env) Environ() []string {
	prefix := e.Subjects.Prefix
	if prefix == "" {
		prefix = streams.DefaultPrefix
	}
	env := []string{EnvServer + "=" + e.ServerURL, EnvAgentID + "=" + e.AgentID, EnvPrefix + "=" + prefix}
	if e.CredsFile != "" {
		env = append(env, EnvCreds+"="+e.CredsFile)
	}
	return env
}

// Report is the outcome of Check: one Result per rule, in the order of
// RuleIDs.
type Report struct {
	Results []Result
	// Output is what the agent printed, when it keeps that (Command keeps
	// the last 64 KiB of its stdout and stderr).
	Output string
	// Elapsed is how long the whole run took.
	Elapsed time.Duration
}

// Passed reports whether every rule that was checked passed.
func (r *Report) Passed() bool {
	for _, res := range r.Results {
		if !res.Passed {
			return false
		}
	}
	return true
}

// Failed returns the results of the rules that failed.
func (r *Report) Failed() []Result {
	var out []Result
	for _, res := range r.Results {
		if !res.Passed {
			out = append(out, res)
		}
	}
	return out
}

// Result is the outcome of one rule.
type Result struct {
	// Rule is the rule's id, e.g. "ack"; docs/conformance.md has a section
	// of that name.
	Rule string
	// Title says in a few words what the rule requires.
	Title string
	// Passed reports whether the agent kept the rule.
	Passed bool
	// Message says, when the rule failed, what was expected and what was
	// seen: "rule ack: … (see docs/conformance.md#ack)".
	Message string
	// Elapsed is how long the check took.
	Elapsed time.Duration
}

// Option configures Check.
type Option func(*config)

type config struct {
	only []string
	log  zerolog.Logger
	auth bool
}

// Only checks just the rules with these ids (see RuleIDs); by default every
// rule is checked. The agent is still started, waited for and stopped, so
// register runs in any case but is reported only when named. An unknown id
// makes Check fail with ErrUnknownRule.
func Only(ids ...string) Option { return func(c *config) { c.only = append(c.only, ids...) } }

// WithLogger sets the logger of the suite's dispatcher; the default
// discards.
func WithLogger(l zerolog.Logger) Option { return func(c *config) { c.log = l } }

// WithAuth checks the agent with security on, as `agentreach up --auth`
// runs a stack (docs/security.md): the server in operator mode on an
// identity store in a temporary directory, a syncer pushing the identities
// and the ACL, and a dispatcher that authorizes every task. The agent gets
// an identity of its own, an agent named Env.AgentID of type
// "conformance" granted conformance and conformance.>, and its credentials
// file as Env.CredsFile (AGENTREACH_CREDS); it must connect with them and
// read replies only under its inbox prefix _INBOX.<AgentID>. The suite
// calls through the dispatcher as a caller identity, every task signed, and
// delivers directly as a dispatcher identity. The rules are the same.
func WithAuth() Option { return func(c *config) { c.auth = true } }

// RuleIDs lists the id of every rule, in the order they are checked.
func RuleIDs() []string {
	ids := make([]string, len(rules))
	for i, r := range rules {
		ids[i] = r.id
	}
	return ids
}

// selected returns the rules to report, or ErrUnknownRule.
func (c *config) selected() (map[string]bool, error) {
	ids := RuleIDs()
	sel := make(map[string]bool, len(ids))
	if len(c.only) == 0 {
		for _, id := range ids {
			sel[id] = true
		}
		return sel, nil
	}
	for _, id := range c.only {
		if !slices.Contains(ids, id) {
			return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownRule, id, strings.Join(ids, ", "))
		}
		sel[id] = true
	}
	return sel, nil
}

// Check starts its own NATS server with the Agent-Reach topology and a
// dispatcher, starts agent against it, and checks every rule of
// docs/conformance.md. It never calls testing, so it serves a test (see
// Run), a command line tool or a CI job alike. Every wait is bounded: a run
// takes about 10 s for an agent that passes and stays well under a minute
// for one that does not.
//
// The error is for a run that could not take place: the server or the
// dispatcher did not start, agent.Start failed, an option is wrong, or ctx
// ended (then the report holds the rules checked so far).
func Check(ctx context.Context, agent Agent, opts ...Option) (*Report, error) {
	cfg := config{log: zerolog.Nop()}
	for _, o := range opts {
		o(&cfg)
	}
	sel, err := cfg.selected()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s, err := newSuite(ctx, cfg.log, cfg.auth)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.startAgent(ctx, agent); err != nil {
		return nil, err
	}
	report := &Report{}
	for _, r := range rules {
		if !sel[r.id] && r.id != ruleRegister {
			continue
		}
		res := s.check(ctx, r)
		if sel[r.id] {
			report.Results = append(report.Results, res)
		}
		if ctx.Err() != nil {
			break
		}
	}
	s.stopAgent()
	if o, ok := agent.(interface{ Output() string }); ok {
		report.Output = o.Output()
	}
	report.Elapsed = time.Since(start)
	return report, ctx.Err()
}

// Run checks agent with Check and reports each rule as a subtest named by
// its id, failing it with the rule's message. The agent's output, if it
// keeps one, is logged when a rule fails.
func Run(t *testing.T, agent Agent, opts ...Option) {
	t.Helper()
	report, err := Check(t.Context(), agent, opts...)
	if err != nil {
		t.Fatalf("agenttest: %v", err)
	}
	for _, res := range report.Results {
		t.Run(res.Rule, func(t *testing.T) {
			if !res.Passed {
				t.Error(res.Message)
			}
		})
	}
	if !report.Passed() && report.Output != "" {
		t.Logf("the agent's output:\n%s", report.Output)
	}
}
