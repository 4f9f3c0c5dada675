// Package inbox takes the replies to a dispatcher's deliveries: one
// subscription per shard on a private inbox, each delivery a reply subject
// of its own, its replies handed in order to the goroutine of its shard.
package inbox
