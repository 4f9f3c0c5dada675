// Package selection decides where a task goes, with no connection of its
// own: the pick stage of the dispatcher's pipeline (docs/architecture.md).
// It holds what the dispatcher knows of each instance (Load: slots in
// flight, latency, failure penalty, quality, its Breaker), the strategies
// that place a task among the qualifying instances (Picker), the static
// filter of a capability's instances by a task's requirements and the
// declarations (View), the callers' fair share of a replica's slots
// (FairShare), the wait for a free slot (WaitQueue), learned timeout
// hints (Hints) and the hedge delay and budget (Hedges). Time is read or passed in, never slept on, so every
// part is tested without a server.
package selection
