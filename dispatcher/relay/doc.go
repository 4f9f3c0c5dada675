// Package relay carries one streamed task's messages to its caller
// (docs/protocol.md, Streaming results): the chunks, in order, then the
// final message, through a bounded queue that one goroutine drains, so a
// slow caller holds at most a fixed number of chunks in the dispatcher.
//
// The dispatcher's rules, which its streaming stage
// (dispatcher/engine/stream.go) applies with a Stream per task: a caller
// that sends Reach-Stream: 1 on the direct tier gets the agent's CHUNK
// messages relayed, in order, on its reply subject, then the final result
// (with Reach-Chunks) or an error (without). Until the first chunk is
// relayed a streamed task is like any other: retried, hedged. The first
// chunk pins it to the delivery that sent it (Stream.Pin): its other
// deliveries (a hedge) are cancelled and their chunks dropped, and no retry
// or hedge follows — a failure of the pinned delivery, or its silence for
// the ack timeout between messages, ends the stream with the error. A
// Reach-Seq out of order ends it INTERNAL (ErrSeq), a chunk that no longer
// fits max_payload with the caller's headers PAYLOAD_TOO_LARGE
// (ErrTooLarge).
//
// A caller in process (Dispatcher.Stream, and so the HTTP gateway) reads
// the chunks through a bounded queue (New; Config.StreamBuffer, default
// DefaultLimit); past the bound the task ends OVERLOADED (ErrFull; its
// instance gets a CANCEL), so memory per stream is bounded by that many
// chunks of at most the server's max payload. A caller over NATS gets each
// chunk published as it comes, on the inbox's goroutine (Inline): the
// dispatcher keeps none; the connection's write buffer is its only store,
// and a publish blocks while it is full. A caller that reads too slowly is
// the server's slow consumer (docs/protocol.md says what bounds it).
package relay
