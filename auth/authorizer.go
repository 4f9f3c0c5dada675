package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// Defaults of AuthorizerConfig.
const (
	// DefaultMaxAge bounds how old (or how far ahead of this dispatcher's
	// clock) a direct-tier task's signature may be: replaying a captured
	// task is possible only this long.
	DefaultMaxAge = 2 * time.Minute
	// DefaultDurableMaxAge bounds a durable task's signature: a durable
	// task may wait in REACH_TASKS for a long time (a dead letter's replay
	// is signed anew), and within 24 h — REACH_IDEMPOTENCY's TTL — a
	// re-run only replays the stored outcome.
	DefaultDurableMaxAge = 24 * time.Hour
)

// AuthorizerConfig configures an Authorizer. The zero value means all
// defaults.
type AuthorizerConfig struct {
	// MaxAge bounds a direct-tier task's signature; default DefaultMaxAge.
	MaxAge time.Duration
	// DurableMaxAge bounds a durable task's; default DefaultDurableMaxAge.
	DurableMaxAge time.Duration
	// ReplayCacheSize bounds how many accepted signatures the authorizer
	// remembers to refuse their replay; default DefaultReplayCacheSize.
	// At the cap the oldest go, and signatures made before them are
	// refused: the window shortens, it does not open.
	ReplayCacheSize int
}

// AuthorizerOption configures an Authorizer.
type AuthorizerOption func(*Authorizer)

// WithAuthorizerLogger sets the logger of refusals (tasks at debug level,
// reply subjects and agent records at warn level); the default discards.
func WithAuthorizerLogger(l zerolog.Logger) AuthorizerOption {
	return func(a *Authorizer) { a.log = l }
}

// withClock makes the authorizer read time from now (tests).
func withClock(now func() time.Time) AuthorizerOption { return func(a *Authorizer) { a.now = now } }

// Authorizer is the dispatcher's access control (dispatcher.Authorizer,
// installed with dispatcher.WithAuthorizer): every task must name its
// caller and be allowed by the ACL in REACH_POLICY.
//
//   - A task that arrived over NATS (direct tier, broadcast, fan-out) or
//     through REACH_TASKS must carry Reach-Source and a Reach-Signature that
//     proves it (Signer): made with the key of that identity in the
//     directory (identity.<name> in REACH_POLICY), not revoked, over this
//     task's request id, subject, deadline, idempotency key and body,
//     within MaxAge (DurableMaxAge for durable tasks). A direct-tier task's
//     signature is removed before it is delivered: agents never see one
//     they could replay. Outside the durable tier a signature is accepted
//     once (replay.go): a copy is refused.
//   - A durable task may instead be a parked task replayed by a dispatcher
//     identity: Reach-Replayed-By names it, and its signature (over the
//     task, with the task's Reach-Source as source) proves the replay.
//   - A task from code in the dispatcher's own process (dispatcher.Call:
//     the HTTP gateway, fan-out branches, workflows) is vouched for by that
//     code: its Reach-Source is the identity it verified (a gateway sets it
//     from the bearer token and drops whatever the client sent; a fan-out
//     copies its verified parent's).
//   - Either way the ACL must grant the caller the task's capability. A
//     fan-out's request is authorized with the capability "" (its caller
//     only: its branches are tasks of their own, each checked).
//   - A task that arrived over NATS with a reply subject is answered only
//     inside its proven caller's own inbox (InboxPrefix: _INBOX.<source>.),
//     or a dispatcher identity's (the HTTP gateway's requests of a bearer
//     token's identity): a reply subject elsewhere is refused, and the
//     authorizer clears m.Reply so that not even the refusal is published
//     there; the refusal is logged at warn level once a minute per
//     identity. Durable tasks have no reply subject of theirs.
//   - Either way Reach-Source, Reach-Signature and Reach-Replayed-By must come at most once,
//     spelt so: a second value, or another case of either name
//     ("reach-source"), is refused, so that no reader can see another
//     caller than the one proven (streams.CheckOnce).
//
// A refusal is UNAUTHORIZED with the reason; a Reach-Signature that does
// not parse is BAD_REQUEST. Create it with NewAuthorizer, Start it before
// the dispatcher, Close it after. Authorize is safe for concurrent use and
// allocates nothing on the way through.
type Authorizer struct {
	verifier *signature.Verifier
	pol      *registry.PolicyWatcher
	cfg      AuthorizerConfig
	log      zerolog.Logger
	now      func() time.Time

	view atomic.Pointer[policyView]

	// replays holds the signatures accepted within MaxAge (replay.go).
	replays *replayCache

	// logged is when a refused reply subject of each identity was last
	// logged (replyLogEvery): a flood of them logs once a minute.
	loggedMu sync.Mutex
	logged   map[string]time.Time
	// records is, for each agent record refused (CheckRecord), the reason
	// last logged.
	records map[string]string
}

// replyLogEvery is how often a refused reply subject is logged per identity.
const replyLogEvery = time.Minute

// policyView is what one REACH_POLICY snapshot says to the authorizer.
type policyView struct {
	set     *policy.Set
	acl     *policy.ACL
	entries sync.Map // name → *knownIdentity, nil when absent
}

// knownIdentity is an identity of the directory and, once first needed,
// its MAC key (one X25519 per identity and policy revision).
type knownIdentity struct {
	*DirectoryEntry
	once   sync.Once
	signer *signature.Signer
	err    error
}

// NewAuthorizer returns an authorizer that checks signatures with verifier
// against the directory and the ACL it reads from REACH_POLICY through js.
func NewAuthorizer(ctx context.Context, js jetstream.JetStream, verifier *signature.Verifier, cfg AuthorizerConfig, opts ...AuthorizerOption) (*Authorizer, error) {
	if verifier == nil {
		return nil, errors.New("auth: NewAuthorizer needs the verifier key (`agentreach auth init` made keys/verifier.nk)")
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.DurableMaxAge == 0 {
		cfg.DurableMaxAge = DefaultDurableMaxAge
	}
	if cfg.MaxAge < 0 || cfg.DurableMaxAge < 0 {
		return nil, fmt.Errorf("auth: AuthorizerConfig: MaxAge %v and DurableMaxAge %v must be positive", cfg.MaxAge, cfg.DurableMaxAge)
	}
	a := &Authorizer{verifier: verifier, cfg: cfg, log: zerolog.Nop(), now: time.Now, logged: map[string]time.Time{}, records: map[string]string{}}
	for _, o := range opts {
		o(a)
	}
	if a.cfg.ReplayCacheSize == 0 {
		a.cfg.ReplayCacheSize = DefaultReplayCacheSize
	}
	if a.cfg.ReplayCacheSize < 0 {
		return nil, fmt.Errorf("auth: AuthorizerConfig: ReplayCacheSize %d must be positive", a.cfg.ReplayCacheSize)
	}
	a.replays = newReplayCache(a.cfg.ReplayCacheSize)
	var err error
	if a.pol, err = registry.NewPolicyWatcher(ctx, js, registry.WatchLogger(a.log)); err != nil {
		return nil, err
	}
	return a, nil
}

// Start loads REACH_POLICY and follows it.
func (a *Authorizer) Start(ctx context.Context) error { return a.pol.Start(ctx) }

// Close stops following REACH_POLICY.
func (a *Authorizer) Close() { a.pol.Close() }

// Revision is the REACH_POLICY revision the authorizer has read: an ACL or
// directory change of that revision or before is in force.
func (a *Authorizer) Revision() uint64 { return a.pol.Revision() }

// current returns the view of the policy in force.
func (a *Authorizer) current() *policyView {
	set := a.pol.Current()
	if v := a.view.Load(); v != nil && v.set == set {
		return v
	}
	v := &policyView{set: set, acl: aclOf(set)}
	a.view.Store(v)
	return v
}

// entry returns identity name's directory entry, or nil.
func (v *policyView) entry(name string) *knownIdentity {
	if e, ok := v.entries.Load(name); ok {
		return e.(*knownIdentity)
	}
	var k *knownIdentity
	if pv, ok := v.set.Value(PolicyIdentityPrefix + name); ok {
		if e, ok := pv.Decoded.(*DirectoryEntry); ok {
			k = &knownIdentity{DirectoryEntry: e}
		}
	}
	e, _ := v.entries.LoadOrStore(name, k)
	return e.(*knownIdentity)
}

// securityHeaders are the headers that name and prove a task's caller:
// each must come once, spelt as here, or the task is refused (a reader
// that folds case or takes another value would see another caller).
var securityHeaders = []string{streams.HeaderSource, HeaderSignature, HeaderReplayedBy}

// Authorize implements dispatcher.Authorizer.
func (a *Authorizer) Authorize(capability string, m *nats.Msg, durable bool) *streams.Error {
	e := a.authorize(capability, m, durable)
	if e != nil {
		a.log.Debug().Str("request_id", m.Header.Get(streams.HeaderRequestID)).Str("capability", capability).
			Str("source", m.Header.Get(streams.HeaderSource)).Str("code", string(e.Code)).Str("reason", e.Message).Msg("task refused")
	}
	return e
}

func (a *Authorizer) authorize(capability string, m *nats.Msg, durable bool) *streams.Error {
	for _, name := range securityHeaders {
		if err := streams.CheckOnce(m.Header, name); err != nil {
			return streams.NewError(streams.CodeUnauthorized, "%v", err)
		}
	}
	v := a.current()
	source := m.Header.Get(streams.HeaderSource)
	inProcess := !durable && m.Sub == nil
	var made time.Time
	var sig string
	if !inProcess {
		var e *streams.Error
		if made, sig, e = a.verify(v, source, m, durable); e != nil {
			return e
		}
		if !durable {
			if e := a.checkReply(v, source, m, true); e != nil {
				return e
			}
			m.Header.Del(HeaderSignature)
		}
	} else if source == "" {
		return streams.NewError(streams.CodeUnauthorized, "a task from within the dispatcher names no %s", streams.HeaderSource)
	}
	// capability "": a fan-out (its branches are authorized one by one), a
	// cancel or feedback.
	if capability != "" && !v.acl.Allows(source, capability) {
		return streams.NewError(streams.CodeUnauthorized, "the ACL does not let %s call %s", source, capability)
	}
	if !inProcess && !durable {
		// Accepted once: the durable tier's redeliveries carry the same
		// signature and are no replays (it deduplicates on its own).
		switch a.replays.accept(sig, made, a.now(), a.cfg.MaxAge) {
		case replaySeen:
			a.logReplay(source, m)
			return streams.NewError(streams.CodeUnauthorized, "this %s of %s was accepted before: a signed message is accepted once "+
				"(within its %v validity); a retry is signed again", HeaderSignature, source, a.cfg.MaxAge)
		case replayTooEarly:
			return streams.NewError(streams.CodeUnauthorized, "the %s of %s, made at %s, is older than this dispatcher's replay cache "+
				"reaches (full: it remembers fewer than %v of signatures); sign again", HeaderSignature, source,
				made.UTC().Format(time.RFC3339Nano), a.cfg.MaxAge)
		}
	}
	return nil
}

// replayLogKey prefixes the logged key of an identity's replays.
const replayLogKey = "replay\x00"

// logReplay logs a refused replay once a minute per identity.
func (a *Authorizer) logReplay(source string, m *nats.Msg) {
	if a.due(replayLogKey + source) {
		a.log.Warn().Str("request_id", m.Header.Get(streams.HeaderRequestID)).Str("source", source).Str("subject", m.Subject).
			Msg("replayed message refused: its signature was accepted before (logged once a minute per identity)")
	}
}

// due reports whether the refusal logged under key was last logged
// replyLogEvery ago or more (or never), and notes now as its time if so.
func (a *Authorizer) due(key string) bool {
	now := a.now()
	a.loggedMu.Lock()
	defer a.loggedMu.Unlock()
	last, seen := a.logged[key]
	if !seen || now.Sub(last) >= replyLogEvery {
		a.logged[key] = now
		return true
	}
	return false
}

// verify checks that m's signature proves its Reach-Source, and returns
// when it was made and its MAC. A durable task may instead be a parked
// task replayed by a dispatcher identity (Reach-Replayed-By), whose
// signature then proves it.
func (a *Authorizer) verify(v *policyView, source string, m *nats.Msg, durable bool) (time.Time, string, *streams.Error) {
	refuse := func(format string, args ...any) (time.Time, string, *streams.Error) {
		return time.Time{}, "", streams.NewError(streams.CodeUnauthorized, format, args...)
	}
	switch {
	case source == "":
		return refuse("no %s: with auth on every task names its caller and proves it (%s)", streams.HeaderSource, HeaderSignature)
	case m.Header.Get(HeaderSignature) == "":
		return refuse("%s %s carries no %s: sign with the identity's credentials (agentkit.WithCredentials, agentreach call --creds)",
			streams.HeaderSource, source, HeaderSignature)
	}
	signer := source
	replayer := m.Header.Get(HeaderReplayedBy)
	if replayer != "" {
		if !durable {
			return refuse("%s is accepted only on a durable task (a replayed dead letter or review entry)", HeaderReplayedBy)
		}
		if e := v.lookup(source); e == nil || !e.Revoked.IsZero() {
			return refuse("a replay of %s's task, and %s is no known identity, or revoked", source, source)
		}
		signer = replayer
	}
	entry := v.entry(signer)
	switch {
	case entry == nil:
		return refuse("%s %s is no known identity", headerOf(replayer), signer)
	case !entry.Revoked.IsZero():
		return refuse("identity %s was revoked at %s", signer, entry.Revoked.Format(time.RFC3339))
	case replayer != "" && entry.Role != RoleDispatcher:
		return refuse("%s %s is a %s identity: only a dispatcher identity replays a parked task as its caller", HeaderReplayedBy, replayer, entry.Role)
	}
	made, ms, sig, err := signature.Parse(m.Header.Get(HeaderSignature))
	if errors.Is(err, signature.ErrOldSignature) {
		return refuse("%v", err)
	}
	if err != nil {
		return time.Time{}, "", streams.NewError(streams.CodeBadRequest, "%v", err)
	}
	entry.once.Do(func() { entry.signer, entry.err = a.verifier.Signer(signer, entry.PublicKey) })
	if err = entry.err; err == nil {
		err = entry.signer.Check(m, source, ms, sig)
	}
	if err != nil {
		return refuse("%s %s is not proven: %v", headerOf(replayer), signer, err)
	}
	maxAge := a.cfg.MaxAge
	if durable {
		maxAge = a.cfg.DurableMaxAge
	}
	now := a.now()
	if age := now.Sub(made); age > maxAge || age < -a.cfg.MaxAge {
		return refuse("%s of %s was made at %s, %v from this dispatcher's clock (at most %v allowed)",
			HeaderSignature, signer, made.UTC().Format(time.RFC3339Nano), age.Round(time.Millisecond), maxAge)
	}
	return made, sig, nil
}

// headerOf names the header that names the signer: Reach-Replayed-By when
// there is a replayer, Reach-Source otherwise.
func headerOf(replayer string) string {
	if replayer != "" {
		return HeaderReplayedBy
	}
	return streams.HeaderSource
}

// SignReplay implements dispatcher.ReplaySigner: it signs m, a parked task
// the dispatcher's own replayer resubmits, as its Reach-Source (the
// verifier key derives every identity's MAC key), so that it runs as its
// caller again. The caller must still be a known identity, not revoked.
func (a *Authorizer) SignReplay(m *nats.Msg) error {
	source := m.Header.Get(streams.HeaderSource)
	entry := a.current().entry(source)
	switch {
	case source == "" || entry == nil:
		return fmt.Errorf("%w: the task's %s %q is no known identity", signature.ErrInvalidCredentials, streams.HeaderSource, source)
	case !entry.Revoked.IsZero():
		return fmt.Errorf("%w: the task's caller %s was revoked at %s", signature.ErrInvalidCredentials, source, entry.Revoked.Format(time.RFC3339))
	}
	entry.once.Do(func() { entry.signer, entry.err = a.verifier.Signer(source, entry.PublicKey) })
	if entry.err != nil {
		return entry.err
	}
	m.Header.Del(HeaderReplayedBy)
	entry.signer.SignAs(m, source, a.now())
	return nil
}

// CheckReply implements dispatcher.ReplyChecker: it runs before a task
// received on reach.task, reach.broadcast or reach.fanout is admitted, so
// that no answer — not even OVERLOADED or BAD_REQUEST — goes to a reply
// subject outside the inbox of the caller the task names (Authorize then
// proves that name, and checks again). A task that names no caller may be
// answered in any identity's inbox: it is refused (no Reach-Source) where
// its sender reads. A refusal clears m.Reply.
func (a *Authorizer) CheckReply(m *nats.Msg) *streams.Error {
	return a.checkReply(a.current(), m.Header.Get(streams.HeaderSource), m, false)
}

// checkReply refuses a reply subject of m outside source's own inbox and
// every dispatcher identity's (the gateway's, whose requests name a bearer
// token's identity): the dispatcher would publish its answer there, on
// anyone's behalf (a confused deputy). It clears m.Reply then, so that
// nothing, the refusal included, is published there. proven says whether
// m's signature has proven source.
func (a *Authorizer) checkReply(v *policyView, source string, m *nats.Msg, proven bool) *streams.Error {
	if m.Reply == "" || (source != "" && strings.HasPrefix(m.Reply, InboxPrefix(source)+".")) {
		return nil
	}
	if rest, ok := strings.CutPrefix(m.Reply, InboxPrefix("")); ok {
		name, _, _ := strings.Cut(rest, ".")
		if e := v.lookup(name); e != nil && e.Revoked.IsZero() && (e.Role == RoleDispatcher || (source == "" && !proven)) {
			return nil
		}
	}
	reply := m.Reply
	m.Reply = ""
	a.logRefusedReply(v, source, m, reply)
	if source == "" {
		return streams.NewError(streams.CodeUnauthorized, "reply subject %q outside every identity's inbox, and no %s: nothing was published",
			reply, streams.HeaderSource)
	}
	return streams.NewError(streams.CodeUnauthorized, "reply subject %q lies outside %s's inbox (%s.>): a task is answered only there, and nothing was published",
		reply, source, InboxPrefix(source))
}

// logRefusedReply logs a refused reply subject once a minute per identity
// (names that are none share one entry: the sender chose them).
func (a *Authorizer) logRefusedReply(v *policyView, source string, m *nats.Msg, reply string) {
	key := source
	if v.lookup(source) == nil {
		key = ""
	}
	if a.due(key) {
		a.log.Warn().Str("request_id", m.Header.Get(streams.HeaderRequestID)).Str("source", source).Str("subject", m.Subject).
			Str("reply", reply).Msg("task with a reply subject outside its caller's inbox dropped unanswered (logged once a minute per identity)")
	}
}

// lookup returns identity name's directory entry, or nil, without caching
// it (entry caches): for names a sender chose.
func (v *policyView) lookup(name string) *DirectoryEntry {
	if pv, ok := v.set.Value(PolicyIdentityPrefix + name); ok {
		if e, ok := pv.Decoded.(*DirectoryEntry); ok {
			return e
		}
	}
	return nil
}
