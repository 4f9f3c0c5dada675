package auth

import (
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// Response rights of an agent: it answers each delivery several times
// (ACKED, PROCESSING…, then the result) and may still answer long after it
// (per-call timeouts are clamped to 120 s, progress extends them up to the
// overall deadline).
const (
	agentResponses       = 1000
	agentResponseExpires = 15 * time.Minute
)

// Permissions returns what id may publish and subscribe to, generated from
// its role and, for agents and callers, the capabilities acl grants it
// (subjects under subjects' prefix). They are never written by hand: the
// account JWT carries them as the template of id's signing key, and a new
// ACL is a new template.
//
//   - Every identity receives replies only under its own inbox prefix
//     (InboxPrefix), so none can read another's; an agent or a caller may
//     not publish there (nor to reach.agent.<its name>), so it can send
//     itself no message whose reply subject it chose.
//   - An agent subscribes to its own reach.agent.<name> only, writes its own
//     key in REACH_AGENTS and its type's in REACH_CAPS, reads and writes the
//     REACH_IDEMPOTENCY keys of the capabilities its grant lets it serve
//     (IdempotencyKeys) by key only — no consumers —, and answers only what
//     it received (allow_responses: it may not publish to other inboxes).
//   - An agent and a caller publish tasks (direct, broadcast, durable) only
//     to the capabilities acl grants them, and may fan out, cancel and send
//     feedback; they read their own durable results only (subscribe to
//     reach.result.<name>.>, direct get of one subject under it from
//     REACH_RESULTS), and the dead letters and review entries of the
//     capabilities they may call.
//   - A dispatcher serves the task subjects, delivers to agents, answers
//     callers, sends its HTTP gateway's durable tasks, broadcasts and
//     fan-outs, and provisions and uses every bucket and stream.
func Permissions(id Identity, acl *policy.ACL, subjects streams.Subjects) jwt.Permissions {
	var p jwt.Permissions
	inbox := InboxPrefix(id.Name) + ".>"
	switch id.Role {
	case RoleDispatcher:
		p.Pub.Allow.Add(
			subjects.Agent("*"), subjects.ResultWildcard(), subjects.DeadLetterWildcard(), subjects.ReviewWildcard(),
			subjects.EventWildcard(), subjects.SubmitWildcard(), subjects.Cancel(), subjects.API(">"),
			subjects.BroadcastWildcard(), subjects.FanOut(), // the HTTP gateway's broadcasts and fan-outs
			"_INBOX.>", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "$SRV.>") // $SRV: `nats micro ls` as the operator
		p.Sub.Allow.Add(
			subjects.TaskWildcard(), subjects.BroadcastWildcard(), subjects.FanOut(), subjects.Cancel(), subjects.API(">"),
			subjects.Feedback(), subjects.ResultWildcard(), subjects.DeadLetterWildcard(), subjects.ReviewWildcard(),
			inbox, "$JS.EVENT.>")
	case RoleAgent:
		callerPermissions(&p, id, acl, subjects)
		srv := "$SRV.*." + strings.ReplaceAll(id.Type, ".", "_") // nats micro: its type only; "$SRV.*" would let "$SRV.>" in
		p.Sub.Allow.Add(subjects.Agent(id.Name), "$SRV.PING", "$SRV.INFO", "$SRV.STATS", srv, srv+"."+id.Name)
		kv := func(bucket string) string { return "KV_" + bucket }
		p.Pub.Allow.Add("$KV."+streams.BucketAgents+"."+id.Name, "$KV."+streams.BucketCaps+"."+id.Type)
		for _, b := range []string{streams.BucketAgents, streams.BucketCaps} {
			p.Pub.Allow.Add(
				"$JS.API.STREAM.INFO."+kv(b),
				"$JS.API.STREAM.MSG.GET."+kv(b),
				"$JS.API.DIRECT.GET."+kv(b),
				"$JS.API.DIRECT.GET."+kv(b)+".>")
		}
		// REACH_IDEMPOTENCY: only the outcomes of what it may serve, written
		// ($KV.…: create, put, delete) and read by a direct get of one key,
		// whose subject names it. No STREAM.MSG.GET nor body-form DIRECT.GET
		// (their body names any subject), no consumers (their creator picks
		// the deliver subject): agents poll a claim (docs/protocol.md).
		p.Pub.Allow.Add("$JS.API.STREAM.INFO." + kv(streams.BucketIdempotency)) // binding the bucket
		for _, k := range IdempotencyKeys(id) {
			subject := "$KV." + streams.BucketIdempotency + "." + k
			p.Pub.Allow.Add(subject, "$JS.API.DIRECT.GET."+kv(streams.BucketIdempotency)+"."+subject)
		}
		p.Resp = &jwt.ResponsePermission{MaxMsgs: agentResponses, Expires: agentResponseExpires}
	case RoleCaller:
		callerPermissions(&p, id, acl, subjects)
	}
	if id.Role != RoleDispatcher {
		// Nothing it sends lands where it reads: a message it sent itself,
		// with a reply subject of its choosing, would let it "answer"
		// anywhere under allow_responses (or be answered by a dispatcher
		// there). Its delivery subject it may not publish to either: only
		// a dispatcher may.
		p.Pub.Deny.Add(inbox, subjects.Agent(id.Name))
	}
	slices.Sort(p.Pub.Allow)
	slices.Sort(p.Sub.Allow)
	slices.Sort(p.Pub.Deny)
	slices.Sort(p.Sub.Deny)
	return p
}

// IdempotencyKeys returns the REACH_IDEMPOTENCY key patterns an agent
// identity may read and write: for each capability pattern p of its Grant,
// exactly the keys <capability>.<caller>.<key> (streams.IdempotencyKey) of
// the capabilities p matches. A pattern without '>' is followed by two
// tokens ("risk.*" → "risk.*.*.*"); a trailing '>' stands for one or more
// tokens, so with the caller and the key it is "*.*.>", three or more
// ("math.>" → "math.*.*.>"). Other roles get none.
func IdempotencyKeys(id Identity) []string {
	var keys []string
	for _, p := range id.Grant() {
		if prefix, ok := strings.CutSuffix(p, ">"); ok && (prefix == "" || strings.HasSuffix(prefix, ".")) {
			keys = append(keys, prefix+"*.*.>")
		} else {
			keys = append(keys, p+".*.*")
		}
	}
	return keys
}

// callerPermissions adds what calling takes: the granted capabilities on
// every tier, fan-out, cancel, feedback, and reading the outcomes.
//
// Of REACH_RESULTS a caller reads only its own results: it hears them on
// reach.result.<name>.> and reads a stored one by a direct get whose
// subject names it, $JS.API.DIRECT.GET.REACH_RESULTS.reach.result.<name>.…,
// which the server answers with the last message on exactly that subject
// (a body asking for a sequence or another subject is refused). Nothing
// else: STREAM.MSG.GET and the bare DIRECT.GET take any subject or
// sequence in their body, and STREAM.INFO lists the stream's subjects,
// which name other callers' request ids.
func callerPermissions(p *jwt.Permissions, id Identity, acl *policy.ACL, subjects streams.Subjects) {
	own := subjects.ResultsOf(id.Name)
	p.Sub.Allow.Add(InboxPrefix(id.Name)+".>", own)
	p.Pub.Allow.Add(subjects.FanOut(), subjects.Cancel(), subjects.Feedback(),
		"$JS.API.DIRECT.GET."+streams.StreamResults+"."+own)
	grants := acl.Grants(id.Name)
	for _, c := range grants {
		p.Pub.Allow.Add(subjects.Task(c), subjects.Broadcast(c), subjects.Submit(c))
		p.Sub.Allow.Add(subjects.DeadLetter(c), subjects.Review(c))
		if deepened(c, grants) {
			p.Sub.Deny.Add(subjects.DeadLetter(c)+".>", subjects.Review(c)+".>")
		}
	}
}

// deepened reports whether c's dead letters and review entries need a
// deny below them: the server checks a subscription's subject against
// the allow list token by token, so "reach.dlq.math.*" also admits the
// subscription "reach.dlq.math.>", which hears math.a.b's dead letters too
// (a capability "math.*" does not grant). A deny of "reach.dlq.math.*.>"
// closes that: the server drops what it would deliver under it, and the
// allowed subscriptions keep every subject of one token. Not when another
// grant reaches below c (its own dead letters would be denied with them):
// then the names under c's prefix are that grant's to say.
func deepened(c string, grants []string) bool {
	if !strings.HasSuffix(c, "*") || (len(c) > 1 && !strings.HasSuffix(c, ".*")) {
		return false
	}
	below := strings.Split(c, ".")
	for _, g := range grants {
		gt := strings.Split(g, ".")
		if len(gt) <= len(below) && gt[len(gt)-1] != ">" {
			continue
		}
		overlaps := true
		for i, tok := range below {
			if i >= len(gt) || gt[i] == ">" {
				break
			}
			if tok != "*" && gt[i] != "*" && tok != gt[i] {
				overlaps = false
				break
			}
		}
		if overlaps {
			return false
		}
	}
	return true
}
