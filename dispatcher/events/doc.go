// Package events is the record every task leaves in REACH_EVENTS: the
// Event itself, the counting model every surface counts by (Event.Count,
// Counts, ClassOf), its wire form (one JSON object per line, Append and
// DecodeEvents), the batching of a replica's records into messages
// (Log) and where a replica's records go (Recorder: counted, observed,
// sent). The record stage of the dispatcher's pipeline writes them.
package events
