// Package agenttest is the conformance suite of Agent-Reach: one reusable
// check that an agent, written in any language, keeps the wire contract of
// docs/protocol.md — in the way testing/slogtest checks a slog.Handler.
//
// Check starts an embedded NATS server with the topology provisioned
// (heartbeat 1 s, so REACH_AGENTS has a TTL of 3 s), a real dispatcher with
// a call timeout of 1 s, and the agent under test, which must register as
// type "conformance" and serve the capabilities conformance.echo, .reject,
// .slow, .busy and .write. It then checks one rule after another (RuleIDs),
// acting as a dispatcher itself where a rule needs control over the
// delivery, and calling through the dispatcher where it is about what a
// caller sees. docs/conformance.md describes every rule and the
// capabilities; every failure message names its rule and section.
//
// A process in any language is checked with Command (a Go agent's main
// package can be built for it with Build); from a Go test:
//
//	func TestConformance(t *testing.T) {
//		agenttest.Run(t, agenttest.Command(agenttest.Build(t, "./cmd/myagent")))
//	}
//
// and from a shell: agentreach conformance -- ./myagent. An Agent can also
// run in process, as long as Stop drains it the way SIGTERM would.
package agenttest
