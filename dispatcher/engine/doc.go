// Package engine is the dispatcher's task engine: a task's path through a
// replica as a pipeline of stages, one file each, read in this order —
// admit, decode, resolve, pick, deliver, settle, record (pipeline.go lists
// them) — with the state they share: the in-flight counts and fair share,
// each instance's load and breaker, the wait queues, the learned hints and
// hedge delays, the records.
//
// The engine opens nothing and subscribes to nothing. dispatcher.Dispatcher
// is the lifecycle around it (New, Start, Drain, Close, the subscriptions,
// the registry's watches; Bind hands the engine what it opened) and holds
// the entries by which a task comes in — from reach.task, in process
// (Call, Stream, a broadcast's shared delivery), from REACH_TASKS — each of
// which admits a task (Admit), reads it (NewTask) and runs it (Run).
package engine
