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
			"_INBOX.>", "$JS.API.>", "$JS."+HubDomain+".API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "$SRV.>") // $SRV: `nats micro ls` as the operator
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
		// The same JetStream requests in the hub's domain: the only form
		// that crosses a leaf link (docs/operations.md, leaf nodes). The hub
		// maps it to the plain form, so it grants nothing more.
		p.Pub.Allow.Add(inDomain(p.Pub.Allow)...)
	case RoleCaller:
		callerPermissions(&p, id, acl, subjects)
		// A caller at the edge reads its results in the hub's domain too.
		p.Pub.Allow.Add(inDomain(p.Pub.Allow)...)
	case RoleLeaf:
		// What a leaf link may do depends on the agents it carries:
		// LeafPermissions. Alone it may do nothing.
		p.Pub.Deny.Add(">")
		p.Sub.Deny.Add(">")
		return p
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

// HubDomain is the JetStream domain of the hub cluster (deploy/nats:
// jetstream { domain: hub }). A leaf node server has no JetStream of its
// own, and the hub passes no plain JetStream API or $KV request across a
// leaf link: agents at the edge reach the hub's JetStream as
// $JS.hub.API.… (agentkit.Config.JetStreamDomain), which the hub maps to
// $JS.API.… and $KV.…
const HubDomain = "hub"

// inDomain returns the HubDomain forms of the JetStream subjects among
// subjects: $JS.API.x as $JS.hub.API.x, $KV.x as $JS.hub.API.$KV.x.
func inDomain(subjects []string) []string {
	var out []string
	for _, s := range subjects {
		if rest, ok := strings.CutPrefix(s, "$JS.API."); ok {
			out = append(out, "$JS."+HubDomain+".API."+rest)
		} else if strings.HasPrefix(s, "$KV.") {
			out = append(out, "$JS."+HubDomain+".API."+s)
		}
	}
	return out
}

// LeafPermissions returns the permissions of leaf link id, which carries
// agents and callers: the union of the Permissions of the identities it
// names that are active agent or caller identities among identities
// (others add nothing), in the forms that cross a leaf link (JetStream
// only in HubDomain). Publish is what the leaf node may send the hub,
// subscribe what the hub sends it.
//
// One addition when it carries an agent: the inboxes of the dispatcher
// identities. An agent answers
// a delivery on its reply subject, under its dispatcher's inbox; on a
// client connection allow_responses admits that one answer, but a hub
// tells a leaf of no interest in a subject the link may not publish to, so
// no answer would ever leave the leaf. The leaf server still holds each
// agent to allow_responses; the link lets the edge publish into the
// dispatchers' inboxes, where only a reply subject it was sent (random
// tokens) reaches a waiting request.
//
// The hub cannot tell which agent behind the link sent a message: the link
// may do what any of its agents may, and each agent's own limits are the
// leaf server's to enforce (docs/security.md, leaf nodes). Revoking a
// carried agent takes its subjects off the link.
func LeafPermissions(id Identity, identities []Identity, acl *policy.ACL, subjects streams.Subjects) jwt.Permissions {
	var p jwt.Permissions
	add := func(list *jwt.StringList, s string) {
		if !slices.Contains(*list, s) {
			list.Add(s)
		}
	}
	carriesAgent := false
	for _, a := range identities {
		if (a.Role != RoleAgent && a.Role != RoleCaller) || !a.Active() || !slices.Contains(id.Carries, a.Name) {
			continue
		}
		carriesAgent = carriesAgent || a.Role == RoleAgent
		ap := Permissions(a, acl, subjects)
		for _, s := range ap.Pub.Allow {
			if !strings.HasPrefix(s, "$JS.API.") && !strings.HasPrefix(s, "$KV.") {
				add(&p.Pub.Allow, s)
			}
		}
		for _, s := range ap.Sub.Allow {
			add(&p.Sub.Allow, s)
		}
		for _, s := range ap.Sub.Deny {
			add(&p.Sub.Deny, s)
		}
		// Its inbox and delivery subject only the hub publishes to.
		p.Pub.Deny.Add(InboxPrefix(a.Name)+".>", subjects.Agent(a.Name))
	}
	if carriesAgent {
		for _, d := range identities {
			if d.Role == RoleDispatcher && d.Active() {
				add(&p.Pub.Allow, InboxPrefix(d.Name)+".>")
			}
		}
	}
	// An empty allow list allows everything: a link carrying no active
	// agent or caller may do nothing.
	if len(p.Pub.Allow) == 0 {
		p.Pub.Deny = jwt.StringList{">"}
	}
	if len(p.Sub.Allow) == 0 {
		p.Sub.Deny = jwt.StringList{">"}
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
