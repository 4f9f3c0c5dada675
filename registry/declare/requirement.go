package declare

import (
	"encoding/json"
	"fmt"
	"github.com/agent-reach/agentreach/registry/document"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxRequirementSize bounds a Reach-Require header.
const MaxRequirementSize = 4096

// Requirement is what the instance chosen for a task must satisfy: from the
// caller's Reach-Require header (JSON) and the capability policy's require,
// merged with Merge. The zero value requires nothing. Treat a Requirement as
// immutable once made: Merge and the policy share its maps.
type Requirement struct {
	// Labels: each name's value must be among the declared values.
	Labels map[string]string `json:"labels,omitempty"`
	// Limits: each amount must be at most the declared limit.
	Limits map[string]float64 `json:"limits,omitempty"`
	// Permissions must each be declared, and none refused.
	Permissions []string `json:"permissions,omitempty"`
	// MaxLatencyMS bounds a call's latency in milliseconds: the declared
	// timeout_ms (Match) and the latency a dispatcher observed.
	MaxLatencyMS *float64 `json:"max_latency_ms,omitempty"`
	// MaxCost bounds the declared cost of one call.
	MaxCost *float64 `json:"max_cost,omitempty"`
}

// ParseRequirement reads a Reach-Require value: one JSON object of at most
// MaxRequirementSize bytes. Unknown keys, keys given twice, values of the
// wrong type and invalid values are errors wrapping ErrInvalidRequirement
// that name the field. Permissions come back sorted, without duplicates.
func ParseRequirement(data []byte) (Requirement, error) {
	var r Requirement
	if len(data) > MaxRequirementSize {
		return r, fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrInvalidRequirement, len(data), MaxRequirementSize)
	}
	if err := document.DecodeJSON(data, &r); err != nil {
		return Requirement{}, fmt.Errorf("%w: %v", ErrInvalidRequirement, err)
	}
	r.Normalize()
	var p document.Problems
	r.Check(&p, "")
	if err := p.Err(ErrInvalidRequirement, ""); err != nil {
		return Requirement{}, err
	}
	return r, nil
}

// Normalize sorts r's permissions and drops duplicates, as ParseRequirement
// does; for a requirement decoded as part of a larger document.
func (r *Requirement) Normalize() { r.Permissions = sortedSet(r.Permissions) }

// Check adds r's problems to p, their paths below prefix: for a requirement
// decoded as part of a larger document (a policy's require), after Normalize.
func (r *Requirement) Check(p *document.Problems, prefix string) {
	for _, name := range slices.Sorted(maps.Keys(r.Labels)) {
		path := document.JoinPath(document.JoinPath(prefix, "labels"), name)
		if err := ValidateName(name); err != nil {
			p.Add(path, "%v", err)
		}
		if r.Labels[name] == "" {
			p.Add(path, "must not be empty")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Limits)) {
		path := document.JoinPath(document.JoinPath(prefix, "limits"), name)
		if err := ValidateName(name); err != nil {
			p.Add(path, "%v", err)
		}
		if v := r.Limits[name]; math.IsNaN(v) || math.IsInf(v, 0) {
			p.Add(path, "must be a finite number")
		}
	}
	for i, perm := range r.Permissions {
		if err := ValidateName(perm); err != nil {
			p.Add(document.IndexPath(document.JoinPath(prefix, "permissions"), i), "%v", err)
		}
	}
	if v := r.MaxLatencyMS; v != nil && !(*v > 0 && !math.IsInf(*v, 0)) {
		p.Add(document.JoinPath(prefix, "max_latency_ms"), "must be a positive number of milliseconds, got %v", *v)
	}
	if v := r.MaxCost; v != nil && !(*v >= 0 && !math.IsInf(*v, 0)) {
		p.Add(document.JoinPath(prefix, "max_cost"), "must be a finite number, 0 or more, got %v", *v)
	}
}

// sortedSet returns list sorted and without duplicates, list itself when it
// already is.
func sortedSet(list []string) []string {
	for i := 1; i < len(list); i++ {
		if list[i-1] >= list[i] {
			list = slices.Clone(list)
			slices.Sort(list)
			return slices.Compact(list)
		}
	}
	return list
}

// Empty reports whether r requires nothing.
func (r Requirement) Empty() bool {
	return len(r.Labels) == 0 && len(r.Limits) == 0 && len(r.Permissions) == 0 && r.MaxLatencyMS == nil && r.MaxCost == nil
}

// Merge overlays caller on defaults: the caller's value wins for each label,
// limit, max_latency_ms and max_cost it sets; permissions are the union of
// both. When one side is empty the other is returned as it is.
func Merge(defaults, caller Requirement) Requirement {
	switch {
	case caller.Empty():
		return defaults
	case defaults.Empty():
		return caller
	}
	out := Requirement{
		Labels:       overlay(defaults.Labels, caller.Labels),
		Limits:       overlay(defaults.Limits, caller.Limits),
		Permissions:  sortedSet(append(slices.Clip(defaults.Permissions), caller.Permissions...)),
		MaxLatencyMS: defaults.MaxLatencyMS,
		MaxCost:      defaults.MaxCost,
	}
	if caller.MaxLatencyMS != nil {
		out.MaxLatencyMS = caller.MaxLatencyMS
	}
	if caller.MaxCost != nil {
		out.MaxCost = caller.MaxCost
	}
	return out
}

// overlay returns base with top's entries set over it, sharing a side's map
// when the other is empty.
func overlay[V any](base, top map[string]V) map[string]V {
	switch {
	case len(top) == 0:
		return base
	case len(base) == 0:
		return top
	}
	out := make(map[string]V, len(base)+len(top))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range top {
		out[k] = v
	}
	return out
}

// Key returns a canonical form of r: equal requirements have equal keys,
// so a dispatcher can cache the instances that satisfy (capability, key).
// The empty requirement's key is "".
func (r Requirement) Key() string {
	if r.Empty() {
		return ""
	}
	r.Permissions = sortedSet(r.Permissions)
	b, _ := json.Marshal(r) // map keys come out sorted; every field marshals
	return string(b)
}

// Match reports whether the declaration satisfies r for capability, and
// when not, why: every condition it fails, each a short phrase naming the
// constraint ("label engine: wants postgres, declares mysql"), joined by
// MatchSeparator — labels by name, then limits by name, permissions,
// latency and cost. It decides what a declaration can
// prove: labels, limits, permissions and refusals, the capability's
// declared timeout_ms against max_latency_ms and its declared cost against
// max_cost. A capability without a declared timeout passes max_latency_ms
// here: the dispatcher judges it by observed latency, as it does for every
// instance. A passing match allocates nothing.
//
// A nil declaration is an instance whose type declares nothing: it proves
// no label, limit, permission or cost, so it satisfies only requirements
// without them (max_latency_ms is still left to the dispatcher).
func (d *CompiledDeclaration) Match(capability string, r Requirement) (ok bool, why string) {
	if d == nil {
		return matchUndeclared(r)
	}
	var failed []string // stays nil, unallocated, while everything passes
	for _, name := range failing(r.Labels, func(name, want string) bool { return slices.Contains(d.decl.Labels[name], want) }) {
		failed = append(failed, fmt.Sprintf("label %s: wants %s, declares %s", name, r.Labels[name], orNone(strings.Join(d.decl.Labels[name], ","))))
	}
	for _, name := range failing(r.Limits, func(name string, want float64) bool {
		limit, ok := d.decl.Limits[name]
		return ok && want <= limit
	}) {
		declared := "none"
		if limit, ok := d.decl.Limits[name]; ok {
			declared = formatNumber(limit)
		}
		failed = append(failed, fmt.Sprintf("limit %s: wants %s, declares %s", name, formatNumber(r.Limits[name]), declared))
	}
	for _, perm := range r.Permissions {
		granted, said := d.perms[perm]
		switch {
		case said && !granted:
			failed = append(failed, "refuses permission "+perm)
		case !said:
			failed = append(failed, "does not declare permission "+perm)
		}
	}
	cc := d.caps[capability]
	if r.MaxLatencyMS != nil && cc != nil && cc.spec.TimeoutMS > 0 && float64(cc.spec.TimeoutMS) > *r.MaxLatencyMS {
		failed = append(failed, fmt.Sprintf("declared timeout_ms %d over max_latency_ms %s", cc.spec.TimeoutMS, formatNumber(*r.MaxLatencyMS)))
	}
	if r.MaxCost != nil {
		switch {
		case cc == nil || cc.spec.Cost == nil:
			failed = append(failed, "declares no cost for "+capability)
		case *cc.spec.Cost > *r.MaxCost:
			failed = append(failed, fmt.Sprintf("declared cost %s over max_cost %s", formatNumber(*cc.spec.Cost), formatNumber(*r.MaxCost)))
		}
	}
	return len(failed) == 0, strings.Join(failed, MatchSeparator)
}

// MatchSeparator separates the failed conditions in Match's why, and in
// the reason of a NO_AGENT answer's excluded entry.
const MatchSeparator = "; "

// matchUndeclared is Match for an instance without a declaration.
func matchUndeclared(r Requirement) (bool, string) {
	var cannot []string
	never := func(string, string) bool { return false }
	for _, name := range failing(r.Labels, never) {
		cannot = append(cannot, "cannot show label "+name)
	}
	for _, name := range failing(r.Limits, func(string, float64) bool { return false }) {
		cannot = append(cannot, "cannot show limit "+name)
	}
	for _, perm := range r.Permissions {
		cannot = append(cannot, "cannot show permission "+perm)
	}
	if r.MaxCost != nil {
		cannot = append(cannot, "cannot show a cost within max_cost")
	}
	if len(cannot) == 0 {
		return true, ""
	}
	return false, "declares nothing: " + strings.Join(cannot, MatchSeparator)
}

// failing returns the names of m's entries that ok refuses, sorted; nil,
// without allocating, when it refuses none.
func failing[V any](m map[string]V, ok func(name string, want V) bool) []string {
	var names []string
	for k, v := range m {
		if !ok(k, v) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

func formatNumber(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
