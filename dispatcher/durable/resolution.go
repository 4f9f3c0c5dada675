package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/streams"
)

// RecordResolution publishes the REACH_EVENTS record of a person's decision
// on review entry p: resolution is OutcomeReviewRerun or OutcomeReviewDrop,
// by names who decided. The record (one JSON line on
// <prefix>.event.<capability>, as DecodeEvents reads it) carries the entry's
// request id, capability, code, node and attempts. Its Nats-Msg-Id is
// derived from the resolution and the entry, so recording the same decision
// again within the stream's duplicate window stores it once.
func RecordResolution(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, p Parked, resolution, by string) error {
	switch {
	case resolution != events.OutcomeReviewRerun && resolution != events.OutcomeReviewDrop:
		return fmt.Errorf("dispatcher: record resolution: unknown resolution %q (want %s or %s)", resolution, events.OutcomeReviewRerun, events.OutcomeReviewDrop)
	case strings.TrimSpace(by) == "":
		return fmt.Errorf("dispatcher: record resolution of %s seq %d: no one named as deciding", p.Stream, p.Seq)
	}
	if err := streams.ValidateCapability(p.Capability); err != nil {
		return fmt.Errorf("dispatcher: record resolution of %s seq %d: %w", p.Stream, p.Seq, err)
	}
	ev := events.Event{
		RequestID:       p.RequestID,
		OrchestrationID: p.Header.Get(streams.HeaderOrchestrationID),
		Capability:      p.Capability,
		Tier:            "durable",
		Status:          string(streams.StatusFailed),
		Code:            p.Code,
		Outcome:         resolution,
		Node:            p.Header.Get(streams.HeaderNode),
		Attempts:        p.Attempts,
		Start:           time.Now().UTC(),
		By:              by,
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("dispatcher: record resolution: %w", err)
	}
	m := nats.NewMsg(subjects.Event(p.Capability))
	m.Header.Set(events.HeaderEvents, "1")
	m.Header.Set(streams.HeaderMsgID, resolution+"-"+p.RequestID+"-"+strconv.FormatUint(p.Seq, 10))
	m.Data = append(b, '\n')
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("dispatcher: record %s of %s: %w", resolution, p.RequestID, err)
	}
	return nil
}
