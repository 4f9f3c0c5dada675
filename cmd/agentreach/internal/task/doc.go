// Package task holds the commands that send work: call, broadcast,
// fanout, submit and result, and dlq and review for the tasks the durable
// tier parked.
package task
