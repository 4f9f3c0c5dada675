// Package relay carries one streamed task's messages to its caller
// (docs/protocol.md, Streaming results): the chunks, in order, then the
// final message, through a bounded queue that one goroutine drains, so a
// slow caller holds at most a fixed number of chunks in the dispatcher.
package relay
