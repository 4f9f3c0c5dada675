// Command agentreach is the one Agent-Reach binary.
//
//	agentreach up [--demo]            local stack: embedded NATS, dispatcher, demo agents
//	agentreach dispatcher             a dispatcher replica against an existing cluster
//	agentreach demo                   the demo agents (echo, slow, math.add)
//	agentreach agents [--json]        the live agent instances
//	agentreach call <cap> '<json>'    call a capability and print the result (payload also @file or - for stdin)
//	agentreach broadcast <cap> '<json>'  ask every routable instance; one row per instance
//	agentreach fanout <file>|-        a fan-out over several capabilities; one row per branch
//	agentreach submit <cap> '<json>'  submit a durable task; prints its request id (--wait: the outcome)
//	agentreach result <request-id>    the outcome of a durable task: result, dead letter, review entry or none
//	agentreach dlq ls|show|replay|purge        dead letters (REACH_DLQ)
//	agentreach review ls|show|replay|resolve   tasks waiting for a person's decision (REACH_REVIEW)
//	agentreach stats | breakers       what every dispatcher replica counts and holds
//	agentreach caps | policy          capability declarations (REACH_CAPS) and live policy (REACH_POLICY)
//	agentreach conformance -- <cmd>   check an agent in any language against the wire contract
//	agentreach bench [<scenario>]     the benchmark suite (BENCHMARKS.md)
//	agentreach version                (or agentreach --version)
//
// Each command has --help, which lists every flag with its default and its
// environment variable: any flag can be set as AGENTREACH_<FLAG>, with dashes
// as underscores (--data-dir ← AGENTREACH_DATA_DIR); a flag given on the
// command line wins. Commands that talk to NATS share one set of connection
// flags (--server, --user, --password, --token, --creds, --nkey, --tls-*,
// --prefix, --log-level, --timeout).
//
// With --json a command prints machine output on stdout for every outcome:
// a failure is one object {"error": {"code", "message"}} with a wire code or
// one of the CLI's own (USAGE, CONNECT, NOT_PROVISIONED, NOT_FOUND,
// NO_DISPATCHER; internal/cli/errors.go). docs/cli.md is the user's page.
//
// Long-running commands stop gracefully on SIGTERM or Ctrl-C: agents and
// dispatchers drain before the process exits. `up` locks its data dir while
// it runs. Exit status is 0 on success, 1 on failure and 2 on a usage error.
package main
