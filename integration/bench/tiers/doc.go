// Package tiers holds the scenarios that measure the tiers above a direct
// call: durable (JetStream submission), workflow (a 3-step workflow) and
// http (the HTTP gateway, metrics and tracing) and a2a (the A2A binding
// against the HTTP call, and agents answering NATS micro against not).
package tiers
