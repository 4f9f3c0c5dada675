// Package workflow runs declarative workflows beside a dispatcher
// (docs/workflows.md): a task several agents finish in relay, where each
// step's outcome decides the next, a failed critical step rolls back what
// was done, and every decision is recorded.
//
// A workflow is defined in REACH_POLICY under workflow.<name> (YAML or
// JSON, read by spec.Parse; docs/workflows.md has the schema) and called
// like a capability: reach.task.<name> (or Dispatcher.Call: the HTTP
// gateway, a fan-out branch) on the direct tier, reach.submit.<name> on
// the durable tier. A workflow shadows a capability of the same name; its
// own steps call capabilities (dispatcher.ToCapability). The Engine is the
// dispatcher's Resolver for those names:
//
//	eng, _ := workflow.New(nc, workflow.Config{})
//	d, _ := dispatcher.New(nc, cfg, dispatcher.WithResolver(eng))
//	_ = eng.Start(ctx, d) // before the dispatcher's Start
//	_ = d.Start(ctx)
//
// A run's id is its request id. Its steps run in order: a call is one
// ordinary anycast task (the dispatcher's routing, retries, breakers,
// events), a parallel step a fan-out with its completion policy
// (fanout.Gather). Each task carries Reach-Parent-Id = the run id, the
// run's orchestration id and deadline, and the idempotency key
// <run-id>.<step>. A step runs when its condition holds; a failure is
// skipped, falls back to another capability, or ends the run — after
// compensating the steps done, in reverse order, when the step is
// critical. The answer carries the output mapping's result and
// Reach-Run-Id; a failure names the failing step and its error.
//
// A durable run keeps its state in REACH_RUNS (Run, key = run id): it is
// written before each task is sent and when the run ends, with a revision
// check, so after a dispatcher crash whichever replica gets the task's
// redelivery resumes the run from its last recorded step — a task whose
// outcome was not recorded is sent again with the same idempotency key, so
// an idempotent agent replays instead of executing twice — and a replica
// that lost the run to another cannot write over it. Its outcome goes
// where a durable task's goes: REACH_RESULTS, or REACH_DLQ / REACH_REVIEW
// with the run id. A direct-tier run lives only in the dispatcher that
// took it; its record is written once, when it has answered.
//
// Every decision — a condition's value, a skip, a fallback, an abort, a
// compensation, a wait, a resumption — is in the run's record and in
// REACH_EVENTS (KindDecision), beside a record per step (KindStep) and
// one per run (KindRun).
package workflow
