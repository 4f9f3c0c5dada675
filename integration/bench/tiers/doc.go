// Package tiers holds the scenarios that measure the tiers above a direct
// call: durable (JetStream submission), workflow (a 3-step workflow) and
// http (the HTTP gateway, metrics and tracing).
package tiers
