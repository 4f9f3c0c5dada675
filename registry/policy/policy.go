package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/registry/document"
	"github.com/agent-reach/agentreach/streams"
)

// REACH_POLICY keys this package decodes (docs/declarations.md).
const (
	// KeyDefaults is the key of the policy every capability starts from.
	KeyDefaults = "defaults"
	// KeyCapabilityPrefix starts the key of one capability's policy:
	// "capability.orders.query".
	KeyCapabilityPrefix = "capability."
)

// MaxSize bounds one REACH_POLICY value.
const MaxSize = 1 << 20

// StrategyNames lists the selection strategies a policy may name, sorted;
// they are the dispatcher's.
func StrategyNames() []string {
	return []string{"hash", "least_load", "round_robin", "weighted_round_robin"}
}

// Duration is a time.Duration written as a Go duration string ("500ms",
// "3s", "1m30s") in JSON and YAML.
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"500ms\" or \"3s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as \"500ms\" or \"3s\", got %q", s)
	}
	*d = Duration(v)
	return nil
}

// CapabilityPolicy is how dispatchers treat a capability: the value of
// "defaults" and of "capability.<cap>" in REACH_POLICY. Every field is
// optional; nil means not set here, so the layer below applies (the
// capability's policy over the defaults, the defaults over the dispatcher's
// flags).
type CapabilityPolicy struct {
	// Strategy is one of StrategyNames.
	Strategy *string `json:"strategy,omitempty"`
	// Retries is how many deliveries may follow the first; -1 for none.
	Retries *int `json:"retries,omitempty"`
	// Write marks a capability that changes state: each task gets an
	// idempotency key.
	Write *bool `json:"write,omitempty"`
	// Idempotent marks a capability safe to deliver twice.
	Idempotent *bool `json:"idempotent,omitempty"`
	// AckTimeout is how long an instance has to answer ACKED.
	AckTimeout *Duration `json:"ack_timeout,omitempty"`
	// MinCallTimeout and MaxCallTimeout clamp the per-call timeout.
	MinCallTimeout *Duration `json:"min_call_timeout,omitempty"`
	MaxCallTimeout *Duration `json:"max_call_timeout,omitempty"`
	// Deadline is the overall deadline of a task whose caller sets none.
	Deadline *Duration `json:"deadline,omitempty"`
	// QueueWait is how long a task waits for a free slot when every
	// instance is busy; 0 or less: it does not wait.
	QueueWait *Duration `json:"queue_wait,omitempty"`
	// MaxInFlight caps the capability's tasks one dispatcher replica
	// handles at once.
	MaxInFlight *int `json:"max_in_flight,omitempty"`
	// Breaker tunes the circuit breakers of the capability's instances.
	Breaker *BreakerPolicy `json:"breaker,omitempty"`
	// Require holds default requirements; a caller's Reach-Require is
	// merged over them (Merge).
	Require *declare.Requirement `json:"require,omitempty"`
	// Hedge turns hedged requests on (docs/reference.md, Hedged requests); dispatchers hedge only a
	// capability that is idempotent (here, or declared) or read-only
	// (declared mode read), never a write.
	Hedge *HedgePolicy `json:"hedge,omitempty"`
	// Quorum is a broadcast's completion policy when the caller sends no
	// Reach-Quorum: a fraction below 1 of the instances, or a count.
	Quorum *float64 `json:"quorum,omitempty"`
}

// HedgePolicy is a capability's hedging: the delay before a second
// delivery — fixed (after_ms) or a percentile of the learned latencies
// (after, "p97" by default) — and the budget, the share of deliveries that
// may be hedges (default 0.05). Off turns hedging off where a lower layer
// turned it on.
type HedgePolicy struct {
	AfterMS *int64   `json:"after_ms,omitempty"`
	After   *string  `json:"after,omitempty"`
	Budget  *float64 `json:"budget,omitempty"`
	Off     bool     `json:"off,omitempty"`
}

// Percentile returns the percentile After names ("p95" → 0.95), or 0 when
// After is not set.
func (h *HedgePolicy) Percentile() (float64, error) {
	if h.After == nil {
		return 0, nil
	}
	v := *h.After
	digits := strings.TrimLeft(strings.TrimPrefix(v, "p"), "0123456789.")
	f, err := strconv.ParseFloat(strings.TrimPrefix(v, "p"), 64)
	if !strings.HasPrefix(v, "p") || digits != "" || err != nil || !(f > 0 && f < 100) {
		return 0, fmt.Errorf("%q: want a percentile such as \"p95\" or \"p99.9\"", v)
	}
	return f / 100, nil
}

// BreakerPolicy tunes circuit breakers; nil fields are not set here.
type BreakerPolicy struct {
	// ConsecutiveFailures opens a breaker.
	ConsecutiveFailures *int `json:"consecutive_failures,omitempty"`
	// FailureRatio in (0,1] over Window opens a breaker, once MinVolume
	// outcomes were seen.
	FailureRatio *float64  `json:"failure_ratio,omitempty"`
	Window       *Duration `json:"window,omitempty"`
	MinVolume    *int      `json:"min_volume,omitempty"`
	// Cooldown is how long a breaker stays open.
	Cooldown *Duration `json:"cooldown,omitempty"`
	// Probes is how many tasks a half-open breaker admits.
	Probes *int `json:"probes,omitempty"`
}

// validate adds c's problems to p.
func (c *CapabilityPolicy) validate(p *document.Problems) {
	if c.Strategy != nil && !slices.Contains(StrategyNames(), *c.Strategy) {
		p.Add("strategy", "unknown strategy %q (want one of %s)", *c.Strategy, strings.Join(StrategyNames(), ", "))
	}
	if c.Retries != nil && *c.Retries < -1 {
		p.Add("retries", "must be -1 (none) or more, got %d", *c.Retries)
	}
	positive := func(path string, d *Duration) {
		if d != nil && *d <= 0 {
			p.Add(path, "must be positive, got %s", time.Duration(*d))
		}
	}
	positive("ack_timeout", c.AckTimeout)
	positive("min_call_timeout", c.MinCallTimeout)
	positive("max_call_timeout", c.MaxCallTimeout)
	positive("deadline", c.Deadline)
	if c.MinCallTimeout != nil && c.MaxCallTimeout != nil && *c.MaxCallTimeout < *c.MinCallTimeout {
		p.Add("max_call_timeout", "%s is less than min_call_timeout %s", time.Duration(*c.MaxCallTimeout), time.Duration(*c.MinCallTimeout))
	}
	if c.MaxInFlight != nil && *c.MaxInFlight < 1 {
		p.Add("max_in_flight", "must be at least 1, got %d", *c.MaxInFlight)
	}
	if b := c.Breaker; b != nil {
		atLeastOne := func(path string, n *int) {
			if n != nil && *n < 1 {
				p.Add(path, "must be at least 1, got %d", *n)
			}
		}
		atLeastOne("breaker.consecutive_failures", b.ConsecutiveFailures)
		atLeastOne("breaker.min_volume", b.MinVolume)
		atLeastOne("breaker.probes", b.Probes)
		if r := b.FailureRatio; r != nil && !(*r > 0 && *r <= 1) {
			p.Add("breaker.failure_ratio", "must be in (0,1], got %v", *r)
		}
		if b.Window != nil && *b.Window < Duration(time.Second) {
			p.Add("breaker.window", "must be at least 1s, got %s", time.Duration(*b.Window))
		}
		positive("breaker.cooldown", b.Cooldown)
	}
	if c.Require != nil {
		c.Require.Check(p, "require")
	}
	if h := c.Hedge; h != nil {
		if h.AfterMS != nil && *h.AfterMS < 0 {
			p.Add("hedge.after_ms", "must not be negative, got %d", *h.AfterMS)
		}
		if h.AfterMS != nil && h.After != nil {
			p.Add("hedge", "give after_ms or after, not both")
		}
		if _, err := h.Percentile(); err != nil {
			p.Add("hedge.after", "%v", err)
		}
		if b := h.Budget; b != nil && !(*b > 0 && *b <= 1) {
			p.Add("hedge.budget", "must be in (0,1], got %v", *b)
		}
		if c.Write != nil && *c.Write && !h.Off {
			p.Add("hedge", "a write is never hedged: a second delivery could execute it twice")
		}
	}
	if q := c.Quorum; q != nil && !(*q > 0 && (*q < 1 || *q == math.Trunc(*q))) {
		p.Add("quorum", "want a fraction between 0 and 1 (0.6) or a whole count (3), got %v", *q)
	}
}

// overlayPolicy returns base with every field top sets replaced by top's;
// breaker settings overlay field by field and requirements merge.
func overlayPolicy(base, top CapabilityPolicy) CapabilityPolicy {
	out := CapabilityPolicy{
		Strategy:       pick(base.Strategy, top.Strategy),
		Retries:        pick(base.Retries, top.Retries),
		Write:          pick(base.Write, top.Write),
		Idempotent:     pick(base.Idempotent, top.Idempotent),
		AckTimeout:     pick(base.AckTimeout, top.AckTimeout),
		MinCallTimeout: pick(base.MinCallTimeout, top.MinCallTimeout),
		MaxCallTimeout: pick(base.MaxCallTimeout, top.MaxCallTimeout),
		Deadline:       pick(base.Deadline, top.Deadline),
		QueueWait:      pick(base.QueueWait, top.QueueWait),
		MaxInFlight:    pick(base.MaxInFlight, top.MaxInFlight),
		Breaker:        pick(base.Breaker, top.Breaker),
		Require:        pick(base.Require, top.Require),
		Hedge:          pick(base.Hedge, top.Hedge),
		Quorum:         pick(base.Quorum, top.Quorum),
	}
	if base.Breaker != nil && top.Breaker != nil {
		out.Breaker = &BreakerPolicy{
			ConsecutiveFailures: pick(base.Breaker.ConsecutiveFailures, top.Breaker.ConsecutiveFailures),
			FailureRatio:        pick(base.Breaker.FailureRatio, top.Breaker.FailureRatio),
			Window:              pick(base.Breaker.Window, top.Breaker.Window),
			MinVolume:           pick(base.Breaker.MinVolume, top.Breaker.MinVolume),
			Cooldown:            pick(base.Breaker.Cooldown, top.Breaker.Cooldown),
			Probes:              pick(base.Breaker.Probes, top.Breaker.Probes),
		}
	}
	if base.Require != nil && top.Require != nil {
		merged := declare.Merge(*base.Require, *top.Require)
		out.Require = &merged
	}
	return out
}

// pick returns top when it is set, else base.
func pick[T any](base, top *T) *T {
	if top != nil {
		return top
	}
	return base
}

// Value is one decoded REACH_POLICY value.
type Value struct {
	// Capability is the value of "defaults" and "capability.<cap>" keys.
	Capability *CapabilityPolicy
	// Decoded is what the decoder of a kind registered with
	// RegisterKind made of the value.
	Decoded any
	// JSON is the value as compact JSON (canonical for a capability
	// policy). For keys nothing decodes (such as "acl" until its kind is
	// registered) it is all there is: decode it where it is used.
	JSON json.RawMessage
}

// Decoder decodes and validates the value of one REACH_POLICY key of
// a registered kind, given as JSON (YAML is converted before). Its error
// should name the bad field.
type Decoder func(key string, value json.RawMessage) (any, error)

var (
	policyKindsMu sync.RWMutex
	policyKinds   = map[string]Decoder{}
)

// reservedPolicyKinds are key families later parts of Agent-Reach decode
// (docs/declarations.md): `agentreach policy set` accepts them before
// their kind is registered, and keeps their values as JSON.
var reservedPolicyKinds = []string{"acl", "workflow"}

// RegisterKind makes Parse, and so registry.PolicyWatcher and the CLI,
// decode and validate the keys of kind name: the key name itself and every
// key "name.<anything>" ("workflow" covers "workflow.claim.review"). An
// invalid value of the kind is then refused by the CLI and ignored by
// watchers, whose last good value stays. Call it from an init function; it
// panics on a bad or duplicate name, or one this package decodes itself.
func RegisterKind(name string, decode Decoder) {
	if err := declare.ValidateName(name); err != nil || strings.Contains(name, ".") || decode == nil ||
		name == KeyDefaults || name+"." == KeyCapabilityPrefix {
		panic(fmt.Sprintf("policy: RegisterKind(%q): want a one-token name other than defaults and capability, and a decoder", name))
	}
	policyKindsMu.Lock()
	defer policyKindsMu.Unlock()
	if _, dup := policyKinds[name]; dup {
		panic(fmt.Sprintf("policy: RegisterKind(%q) called twice", name))
	}
	policyKinds[name] = decode
}

// policyKind returns the first token of key: its kind.
func policyKind(key string) string {
	kind, _, _ := strings.Cut(key, ".")
	return kind
}

// ValidateKey reports whether key is one `agentreach policy` may
// write: "defaults", "capability.<cap>", a registered kind's key, or one of
// the kinds later parts of Agent-Reach decode ("acl", "workflow.<name>").
// Watchers keep any other key's value as JSON, so a typo would go
// unnoticed.
func ValidateKey(key string) error {
	switch kind := policyKind(key); {
	case key == KeyDefaults:
		return nil
	case strings.HasPrefix(key, KeyCapabilityPrefix):
		if err := streams.ValidateCapability(strings.TrimPrefix(key, KeyCapabilityPrefix)); err != nil {
			return fmt.Errorf("%w: key %q: %v", ErrInvalid, key, err)
		}
		return nil
	case registeredKind(kind) != nil || slices.Contains(reservedPolicyKinds, kind):
		if !validKey(key) {
			return fmt.Errorf("%w: key %q: want letters, digits and - _ . only", ErrInvalid, key)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown key %q (want %s, %s<capability> or a key of a kind: %s)", ErrInvalid, key, KeyDefaults, KeyCapabilityPrefix, strings.Join(kindNames(), ", "))
}

// kindNames are the kinds a key may start with besides defaults and
// capability, registered or reserved, sorted.
func kindNames() []string {
	policyKindsMu.RLock()
	defer policyKindsMu.RUnlock()
	names := slices.Concat(slices.Collect(maps.Keys(policyKinds)), reservedPolicyKinds)
	slices.Sort(names)
	return slices.Compact(names)
}

func registeredKind(kind string) Decoder {
	policyKindsMu.RLock()
	defer policyKindsMu.RUnlock()
	return policyKinds[kind]
}

// validKey reports whether key can name a KV entry: letters, digits and
// - _ . /, not starting or ending with a dot.
func validKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '/' || c == '=') {
			return false
		}
	}
	return true
}

// Parse reads the value of REACH_POLICY key from JSON or YAML.
// "defaults" and "capability.<cap>" hold a CapabilityPolicy, read strictly
// (unknown keys, keys given twice, wrong types are errors) and validated;
// a registered kind's keys go to its decoder; any other key's value is
// kept as JSON. Every error wraps ErrInvalid and names the key and
// the field.
func Parse(key string, data []byte) (Value, error) {
	bad := func(err error) (Value, error) {
		return Value{}, fmt.Errorf("%w: %s: %v", ErrInvalid, key, err)
	}
	if !validKey(key) {
		return bad(errors.New("not a valid key: want letters, digits and - _ . only"))
	}
	if len(data) > MaxSize {
		return bad(fmt.Errorf("%d bytes, more than the %d allowed", len(data), MaxSize))
	}
	if key == KeyDefaults || strings.HasPrefix(key, KeyCapabilityPrefix) {
		if key != KeyDefaults {
			if err := streams.ValidateCapability(strings.TrimPrefix(key, KeyCapabilityPrefix)); err != nil {
				return bad(err)
			}
		}
		var c CapabilityPolicy
		if _, err := document.Decode(data, &c); err != nil {
			return bad(err)
		}
		if c.Require != nil {
			c.Require.Normalize()
		}
		var p document.Problems
		c.validate(&p)
		if err := p.Err(ErrInvalid, key); err != nil {
			return Value{}, err
		}
		canonical, err := json.Marshal(c)
		if err != nil {
			return bad(err)
		}
		return Value{Capability: &c, JSON: canonical}, nil
	}
	if !json.Valid(data) {
		var err error
		if data, err = document.YAMLToJSON(data); err != nil {
			return bad(err)
		}
	}
	if err := document.CheckUTF8(data); err != nil {
		return bad(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return bad(err)
	}
	v := Value{JSON: compact.Bytes()}
	if decode := registeredKind(policyKind(key)); decode != nil {
		var err error
		if v.Decoded, err = decode(key, v.JSON); err != nil {
			return bad(err)
		}
	}
	return v, nil
}

// Set is every REACH_POLICY value in force at one revision, resolved
// for lookups on a dispatcher's hot path. It is immutable.
type Set struct {
	revision uint64
	defaults CapabilityPolicy
	resolved map[string]CapabilityPolicy // capability → defaults overlaid by its own
	values   map[string]Value
}

// NewSet resolves values (key → value) at revision.
func NewSet(values map[string]Value, revision uint64) *Set {
	s := &Set{revision: revision, resolved: make(map[string]CapabilityPolicy), values: make(map[string]Value, len(values))}
	if v, ok := values[KeyDefaults]; ok && v.Capability != nil {
		s.defaults = *v.Capability
	}
	for key, v := range values {
		s.values[key] = v
		if c, ok := strings.CutPrefix(key, KeyCapabilityPrefix); ok && v.Capability != nil {
			s.resolved[c] = overlayPolicy(s.defaults, *v.Capability)
		}
	}
	return s
}

// Revision is the highest REACH_POLICY revision the set reflects.
func (s *Set) Revision() uint64 { return s.revision }

// For returns capability's policy: "defaults" overlaid by
// "capability.<capability>". Fields nil in both are left to the
// dispatcher's flags. It does not allocate.
func (s *Set) For(capability string) CapabilityPolicy {
	if c, ok := s.resolved[capability]; ok {
		return c
	}
	return s.defaults
}

// Value returns the value in force under key, for keys beyond the
// capability policies (a registered kind's Decoded, or JSON).
func (s *Set) Value(key string) (Value, bool) {
	v, ok := s.values[key]
	return v, ok
}
