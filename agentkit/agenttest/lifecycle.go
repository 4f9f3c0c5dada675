package agenttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// checkRegister: a record under AGENTREACH_AGENT_ID within 10 s, put after
// the delivery subject has a subscriber, that decodes, with the five
// capabilities, the bucket's heartbeat and status ready.
func checkRegister(ctx context.Context, s *suite) error {
	id := s.env.AgentID
	start := time.Now()
	es, ok := s.records.await(ctx, start.Add(registerWithin), s.gone, func(es []recordEntry) bool {
		return firstPut(es) != nil
	})
	if !ok {
		return fmt.Errorf("no record under the %s key %q within %v (protocol: put your record under your instance id, %s); saw %s",
			streams.BucketAgents, id, round(time.Since(start)), EnvAgentID, s.otherRecords(ctx, es))
	}
	first := firstPut(es)
	rec, err := registry.DecodeRecord(first.value)
	if err != nil {
		return fmt.Errorf("the record does not decode (registry.DecodeRecord): %v; saw %s", err, clip(first.value))
	}
	s.rec = &rec // the other rules can run, whatever is wrong below
	var p problems
	if !first.subscribed {
		p.add("the record appeared before anything subscribed to %s (protocol: subscribe before the first put)", s.env.Subjects.Agent(id))
	}
	if rec.ID != id {
		p.add("\"id\" is %q, want its key %q", rec.ID, id)
	}
	if rec.Type != agentType {
		p.add("\"type\" is %q, want %q", rec.Type, agentType)
	}
	if got := slices.Sorted(slices.Values(rec.Capabilities)); !slices.Equal(got, capabilities) {
		p.add("\"capabilities\" are %v, want exactly %v", got, capabilities)
	}
	if rec.HeartbeatMS != Heartbeat.Milliseconds() {
		p.add("\"heartbeat_ms\" is %d, want %d: the %s TTL (%v) / 3", rec.HeartbeatMS, Heartbeat.Milliseconds(), streams.BucketAgents, 3*Heartbeat)
	}
	if rec.Status != registry.StatusReady {
		p.add("\"status\" is %q, want %q", rec.Status, registry.StatusReady)
	}
	if rec.MaxConcurrent > maxSlots {
		p.add("\"max_concurrent\" is %d, want 1 to %d", rec.MaxConcurrent, maxSlots)
	}
	return p.err()
}

// otherRecords describes what the bucket holds when the agent's key is
// missing: usually an agent that made up its own id.
func (s *suite) otherRecords(ctx context.Context, es []recordEntry) string {
	if len(es) > 0 {
		return describe(es)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	keys, err := s.agents.ListKeys(ctx)
	if err != nil {
		return "nothing"
	}
	var other []string
	for k := range keys.Keys() {
		other = append(other, k)
	}
	if len(other) == 0 {
		return "nothing"
	}
	return fmt.Sprintf("records under other keys: %s (the agent must use %s)", strings.Join(other, ", "), EnvAgentID)
}

// firstPut returns the first put among es, or nil.
func firstPut(es []recordEntry) *recordEntry {
	for i := range es {
		if es[i].op == jetstream.KeyValuePut {
			return &es[i]
		}
	}
	return nil
}

// describe lists changes of the key: "put ready, put draining, delete".
func describe(es []recordEntry) string {
	if len(es) == 0 {
		return "nothing"
	}
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = opName(e.op)
		if e.op == jetstream.KeyValuePut {
			if rec, err := registry.DecodeRecord(e.value); err == nil {
				s[i] += " " + rec.Status
			}
		}
	}
	return strings.Join(s, ", ")
}

func opName(op jetstream.KeyValueOp) string {
	switch op {
	case jetstream.KeyValuePut:
		return "put"
	case jetstream.KeyValueDelete:
		return "delete"
	}
	return "purge or expiry"
}

// checkHeartbeat: among the puts of the run so far (at least three), two
// gaps in a row are each within 1.5 × heartbeat_ms, by the server's
// timestamps; every put decodes, and the key is not removed before the
// agent is stopped. One late put alone does not fail the rule — on a loaded
// machine any process can stall for a moment — but an agent whose interval
// is wrong has no such pair. The rule runs late, so the puts it judges have
// happened and it rarely waits.
func checkHeartbeat(ctx context.Context, s *suite) error {
	limit := Heartbeat * 3 / 2
	es, _ := s.records.await(ctx, time.Now().Add(3*limit), s.gone, func(es []recordEntry) bool {
		return len(es) >= 3
	})
	var p problems
	var puts []recordEntry
	for i, e := range es {
		if e.op != jetstream.KeyValuePut {
			p.add("the record was removed (%s) before the agent was stopped, after %d puts", opName(e.op), i)
			break
		}
		if _, err := registry.DecodeRecord(e.value); err != nil {
			p.add("put %d does not decode: %v", i+1, err)
		}
		puts = append(puts, e)
	}
	if len(puts) < 3 {
		p.add("only %d puts of the record, the last %v ago (want one every heartbeat_ms, %v)", len(puts), lastAge(puts), Heartbeat)
		return p.err()
	}
	gaps := make([]time.Duration, len(puts)-1)
	onTime := false
	for i := range gaps {
		gaps[i] = puts[i+1].at.Sub(puts[i].at)
		onTime = onTime || i > 0 && gaps[i-1] <= limit && gaps[i] <= limit
	}
	if !onTime {
		shown := make([]string, len(gaps))
		for i, g := range gaps {
			shown[i] = round(g).String()
		}
		p.add("no two gaps in a row between puts are within %v (1.5 × heartbeat_ms); the gaps were %s (server timestamps)",
			limit, strings.Join(shown, ", "))
	}
	return p.err()
}

func lastAge(puts []recordEntry) time.Duration {
	if len(puts) == 0 {
		return 0
	}
	return round(time.Since(puts[len(puts)-1].at))
}

// drainTasks is how many conformance.slow tasks are in flight when the
// drain rule stops the agent (fewer when max_concurrent is smaller), and
// drainTaskMS how long each takes.
const (
	drainTasks  = 3
	drainTaskMS = 1500
)

// checkDrain stops the agent with tasks in flight: the record turns
// draining, a delivery that arrives meanwhile is answered (or finds no
// subscriber), every task finishes, the key is deleted and the agent exits
// cleanly.
func checkDrain(ctx context.Context, s *suite) error {
	n := min(drainTasks, s.rec.MaxConcurrent)
	body := mustEncode(streams.ContentTypeJSON, slowInput{MS: drainTaskMS})
	tasks := make([]*direct, 0, n)
	defer func() {
		for _, d := range tasks {
			d.close()
		}
	}()
	for range n {
		d, err := s.deliver(capSlow, streams.ContentTypeJSON, body)
		if err != nil {
			return err
		}
		tasks = append(tasks, d)
	}
	for i, d := range tasks { // in flight: ACKED, or not answered yet (rule ack judges a missing ACK)
		if r, ok := d.next(ctx, d.sent.Add(ackWithin)); ok && r.terminal() {
			return fmt.Errorf("task %d of %d (%s {\"ms\": %d}) was answered before the stop: saw %s, want it in flight",
				i+1, n, capSlow, drainTaskMS, d.seen())
		}
	}
	before := len(s.records.snapshot())
	stop := time.Now()
	stopped := s.beginStop()
	deadline := stop.Add(drainTaskMS*time.Millisecond + slack)
	var p problems

	es, ok := s.records.await(ctx, stop.Add(answerWithin), nil, func(es []recordEntry) bool {
		return draining(es[before:]) >= 0
	})
	if !ok {
		p.add("no put with \"status\": \"draining\" within %v of SIGTERM (protocol: put draining first, so dispatchers stop routing here); saw %s",
			answerWithin, describe(es[before:]))
	} else if err := s.lateDelivery(ctx); err != nil {
		p.add("%v", err)
	}

	for i, d := range tasks {
		r, ok := d.final(ctx, deadline)
		switch {
		case !ok:
			p.add("task %d of %d got no result within %v of SIGTERM (protocol: finish your work before leaving); saw %s", i+1, n, deadline.Sub(stop), d.seen())
		case !r.is(streams.StatusFinished):
			p.add("task %d of %d ended %s (%s), want FINISHED", i+1, n, r.status(), errorOf(r))
		default:
			if err := checkSlept(r, drainTaskMS); err != nil {
				p.add("task %d of %d: %v", i+1, n, err)
			}
		}
	}

	es, ok = s.records.await(ctx, deadline, nil, func(es []recordEntry) bool {
		return removal(es[before:]) != nil
	})
	switch gone := removal(es[before:]); {
	case !ok:
		p.add("the key was still there %v after SIGTERM (protocol: delete your key when the work is done; left alone it lingers for the TTL, %v); saw %s",
			deadline.Sub(stop), 3*Heartbeat, describe(es[before:]))
	case gone.op != jetstream.KeyValueDelete:
		p.add("the key was removed by a purge or by expiry (the TTL), not deleted; saw %s", describe(es[before:]))
	}

	if err := <-stopped; err != nil {
		p.add("Stop: %v (want exit status 0 once drained)", err)
	}
	return p.err()
}

// draining returns the index of the first put of a draining record in es,
// or -1.
func draining(es []recordEntry) int {
	for i, e := range es {
		if e.op != jetstream.KeyValuePut {
			continue
		}
		if rec, err := registry.DecodeRecord(e.value); err == nil && rec.Status == registry.StatusDraining {
			return i
		}
	}
	return -1
}

// removal returns the first delete, purge or expiry in es, or nil.
func removal(es []recordEntry) *recordEntry {
	for i := range es {
		if es[i].op != jetstream.KeyValuePut {
			return &es[i]
		}
	}
	return nil
}

// lateDelivery sends an echo to a draining agent: it must be served or
// answered TARGET_BUSY, or find no subscriber (then a dispatcher goes
// elsewhere at once) — never go unanswered.
func (s *suite) lateDelivery(ctx context.Context) error {
	d, err := s.deliver(capEcho, streams.ContentTypeJSON, echoJSON)
	if err != nil {
		return err
	}
	defer d.close()
	r, ok := d.final(ctx, d.sent.Add(answerWithin))
	switch {
	case !ok:
		return fmt.Errorf("a delivery sent while draining got no answer within %v: it was dropped (want it served, or TARGET_BUSY); saw %s", answerWithin, d.seen())
	case r.is(streams.StatusFinished), r.status() == "no responders",
		r.is(streams.StatusFailed) && r.msg.Header.Get(streams.HeaderError) == string(streams.CodeTargetBusy):
		return nil
	}
	return fmt.Errorf("a delivery sent while draining was answered %s (%s), want FINISHED or TARGET_BUSY", r.status(), errorOf(r))
}
