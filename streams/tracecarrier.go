package streams

import "github.com/nats-io/nats.go"

// HeaderCarrier lets OpenTelemetry propagators (propagation.TextMapCarrier)
// read and write W3C trace context in NATS headers under its exact names:
// HeaderTraceParent ("traceparent") and "tracestate". NATS header names
// are case-sensitive, unlike HTTP's.
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set sets key to value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the keys.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
