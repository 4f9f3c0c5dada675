// Package console is the server side of the dashboard's operator console:
// the dead letters and review entries, browsed and acted on (replay, drop,
// resolve) by an identity the ACL allows; the policy and the capability
// declarations, viewed, validated and changed by an operator, validated as
// strictly as the CLI does; and the catalog by capability type under the
// taxonomy's governance. Each action is recorded with who did it. The
// gateway mounts its routes (Routes) beside its own.
package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/streams"
)

// Identity is who sends a request: a bearer token's identity, and whether
// it is an operator's (role dispatcher, the identities the admin commands
// take).
type Identity struct {
	Name     string `json:"name"`
	Operator bool   `json:"operator"`
}

// Authority is the console's side of auth (auth.Authorizer through a
// small adapter): who a request's bearer token proves, and what the ACL
// lets an identity call.
type Authority interface {
	Identify(r *http.Request) (Identity, *streams.Error)
	MayCall(name, capability string) bool
}

// Config configures a Console.
type Config struct {
	JS       jetstream.JetStream
	Subjects streams.Subjects
	// Auth, when set (auth on), identifies every request and authorizes
	// every action; nil is auth off.
	Auth Authority
	// Admin turns the actions on without auth (--http-admin): anyone who
	// reaches the port may replay and drop. Ignored with Auth set.
	Admin bool
	// ReplaySign signs a replayed task as its caller (auth on: the
	// dispatcher's auth.Authorizer.SignReplay); nil sends it unsigned.
	ReplaySign func(*nats.Msg) error
	// Stats is the aggregate of REACH_EVENTS the topology is drawn from;
	// nil: no topology (404).
	Stats *eventstats.Aggregator
	// Instances lists the agent instances in the registry now.
	Instances func() []Instance
	Log       zerolog.Logger
}

// Console serves the console's routes. Its methods are safe for
// concurrent use.
type Console struct {
	cfg Config

	mu       sync.Mutex
	actions  []Action // the latest, newest last
	listings map[string]listing
}

// New returns a console over cfg.
func New(cfg Config) *Console { return &Console{cfg: cfg, listings: make(map[string]listing)} }

// Route is one route of the console: its method, its path pattern
// (net/http's) and its handler.
type Route struct {
	Method, Path string
	Handler      http.HandlerFunc
}

// Routes returns the console's routes for the gateway's mux.
func (c *Console) Routes() []Route {
	return []Route{
		{http.MethodGet, "/v1/console/whoami", c.whoami},
		{http.MethodGet, "/v1/console/parked/{stream}", c.list},
		{http.MethodPost, "/v1/console/parked/{stream}/{seq}/{action}", c.act},
		{http.MethodGet, "/v1/console/actions", c.recent},
		{http.MethodGet, "/v1/console/topology", c.topology},
		{http.MethodGet, "/v1/console/runs", c.runs},
		{http.MethodGet, "/v1/console/runs/{id}", c.run},
		{http.MethodGet, "/v1/console/policy", c.policyList},
		{http.MethodPost, "/v1/console/policy/{key}", c.policyPut},
		{http.MethodGet, "/v1/console/catalog", c.catalog},
		{http.MethodPost, "/v1/console/caps/{type}", c.capsPut},
	}
}

// The streams and actions of the routes.
const (
	StreamDLQ    = "dlq"    // REACH_DLQ
	StreamReview = "review" // REACH_REVIEW

	ActionReplay = "replay" // a dead letter: resubmit it
	ActionRerun  = "rerun"  // a review entry: resolve it by resubmitting
	ActionDrop   = "drop"   // either: delete it (a review entry: resolved dropped)
)

// HeaderConsole must be "1" on an action: a cross-site form cannot send
// it, and a cross-site script cannot without a CORS preflight, which the
// gateway does not answer.
const HeaderConsole = "X-Reach-Console"

// PreviewBytes bounds an entry's payload preview.
const PreviewBytes = 512

// listed bounds how many entries a listing returns (the newest).
const listed = 200

// Target is what an action names: a stream, an entry's sequence and the
// action.
type Target struct {
	Stream string // StreamDLQ or StreamReview
	Name   string // REACH_DLQ or REACH_REVIEW
	Seq    uint64
	Action string
}

// ParseTarget reads an action's path values, or says which is wrong
// (BAD_REQUEST); action "" reads only the stream.
func ParseTarget(stream, seq, action string) (Target, *streams.Error) {
	t := Target{Stream: stream, Action: action}
	switch stream {
	case StreamDLQ:
		t.Name = streams.StreamDLQ
	case StreamReview:
		t.Name = streams.StreamReview
	default:
		return t, streams.NewError(streams.CodeBadRequest, "stream %q: want %s or %s", clip(stream), StreamDLQ, StreamReview)
	}
	if action == "" && seq == "" {
		return t, nil
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || n == 0 {
		return t, streams.NewError(streams.CodeBadRequest, "seq %q: want the entry's stream sequence, a positive integer", clip(seq))
	}
	t.Seq = n
	switch {
	case action == ActionDrop,
		action == ActionReplay && stream == StreamDLQ,
		action == ActionRerun && stream == StreamReview:
		return t, nil
	case stream == StreamDLQ:
		return t, streams.NewError(streams.CodeBadRequest, "action %q on a dead letter: want %s or %s", clip(action), ActionReplay, ActionDrop)
	}
	return t, streams.NewError(streams.CodeBadRequest, "action %q on a review entry: want %s or %s", clip(action), ActionRerun, ActionDrop)
}

// clip shortens an echoed input.
func clip(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// Entry is a parked task as the console lists it.
type Entry struct {
	Seq        uint64    `json:"seq"`
	Capability string    `json:"capability"`
	RequestID  string    `json:"request_id"`
	Caller     string    `json:"caller,omitempty"` // Reach-Source
	Reason     string    `json:"reason"`
	Code       string    `json:"code"`
	LastError  string    `json:"last_error"`
	Attempts   int       `json:"attempts"`
	Count      int       `json:"count"`
	Time       time.Time `json:"time"`
	Size       int       `json:"size"`
	// Preview is the payload's first PreviewBytes as text ("" when it is
	// binary: Binary); withheld from an identity that may not act on it.
	Preview  string `json:"preview,omitempty"`
	Binary   bool   `json:"binary,omitempty"`
	Withheld bool   `json:"withheld,omitempty"`
	// Allowed says whether the requester may act on it, and if not why.
	Allowed bool   `json:"allowed"`
	Refusal string `json:"refusal,omitempty"`
}

// Listing is the answer of GET /v1/console/parked/{stream}.
type Listing struct {
	Stream  string  `json:"stream"`
	Total   int     `json:"total"`
	Entries []Entry `json:"entries"` // the newest, newest first
}

// Action is one action done through the console: on a parked entry
// (Seq, Capability, RequestID), or a write of a policy key or a
// declaration (Stream StreamPolicy or StreamCaps; Key, Revision).
type Action struct {
	Time       time.Time `json:"time"`
	By         string    `json:"by"`
	Stream     string    `json:"stream"`
	Seq        uint64    `json:"seq,omitempty"`
	Action     string    `json:"action"`
	Capability string    `json:"capability,omitempty"`
	RequestID  string    `json:"request_id,omitempty"`
	Key        string    `json:"key,omitempty"`
	Revision   uint64    `json:"revision,omitempty"`
}

// actionsKept bounds the recent actions GET /v1/console/actions lists.
const actionsKept = 50

// Whoami is the answer of GET /v1/console/whoami.
type Whoami struct {
	Auth     bool      `json:"auth"`
	Identity *Identity `json:"identity,omitempty"`
	// Actions says whether this requester may act at all, and if not why.
	Actions bool   `json:"actions"`
	Reason  string `json:"reason,omitempty"`
}

// who identifies r's sender: nil identity with auth off.
func (c *Console) who(r *http.Request) (*Identity, *streams.Error) {
	if c.cfg.Auth == nil {
		return nil, nil
	}
	id, e := c.cfg.Auth.Identify(r)
	if e != nil {
		return nil, e
	}
	return &id, nil
}

// offReason is why actions are off, "" when they are on for id.
func (c *Console) offReason(id *Identity) string {
	if c.cfg.Auth == nil && !c.cfg.Admin {
		return "actions are off: auth is off and the dispatcher was not started with --http-admin"
	}
	return ""
}

// may says whether id may act on p, and if not why.
func (c *Console) may(id *Identity, p *durable.Parked) (bool, string) {
	if r := c.offReason(id); r != "" {
		return false, r
	}
	if id == nil || id.Operator {
		return true, ""
	}
	caller := p.Header.Get(streams.HeaderSource)
	switch {
	case caller != id.Name:
		return false, fmt.Sprintf("%s may act only on its own tasks (this is %s's); an operator identity (role dispatcher) may act on any", id.Name, orNone(caller))
	case !c.cfg.Auth.MayCall(id.Name, p.Capability):
		return false, fmt.Sprintf("the ACL does not let %s call %s", id.Name, p.Capability)
	}
	return true, ""
}

func orNone(s string) string {
	if s == "" {
		return "no caller"
	}
	return s
}

func (c *Console) whoami(w http.ResponseWriter, r *http.Request) {
	id, e := c.who(r)
	if e != nil {
		writeError(w, r, e)
		return
	}
	reason := c.offReason(id)
	writeJSON(w, http.StatusOK, Whoami{Auth: c.cfg.Auth != nil, Identity: id, Actions: reason == "", Reason: reason})
}

func (c *Console) list(w http.ResponseWriter, r *http.Request) {
	t, e := ParseTarget(r.PathValue("stream"), "", "")
	if e != nil {
		writeError(w, r, e)
		return
	}
	id, e := c.who(r)
	if e != nil {
		writeError(w, r, e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	total, newest, err := c.newest(ctx, t.Name)
	if err != nil {
		writeError(w, r, streams.NewError(streams.CodeInternal, "list %s: %v", t.Name, err))
		return
	}
	out := Listing{Stream: t.Stream, Total: total, Entries: []Entry{}}
	for i := range newest {
		out.Entries = append(out.Entries, c.entry(id, &newest[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// newest returns how many entries stream holds and the newest of them
// (up to listed, newest first), read by sequence from the stream's end
// (no consumer: the page polls). The listing is kept while the stream's
// state (first and last sequence, count) stays the same.
func (c *Console) newest(ctx context.Context, stream string) (int, []durable.Parked, error) {
	s, err := c.cfg.JS.Stream(ctx, stream)
	if err != nil {
		return 0, nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, nil, err
	}
	st := info.State
	key := fmt.Sprintf("%d-%d-%d", st.FirstSeq, st.LastSeq, st.Msgs)
	c.mu.Lock()
	if l, ok := c.listings[stream]; ok && l.key == key {
		c.mu.Unlock()
		return int(st.Msgs), l.entries, nil
	}
	c.mu.Unlock()
	var out []durable.Parked
	for seq, scanned := st.LastSeq, 0; seq >= st.FirstSeq && seq > 0 && len(out) < listed && uint64(len(out)) < st.Msgs && scanned < maxScan; seq, scanned = seq-1, scanned+1 {
		p, err := durable.GetParked(ctx, c.cfg.JS, c.cfg.Subjects, stream, seq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			continue // deleted: replayed, dropped, resolved
		case err != nil:
			return 0, nil, err
		}
		out = append(out, trimmed(p))
	}
	c.mu.Lock()
	c.listings[stream] = listing{key: key, entries: out}
	c.mu.Unlock()
	return int(st.Msgs), out, nil
}

// sizeKey is where a trimmed entry keeps its payload's size (a key no
// NATS header can have: it holds a space).
const sizeKey = "console size"

// trimmed keeps of p's payload what a preview shows (the listing is
// cached), and its size under sizeKey.
func trimmed(p durable.Parked) durable.Parked {
	h := nats.Header{}
	for k, v := range p.Header {
		h[k] = v
	}
	h[sizeKey] = []string{strconv.Itoa(len(p.Data))}
	p.Header = h
	if len(p.Data) > PreviewBytes+utf8.UTFMax {
		p.Data = p.Data[:PreviewBytes+utf8.UTFMax]
	}
	return p
}

// sizeOf is the size of p's payload before trimmed.
func sizeOf(p *durable.Parked) int {
	if v := p.Header[sizeKey]; len(v) == 1 {
		if n, err := strconv.Atoi(v[0]); err == nil {
			return n
		}
	}
	return len(p.Data)
}

// maxScan bounds the sequences one listing reads (deleted ones included).
const maxScan = 5000

// listing is a stream's newest entries at one state of the stream.
type listing struct {
	key     string
	entries []durable.Parked
}

func (c *Console) entry(id *Identity, p *durable.Parked) Entry {
	e := Entry{Seq: p.Seq, Capability: p.Capability, RequestID: p.RequestID, Caller: p.Header.Get(streams.HeaderSource),
		Reason: p.Reason, Code: p.Code, LastError: p.LastError, Attempts: p.Attempts, Count: p.Count, Time: p.Time.UTC(),
		Size: sizeOf(p)}
	e.Allowed, e.Refusal = c.may(id, p)
	// The payload is its caller's: shown to whoever may act on it, or to
	// all with auth off.
	if id != nil && !id.Operator && e.Caller != id.Name {
		e.Withheld = true
		return e
	}
	e.Preview, e.Binary = Preview(p.Data)
	if e.Size > len(p.Data) && !e.Binary && !strings.HasSuffix(e.Preview, "…") {
		e.Preview += "…"
	}
	return e
}

// Preview returns data's first PreviewBytes as text, cut on a rune
// boundary, or binary when it is not UTF-8 text.
func Preview(data []byte) (string, bool) {
	cut := data
	if len(cut) > PreviewBytes {
		cut = cut[:PreviewBytes]
		for len(cut) > 0 && !utf8.RuneStart(data[len(cut)]) {
			cut = cut[:len(cut)-1]
		}
	}
	if !utf8.Valid(cut) {
		return "", true
	}
	s := string(cut)
	if len(cut) < len(data) {
		s += "…"
	}
	return s, false
}

func (c *Console) act(w http.ResponseWriter, r *http.Request) {
	t, e := ParseTarget(r.PathValue("stream"), r.PathValue("seq"), r.PathValue("action"))
	if e != nil {
		writeError(w, r, e)
		return
	}
	if r.Header.Get(HeaderConsole) != "1" {
		// A form on another site can POST here (a simple request, no
		// preflight) but cannot set this header: no cross-site action.
		writeJSON(w, http.StatusForbidden, streams.NewError(streams.CodeUnauthorized,
			"an action needs the header %s: 1 (the page sends it; a form on another site cannot)", HeaderConsole))
		return
	}
	id, e := c.who(r)
	if e != nil {
		writeError(w, r, e)
		return
	}
	if reason := c.offReason(id); reason != "" {
		writeJSON(w, http.StatusForbidden, streams.NewError(streams.CodeUnauthorized, "%s", reason))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	p, err := durable.GetParked(ctx, c.cfg.JS, c.cfg.Subjects, t.Name, t.Seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		writeError(w, r, streams.NewError(CodeNotFound, "%s holds no entry %d (acted on already?)", t.Name, t.Seq))
		return
	case err != nil:
		writeError(w, r, streams.NewError(streams.CodeInternal, "read %s %d: %v", t.Name, t.Seq, err))
		return
	}
	if ok, why := c.may(id, &p); !ok {
		c.cfg.Log.Warn().Str("by", by(id)).Str("stream", t.Name).Uint64("seq", t.Seq).Str("action", t.Action).Str("reason", why).Msg("console action refused")
		writeError(w, r, streams.NewError(streams.CodeUnauthorized, "%s", why))
		return
	}
	if err := c.do(ctx, t, p, by(id)); err != nil {
		writeError(w, r, streams.NewError(streams.CodeInternal, "%s %s %d: %v", t.Action, t.Name, t.Seq, err))
		return
	}
	a := Action{Time: time.Now().UTC(), By: by(id), Stream: t.Stream, Seq: t.Seq, Action: t.Action, Capability: p.Capability, RequestID: p.RequestID}
	c.record(a)
	writeJSON(w, http.StatusOK, a)
}

// by names who acts: the identity, or the anonymous admin of --http-admin.
func by(id *Identity) string {
	if id == nil {
		return "http-admin"
	}
	return id.Name
}

// do carries the action out, as the CLI's dlq and review commands do.
func (c *Console) do(ctx context.Context, t Target, p durable.Parked, who string) error {
	if t.Stream == StreamReview {
		outcome := events.OutcomeReviewDrop
		if t.Action == ActionRerun {
			outcome = events.OutcomeReviewRerun
		}
		if err := durable.RecordResolution(ctx, c.cfg.JS, c.cfg.Subjects, p, outcome, who); err != nil {
			return err
		}
	}
	if t.Action == ActionDrop {
		return durable.DeleteParked(ctx, c.cfg.JS, t.Name, t.Seq)
	}
	if key := p.Header.Get(streams.HeaderIdempotencyKey); key != "" && t.Stream == StreamReview {
		kv, err := c.cfg.JS.KeyValue(ctx, streams.BucketIdempotency)
		if err == nil {
			err = kv.Delete(ctx, streams.IdempotencyKey(p.Capability, p.Header.Get(streams.HeaderSource), key))
		}
		if err != nil {
			return fmt.Errorf("the idempotency claim was not deleted, so nothing was resubmitted: %w", err)
		}
	}
	var opts []durable.ReplayOption
	if c.cfg.ReplaySign != nil {
		opts = append(opts, durable.ReplaySign(c.cfg.ReplaySign))
	}
	return durable.Replay(ctx, c.cfg.JS, c.cfg.Subjects, p, time.Time{}, opts...)
}

// record keeps a among the recent actions and logs it.
func (c *Console) record(a Action) {
	ev := c.cfg.Log.Info().Str("by", a.By).Str("stream", a.Stream).Str("action", a.Action)
	if a.Key != "" {
		ev = ev.Str("key", a.Key).Uint64("revision", a.Revision)
	} else {
		ev = ev.Uint64("seq", a.Seq).Str("capability", a.Capability).Str("request_id", a.RequestID)
	}
	ev.Msg("console action")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.actions = append(c.actions, a)
	if len(c.actions) > actionsKept {
		c.actions = c.actions[len(c.actions)-actionsKept:]
	}
}

func (c *Console) recent(w http.ResponseWriter, r *http.Request) {
	if _, e := c.who(r); e != nil {
		writeError(w, r, e)
		return
	}
	c.mu.Lock()
	out := make([]Action, 0, len(c.actions))
	for i := len(c.actions) - 1; i >= 0; i-- {
		out = append(out, c.actions[i])
	}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// CodeNotFound is the gateway's code for what is not there.
const CodeNotFound streams.Code = "NOT_FOUND"

// writeError answers e as {"code","message"}: 400 BAD_REQUEST, 401
// UNAUTHORIZED without credentials (403 with), 404 NOT_FOUND, 409
// CONFLICT, 500 else.
func writeError(w http.ResponseWriter, r *http.Request, e *streams.Error) {
	status := http.StatusInternalServerError
	switch e.Code {
	case streams.CodeBadRequest:
		status = http.StatusBadRequest
	case streams.CodeUnauthorized:
		status = http.StatusForbidden
		if r.Header.Get("Authorization") == "" {
			status = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentreach"`)
		}
	case CodeNotFound:
		status = http.StatusNotFound
	case CodeConflict:
		status = http.StatusConflict
	}
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"INTERNAL","message":"response not encodable"}`)
	}
	w.Header().Set("Content-Type", streams.ContentTypeJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
