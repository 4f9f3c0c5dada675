// Command rawagent is an Agent-Reach agent that speaks the wire protocol
// itself, on plain nats.go, written from docs/protocol.md alone: it imports
// no package of this module (TestImports makes sure). It serves the
// capabilities of docs/conformance.md and passes
// `agentreach conformance -- rawagent`, which shows that the protocol page is
// enough to write an agent in any language with a NATS client.
//
// Everything an SDK would hide is here, one function per step: the record
// and its heartbeat on a connection of their own, ACKED / PROCESSING /
// result, slots and TARGET_BUSY, answering the caller directly when a
// delivery offers it, idempotency keys in REACH_IDEMPOTENCY, and the drain
// on SIGTERM.
//
// It reads AGENTREACH_SERVER (the NATS URL, default nats://127.0.0.1:4222),
// AGENTREACH_AGENT_ID (its instance id, default rawagent-<random>) and,
// where auth is on, AGENTREACH_CREDS: its identity's credentials file (as
// `agentreach conformance --auth` sets it). With it, both connections
// present the credentials and read replies under the identity's inbox
// prefix, _INBOX.<id>, the only one it may subscribe to.
//
//	go build -o rawagent ./examples/rawagent && agentreach conformance -- ./rawagent
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

// The agent.
const (
	agentType     = "conformance"
	agentVersion  = "1.0.0"
	maxConcurrent = 4
	// drainTimeout bounds how long a drain waits for the tasks in flight.
	drainTimeout = 30 * time.Second
	// startTimeout bounds connecting, opening the buckets and registering.
	startTimeout = 10 * time.Second
	// defaultDeadline is a task's deadline when its delivery has no
	// Reach-Deadline.
	defaultDeadline = 60 * time.Second
	// probeWait bounds the wait for the probe that tells whether this
	// connection may publish to inboxes.
	probeWait = 100 * time.Millisecond
)

// The wire names of docs/protocol.md.
const (
	subjectPrefix = "reach"
	bucketAgents  = "REACH_AGENTS"
	bucketOutcome = "REACH_IDEMPOTENCY"

	ctJSON    = "application/json"
	ctMsgpack = "application/msgpack"

	hStatus          = "Reach-Status"
	hError           = "Reach-Error"
	hCapability      = "Reach-Capability"
	hRequestID       = "Reach-Request-Id"
	hOrchestrationID = "Reach-Orchestration-Id"
	hAttempt         = "Reach-Attempt"
	hDeadline        = "Reach-Deadline"
	hNode            = "Reach-Node"
	hActive          = "Reach-Active"
	hReplyTo         = "Reach-Reply-To"
	hDirect          = "Reach-Direct"
	hIdempotencyKey  = "Reach-Idempotency-Key"
	hSource          = "Reach-Source"
	hReplayed        = "Reach-Replayed"
	hInDoubt         = "Reach-In-Doubt"
	hContentType     = "Content-Type"
	hStream          = "Reach-Stream"
	hSeq             = "Reach-Seq"
	hChunks          = "Reach-Chunks"
)

// handlers serve the capabilities; each runs on a goroutine of its own and
// holds one slot until it answers.
var handlers = map[string]func(*task){
	"conformance.echo":   echo,
	"conformance.reject": reject,
	"conformance.slow":   slow,
	"conformance.busy":   busy,
	"conformance.write":  write,
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("rawagent: ")
	if err := run(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run() error {
	server := os.Getenv("AGENTREACH_SERVER")
	if server == "" {
		server = nats.DefaultURL
	}
	id := os.Getenv("AGENTREACH_AGENT_ID")
	if id == "" {
		id = "rawagent-" + strings.ToLower(rand.Text()[:10])
	}
	if !validID(id) {
		return fmt.Errorf("AGENTREACH_AGENT_ID %q: an instance id is 1 to 128 letters, digits, '_' and '-', starting with a letter or digit", id)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	a, err := newAgent(server, id, os.Getenv("AGENTREACH_CREDS"))
	if err != nil {
		return err
	}
	if err := a.serve(); err != nil {
		a.close()
		return err
	}
	log.Printf("%s serves %v (max_concurrent %d, heartbeat %v)", id, capabilities(), maxConcurrent, a.heartbeat)
	<-ctx.Done()
	log.Printf("%s draining", id)
	if err := a.drain(); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	log.Printf("%s drained", id)
	return nil
}

// validID reports whether id can be an instance id: one subject token and
// one KV key.
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// capabilities lists the capabilities served, sorted.
func capabilities() []string {
	caps := make([]string, 0, len(handlers))
	for c := range handlers {
		caps = append(caps, c)
	}
	slices.Sort(caps)
	return caps
}

// agent is one running instance.
type agent struct {
	id        string
	nc        *nats.Conn         // deliveries and replies
	hc        *nats.Conn         // heartbeats, so that they never queue behind work
	records   jetstream.KeyValue // REACH_AGENTS, on hc
	outcomes  jetstream.KeyValue // REACH_IDEMPOTENCY, on nc
	heartbeat time.Duration      // the bucket's TTL / 3
	// inbox is the inbox prefix this connection may publish to (the probe
	// arrived), "" when it may not: then results never go to callers
	// directly.
	inbox string
	// identity: it connected with an identity's credentials, which may
	// publish to no inbox (not even its own), so it skips the probe.
	identity bool
	// publish sends every reply: nc.PublishMsg.
	publish func(*nats.Msg) error
	slots   chan struct{} // one per task running
	quit    chan struct{} // closed on a hard stop: running tasks give up

	mu         sync.Mutex
	draining   bool
	tasks      sync.WaitGroup // Add only under mu and while not draining
	executions map[string]int // conformance.write executions per idempotency key

	putMu    sync.Mutex // one put of the record at a time, so "draining" is never overwritten
	sub      *nats.Subscription
	beating  bool
	beatStop chan struct{}
	beatDone chan struct{}
	stopBeat sync.Once
	closing  sync.Once
}

// newAgent connects twice, with the credentials in creds unless it is
// empty, and opens the buckets; the heartbeat is the REACH_AGENTS TTL / 3,
// the interval it was provisioned for.
func newAgent(server, id, creds string) (*agent, error) {
	var opts []nats.Option
	if creds != "" {
		// An identity subscribes only under its own inbox prefix.
		opts = append(opts, nats.UserCredentials(creds), nats.CustomInboxPrefix("_INBOX."+id))
	}
	nc, err := nats.Connect(server, append(opts, nats.Name("rawagent "+id))...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s (AGENTREACH_SERVER): %w", server, err)
	}
	hc, err := nats.Connect(server, append(opts, nats.Name("rawagent "+id+" heartbeat"))...)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("connect to %s (AGENTREACH_SERVER): %w", server, err)
	}
	a := &agent{
		id: id, nc: nc, hc: hc, publish: nc.PublishMsg, identity: creds != "",
		slots: make(chan struct{}, maxConcurrent), quit: make(chan struct{}),
		executions: make(map[string]int), beatStop: make(chan struct{}), beatDone: make(chan struct{}),
	}
	if err := a.open(); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *agent) open() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	hjs, err := jetstream.New(a.hc)
	if err != nil {
		return err
	}
	if a.records, err = hjs.KeyValue(ctx, bucketAgents); err != nil {
		return fmt.Errorf("open the %s bucket (is the topology provisioned?): %w", bucketAgents, err)
	}
	st, err := a.records.Status(ctx)
	if err != nil {
		return fmt.Errorf("read the %s TTL: %w", bucketAgents, err)
	}
	if st.TTL() <= 0 {
		return fmt.Errorf("the %s bucket has no TTL, so there is no heartbeat to keep", bucketAgents)
	}
	a.heartbeat = st.TTL() / 3
	wjs, err := jetstream.New(a.nc)
	if err != nil {
		return err
	}
	if a.outcomes, err = wjs.KeyValue(ctx, bucketOutcome); err != nil {
		return fmt.Errorf("open the %s bucket: %w", bucketOutcome, err)
	}
	return nil
}

// serve subscribes, then registers: the server has the subscription before
// the record can lead any dispatcher here.
func (a *agent) serve() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if !a.identity {
		a.inbox = directPrefix(a.nc)
	}
	sub, err := a.nc.Subscribe(subjectPrefix+".agent."+a.id, a.deliver)
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	a.sub = sub
	if err := a.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	if err := a.put(ctx); err != nil {
		return fmt.Errorf("register in %s: %w", bucketAgents, err)
	}
	a.beating = true
	go a.beat()
	return nil
}

// directPrefix returns the prefix of this connection's inboxes when it may
// publish to them, found by publishing to one of its own, or "" when the
// probe does not arrive (the server lets it answer only what it receives).
func directPrefix(nc *nats.Conn) string {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return ""
	}
	defer func() { _ = sub.Unsubscribe() }()
	if nc.Publish(inbox, nil) != nil || nc.Flush() != nil {
		return ""
	}
	if _, err := sub.NextMsg(probeWait); err != nil {
		return ""
	}
	return inbox[:strings.LastIndexByte(inbox, '.')+1]
}

// record is the agent record of docs/protocol.md, as JSON.
type record struct {
	ID            string   `json:"id"`
	Type          string   `json:"type"`
	Capabilities  []string `json:"capabilities"`
	MaxConcurrent int      `json:"max_concurrent"`
	Weight        int      `json:"weight"`
	Active        int      `json:"active"`
	Status        string   `json:"status"`
	TimeoutHintMS int64    `json:"timeout_hint_ms"`
	HeartbeatMS   int64    `json:"heartbeat_ms"`
	Version       string   `json:"version"`
}

// put writes the record as it is now: ready or draining, with the tasks
// running.
func (a *agent) put(ctx context.Context) error {
	a.putMu.Lock()
	defer a.putMu.Unlock()
	a.mu.Lock()
	status := "ready"
	if a.draining {
		status = "draining"
	}
	a.mu.Unlock()
	b, err := json.Marshal(record{
		ID: a.id, Type: agentType, Capabilities: capabilities(), MaxConcurrent: maxConcurrent, Weight: 100,
		Active: len(a.slots), Status: status, HeartbeatMS: a.heartbeat.Milliseconds(), Version: agentVersion,
	})
	if err != nil {
		return err
	}
	_, err = a.records.Put(ctx, a.id, b)
	return err
}

// beat puts the record every heartbeat until stopped.
func (a *agent) beat() {
	defer close(a.beatDone)
	t := time.NewTicker(a.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-a.beatStop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), a.heartbeat)
			if err := a.put(ctx); err != nil {
				log.Printf("heartbeat: %v", err)
			}
			cancel()
		}
	}
}

// deliver takes one delivery, on the subscription's goroutine: it answers
// at once what needs no work (an unknown capability, no free slot,
// draining) and starts a handler for the rest.
func (a *agent) deliver(m *nats.Msg) {
	if m.Reply == "" {
		return // a CANCEL, or anything else that wants no answer
	}
	t := newTask(a, m)
	h, ok := handlers[t.capability]
	switch {
	case !ok:
		t.fail("NO_AGENT", "agent %s does not serve capability %q", a.id, t.capability)
		return
	case t.contentType != ctJSON && t.contentType != ctMsgpack:
		t.fail("BAD_REQUEST", "unsupported content type %q (want %s or %s)", t.contentType, ctJSON, ctMsgpack)
		return
	}
	a.mu.Lock()
	if a.draining {
		a.mu.Unlock()
		t.fail("TARGET_BUSY", "agent %s is draining", a.id)
		return
	}
	select {
	case a.slots <- struct{}{}:
	default:
		a.mu.Unlock()
		t.fail("TARGET_BUSY", "agent %s has all %d slots busy", a.id, maxConcurrent)
		return
	}
	t.slot = true
	a.tasks.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.tasks.Done()
		defer t.release() // if the handler sent no answer
		h(t)
	}()
}

// drain leaves: status draining (no new tasks), every task finished and
// answered, deliveries still queued answered TARGET_BUSY, then the record
// deleted and the connections closed.
func (a *agent) drain() error {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout+startTimeout)
	defer cancel()
	a.mu.Lock()
	a.draining = true
	a.mu.Unlock()
	var errs []error
	if err := a.put(ctx); err != nil {
		errs = append(errs, fmt.Errorf("put the draining record: %w", err))
	}
	done := make(chan struct{})
	go func() {
		a.tasks.Wait()
		close(done)
	}()
	timer := time.NewTimer(drainTimeout)
	select {
	case <-done:
	case <-timer.C:
		errs = append(errs, fmt.Errorf("%d tasks still running after %v, given up", len(a.slots), drainTimeout))
		close(a.quit)
		<-done
	}
	timer.Stop()
	closed := a.sub.StatusChanged(nats.SubscriptionClosed)
	if err := a.sub.Drain(); err == nil {
		select {
		case <-closed:
		case <-ctx.Done():
		}
	}
	if err := a.nc.FlushWithContext(ctx); err != nil { // every answer is out before the record goes
		errs = append(errs, fmt.Errorf("flush the answers: %w", err))
	}
	a.endBeat()
	if err := a.records.Delete(ctx, a.id); err != nil {
		errs = append(errs, fmt.Errorf("delete the record: %w", err))
	}
	a.close()
	return errors.Join(errs...)
}

// endBeat stops the heartbeat and waits for it, once.
func (a *agent) endBeat() {
	a.stopBeat.Do(func() {
		close(a.beatStop)
		if a.beating {
			<-a.beatDone
		}
	})
}

// close stops at once: tasks give up, the heartbeat ends, the connections
// close. The record stays until it expires. Calling it again does nothing.
func (a *agent) close() {
	a.closing.Do(func() {
		select {
		case <-a.quit:
		default:
			close(a.quit)
		}
		a.endBeat()
		a.nc.Close()
		a.hc.Close()
	})
}

// task is one delivery being served.
type task struct {
	a           *agent
	m           *nats.Msg
	capability  string
	contentType string
	deadline    time.Time
	slot        bool // holds one of the agent's slots
}

func newTask(a *agent, m *nats.Msg) *task {
	t := &task{a: a, m: m, capability: m.Header.Get(hCapability), contentType: contentType(m),
		deadline: time.Now().Add(defaultDeadline)}
	if ms, err := strconv.ParseInt(m.Header.Get(hDeadline), 10, 64); err == nil && ms > 0 {
		t.deadline = time.UnixMilli(ms)
	}
	return t
}

// contentType is the delivery's Content-Type without parameters, or, when
// it has none, JSON for a body that is valid JSON (or empty) and msgpack for
// anything else.
func contentType(m *nats.Msg) string {
	if ct := m.Header.Get(hContentType); ct != "" {
		ct, _, _ = strings.Cut(ct, ";")
		return strings.ToLower(strings.TrimSpace(ct))
	}
	if b := bytes.TrimSpace(m.Data); len(b) == 0 || json.Valid(b) {
		return ctJSON
	}
	return ctMsgpack
}

// decode reads the payload into v by its content type; an empty payload
// leaves v as it is.
func (t *task) decode(v any) error {
	if len(bytes.TrimSpace(t.m.Data)) == 0 {
		return nil
	}
	if t.contentType == ctMsgpack {
		return msgpack.Unmarshal(t.m.Data, v)
	}
	return json.Unmarshal(t.m.Data, v)
}

// encode writes v in contentType.
func encode(contentType string, v any) ([]byte, error) {
	if contentType == ctMsgpack {
		return msgpack.Marshal(v)
	}
	return json.Marshal(v)
}

// reply starts a message on the delivery's reply subject.
func (t *task) reply(status string) *nats.Msg {
	m := nats.NewMsg(t.m.Reply)
	m.Header.Set(hStatus, status)
	return m
}

func (t *task) send(m *nats.Msg) error {
	err := t.a.publish(m)
	if err != nil {
		log.Printf("answer %s %s: %v", t.m.Header.Get(hRequestID), m.Header.Get(hStatus), err)
	}
	return err
}

// release gives the task's slot back, once; it happens before the final
// answer leaves, so a dispatcher that sends the next task at once finds the
// slot free.
func (t *task) release() {
	if t.slot {
		t.slot = false
		<-t.a.slots
	}
}

// ack answers ACKED, with the tasks now running.
func (t *task) ack() {
	m := t.reply("ACKED")
	m.Header.Set(hActive, strconv.Itoa(len(t.a.slots)))
	_ = t.send(m)
}

// progress answers PROCESSING, which extends the dispatcher's patience.
func (t *task) progress() { _ = t.send(t.reply("PROCESSING")) }

// result answers FINISHED with v in the request's content type.
func (t *task) result(v any) {
	b, err := encode(t.contentType, v)
	if err != nil {
		t.fail("INTERNAL", "encode the result: %v", err)
		return
	}
	t.finish(t.contentType, b)
}

// finish answers FINISHED with body; hdr are extra header pairs. When the
// delivery offers the caller's reply subject (Reach-Reply-To) under an
// inbox prefix this connection may publish to, the result goes there, with
// the delivery's ids and this node, and the delivery gets an empty FINISHED
// with Reach-Direct: 1.
func (t *task) finish(contentType string, body []byte, hdr ...string) {
	t.release()
	m := t.reply("FINISHED")
	to := t.m.Header.Get(hReplyTo)
	direct := t.a.inbox != "" && strings.HasPrefix(to, t.a.inbox)
	if direct {
		m.Subject = to
		for _, h := range []string{hRequestID, hOrchestrationID, hAttempt} {
			m.Header.Set(h, t.m.Header.Get(h))
		}
		m.Header.Set(hNode, t.a.id)
	}
	m.Header.Set(hContentType, contentType)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	m.Data = body
	if size(m) > t.a.nc.MaxPayload() {
		t.fail("PAYLOAD_TOO_LARGE", "the result of %d bytes with its headers exceeds the server's max_payload of %d", size(m), t.a.nc.MaxPayload())
		return
	}
	// The result goes first: should the agent die between the two, the
	// caller has its answer and the dispatcher merely times out.
	if err := t.send(m); err != nil || !direct {
		return
	}
	notice := t.reply("FINISHED")
	notice.Header.Set(hDirect, "1")
	_ = t.send(notice)
}

// size is what m counts against the server's max_payload: its body and
// its encoded headers.
func size(m *nats.Msg) int64 {
	n := len(m.Data) + len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return int64(n)
}

// wireError is the body of an error answer.
type wireError struct {
	Code    string `json:"code" msgpack:"code"`
	Message string `json:"message" msgpack:"message"`
}

// fail answers FAILED (TIMEOUT for the code TIMEOUT) with code and a
// {"code","message"} body in the request's content type (JSON when that is
// not one the agent speaks).
func (t *task) fail(code, format string, args ...any) {
	t.failWith(wireError{Code: code, Message: fmt.Sprintf(format, args...)})
}

// failWith answers FAILED with e; hdr are extra header pairs.
func (t *task) failWith(e wireError, hdr ...string) {
	t.release()
	ct := t.contentType
	if ct != ctMsgpack {
		ct = ctJSON
	}
	status := "FAILED"
	if e.Code == "TIMEOUT" {
		status = "TIMEOUT"
	}
	m := t.reply(status)
	m.Header.Set(hError, e.Code)
	m.Header.Set(hContentType, ct)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	var err error
	if m.Data, err = encode(ct, e); err != nil {
		m.Data = []byte(fmt.Sprintf(`{"code":%q,"message":"encode the error"}`, e.Code))
	}
	_ = t.send(m)
}

// sleep waits d, or until the agent stops hard; it reports whether d
// passed.
func (t *task) sleep(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.a.quit:
		return false
	}
}

// echo answers the payload as it came, in its content type. A caller that
// asked for a stream (Reach-Stream: 1) gets a JSON array's elements first,
// one CHUNK each, numbered by Reach-Seq; the result then says how many
// (Reach-Chunks).
func echo(t *task) {
	var items []json.RawMessage
	if t.m.Header.Get(hStream) != "1" || t.contentType != "application/json" || json.Unmarshal(t.m.Data, &items) != nil {
		t.finish(t.contentType, t.m.Data)
		return
	}
	t.ack()
	for i, it := range items {
		m := t.reply("CHUNK")
		m.Header.Set(hRequestID, t.m.Header.Get(hRequestID))
		m.Header.Set(hSeq, strconv.Itoa(i+1))
		m.Header.Set(hContentType, t.contentType)
		m.Data = it
		if t.send(m) != nil {
			return
		}
	}
	t.finish(t.contentType, t.m.Data, hChunks, strconv.Itoa(len(items)))
}

// reject refuses every task.
func reject(t *task) { t.fail("BIZ_REJECT", "conformance.reject refuses every task") }

// slowInput is the payload of conformance.slow and conformance.busy.
type slowInput struct {
	MS      int64 `json:"ms" msgpack:"ms"`
	EveryMS int64 `json:"every_ms" msgpack:"every_ms"`
}

// input decodes a slowInput, answering BAD_REQUEST when it does not decode.
func (t *task) input() (slowInput, bool) {
	var in slowInput
	err := t.decode(&in)
	if err == nil && (in.MS < 0 || in.EveryMS < 0) {
		err = errors.New("ms and every_ms must not be negative")
	}
	if err != nil {
		t.fail("BAD_REQUEST", "%s payload: %v", t.capability, err)
		return in, false
	}
	return in, true
}

// slow works ms milliseconds, sending PROCESSING every every_ms.
func slow(t *task) {
	in, ok := t.input()
	if !ok {
		return
	}
	t.ack()
	var progress <-chan time.Time
	if in.EveryMS > 0 {
		tick := time.NewTicker(time.Duration(in.EveryMS) * time.Millisecond)
		defer tick.Stop()
		progress = tick.C
	}
	done := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
	defer done.Stop()
	for {
		select {
		case <-done.C:
			t.result(map[string]any{"slept_ms": in.MS})
			return
		case <-progress:
			t.progress()
		case <-t.a.quit:
			return
		}
	}
}

// busy holds its slot ms milliseconds.
func busy(t *task) {
	in, ok := t.input()
	if !ok {
		return
	}
	t.ack()
	if t.sleep(time.Duration(in.MS) * time.Millisecond) {
		t.result(map[string]any{})
	}
}

// write counts its executions per idempotency key; with a key it runs at
// most once per key, across retries and instances.
func write(t *task) {
	t.ack() // a duplicate may wait for another execution
	key := t.m.Header.Get(hIdempotencyKey)
	if key == "" {
		t.result(t.a.execute(key))
		return
	}
	t.idempotent(key)
}

// execute is the write's side effect: one more execution of key.
func (a *agent) execute(key string) map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.executions[key]++
	return map[string]any{"key": key, "executions": a.executions[key]}
}

// outcome is a REACH_IDEMPOTENCY record: msgpack {state, owner,
// request_id, content_type, data, error, cost}, first the claim (pending),
// then what to replay (done).
type outcome struct {
	State       string     `msgpack:"state"`
	Owner       string     `msgpack:"owner"`
	RequestID   string     `msgpack:"request_id"`
	ContentType string     `msgpack:"content_type,omitempty"`
	Data        []byte     `msgpack:"data,omitempty"`
	Error       *wireError `msgpack:"error,omitempty"`
	Cost        string     `msgpack:"cost,omitempty"`
}

// errInDoubt: the instance that claimed a key left before storing its
// outcome, so the side effect may or may not have happened.
var errInDoubt = errors.New("outcome in doubt")

// idempotent runs the write for key at most once: claim the key with a KV
// create, execute, store the outcome, then answer; a key claimed already is
// waited for and its outcome replayed.
func (t *task) idempotent(key string) {
	ctx, cancel := context.WithDeadline(context.Background(), t.deadline)
	defer cancel()
	bucketKey := idempotencyKey(t.capability, t.m.Header.Get(hSource), key)
	requestID := t.m.Header.Get(hRequestID)
	claim, err := msgpack.Marshal(outcome{State: "pending", Owner: t.a.id, RequestID: requestID})
	if err != nil {
		t.fail("INTERNAL", "encode the claim: %v", err)
		return
	}
	for {
		_, err := t.a.outcomes.Create(ctx, bucketKey, claim)
		if err == nil {
			t.executeOnce(ctx, bucketKey, key, requestID)
			return
		}
		if !errors.Is(err, jetstream.ErrKeyExists) { // nothing ran; another attempt may do better
			t.fail("TARGET_BUSY", "idempotency key %q: claim: %v", key, err)
			return
		}
		stored, err := t.awaitOutcome(ctx, bucketKey)
		switch {
		case errors.Is(err, errInDoubt):
			t.failWith(wireError{Code: "INTERNAL", Message: fmt.Sprintf("idempotency key %q: %v", key, err)}, hInDoubt, "true")
			return
		case err != nil:
			t.fail("TIMEOUT", "waiting for another execution of idempotency key %q: %v", key, err)
			return
		case stored != nil:
			t.replay(stored)
			return
		}
		// The claim was given back without an outcome: claim it again.
	}
}

// executeOnce executes a claimed key and stores its outcome before it
// answers, so a retry after a lost answer replays it.
func (t *task) executeOnce(ctx context.Context, bucketKey, key, requestID string) {
	body, err := encode(t.contentType, t.a.execute(key))
	if err != nil {
		_ = t.a.outcomes.Delete(ctx, bucketKey) // give the claim back
		t.fail("INTERNAL", "encode the result: %v", err)
		return
	}
	done, err := msgpack.Marshal(outcome{State: "done", Owner: t.a.id, RequestID: requestID, ContentType: t.contentType, Data: body})
	if err == nil {
		_, err = t.a.outcomes.Put(ctx, bucketKey, done)
	}
	if err != nil {
		log.Printf("idempotency key %q: outcome not stored: %v", key, err)
	}
	t.finish(t.contentType, body)
}

// replay answers a stored outcome.
func (t *task) replay(o *outcome) {
	if o.Error != nil {
		t.failWith(*o.Error, hReplayed, "true")
		return
	}
	t.finish(o.ContentType, o.Data, hReplayed, "true")
}

// awaitOutcome polls bucketKey (a KV get, from every 20 ms to every
// 250 ms: agents may create no consumer, so no watch) until its outcome is
// stored (returned), the claim is given back (nil, nil), its owner has left
// the registry (errInDoubt), or ctx ends. Every heartbeat it checks the
// owner and sends PROCESSING, so the dispatcher keeps waiting too.
func (t *task) awaitOutcome(ctx context.Context, bucketKey string) (*outcome, error) {
	a := t.a
	check := time.NewTicker(a.heartbeat)
	defer check.Stop()
	wait := 20 * time.Millisecond
	poll := time.NewTimer(wait)
	defer poll.Stop()
	var owner string
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-a.quit:
			return nil, errors.New("the agent stopped")
		case <-check.C:
			t.progress()
			if owner == "" || owner == a.id {
				continue
			}
			if _, err := a.records.Get(ctx, owner); errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil, fmt.Errorf("%w: instance %s left while executing it; it is not executed again", errInDoubt, owner)
			}
		case <-poll.C:
			e, err := a.outcomes.Get(ctx, bucketKey)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound): // deleted or purged: given back
				return nil, nil
			case err != nil:
				return nil, fmt.Errorf("read %s: %w", bucketKey, err)
			}
			var o outcome
			if err := msgpack.Unmarshal(e.Value(), &o); err != nil {
				return nil, fmt.Errorf("unreadable record %s: %w", bucketKey, err)
			}
			if o.State == "done" {
				return &o, nil
			}
			owner = o.Owner
			wait = min(2*wait, 250*time.Millisecond)
			poll.Reset(wait)
		}
	}
}

// idempotencyKey is the REACH_IDEMPOTENCY key of a caller's key for one
// capability: "<capability>.<caller>.<key>", the caller the delivery's
// Reach-Source or "=" without one, where a caller or key that is not 1 to
// 128 characters of [-_=a-zA-Z0-9] is replaced by "sha256-" and the hex of
// the first 16 bytes of its SHA-256.
func idempotencyKey(capability, caller, key string) string {
	if caller == "" {
		caller = "="
	}
	return capability + "." + kvToken(caller) + "." + kvToken(key)
}

func kvToken(s string) string {
	valid := s != "" && len(s) <= 128
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '=') {
			valid = false
		}
	}
	if !valid {
		sum := sha256.Sum256([]byte(s))
		return "sha256-" + hex.EncodeToString(sum[:16])
	}
	return s
}
