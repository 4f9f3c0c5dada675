// Package feedback takes callers' scores of the results a dispatcher
// replica returned (requests on reach.feedback, Reach-Prefer: quality):
// each accepted once, for the instance that answered, from the task's
// proven caller, folded into the instance's quality average and stored in
// REACH_EVENTS as the replica's own record (docs/protocol.md, "Feedback").
package feedback
