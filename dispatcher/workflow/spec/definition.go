package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/registry/document"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// Definitions live in REACH_POLICY under PolicyPrefix + their name; the
// package registers the kind, so `agentreach policy` and every watcher of
// the bucket validate them with Parse's rules.
const (
	// PolicyKind is the REACH_POLICY key family of workflow definitions.
	PolicyKind = "workflow"
	// PolicyPrefix starts the key of one definition: "workflow.claim.review".
	PolicyPrefix = PolicyKind + "."
	// MaxSteps bounds the steps of one definition.
	MaxSteps = 64
)

func init() { policy.RegisterKind(PolicyKind, decodePolicy) }

// Definition is a declarative workflow (docs/workflows.md): called like a
// capability by its Name, it runs its Steps in order, each a call or a
// parallel group, and answers with its Output. Build one with Parse; a
// Definition marshals to the JSON it was read from, canonicalised.
type Definition struct {
	// Name is what callers call: reach.task.<name>, reach.submit.<name>.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Params are the runtime parameters with their defaults; a call may
	// override them (HeaderParams).
	Params map[string]json.RawMessage `json:"params,omitempty"`
	Steps  []*Step                    `json:"steps"`
	// Output maps what the run answers; without it, the result of the last
	// step that ran.
	Output json.RawMessage `json:"output,omitempty"`

	params     map[string]any
	paramsJSON json.RawMessage // the defaults, encoded once
	output     any             // compiled template
	index      map[string]int
}

// Step is one step of a Definition: Call (one task to a capability) or
// Parallel (a fan-out), run when When holds.
type Step struct {
	// Name identifies the step: letters, digits, '_' and '-'.
	Name string `json:"name"`
	// Call is the capability the step's task goes to.
	Call string `json:"call,omitempty"`
	// Parallel runs branches at once instead of one call.
	Parallel *Parallel `json:"parallel,omitempty"`
	// Input maps the step's payload; without it, the run's input.
	Input json.RawMessage `json:"input,omitempty"`
	// When, if set, decides whether the step runs; a step whose condition
	// is false is skipped.
	When *Condition `json:"when,omitempty"`
	// Critical: the step's failure ends the run after compensating the
	// steps done before it, in reverse order.
	Critical bool `json:"critical,omitempty"`
	// OnFailure says what a failure of the step does; nil means abort.
	OnFailure *OnFailure `json:"on_failure,omitempty"`
	// Compensate is the capability that undoes the step when a later
	// critical step fails.
	Compensate string `json:"compensate,omitempty"`
	// TimeoutMS bounds the step's task (its Reach-Timeout); 0: the
	// dispatcher's per-call timeout.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`

	input any // compiled template; nil: the run's input
}

// Parallel is a step that runs its branches at once and completes by its
// Mode: all (the default), quorum (Quorum of them succeed: a fraction
// below 1 or a count) or first. Its result is an object with the result
// of each branch that succeeded, by branch name.
type Parallel struct {
	Mode      fanout.Mode `json:"mode,omitempty"`
	Quorum    *float64    `json:"quorum,omitempty"`
	MaxWaitMS int64       `json:"max_wait_ms,omitempty"`
	Branches  []*Branch   `json:"branches"`

	quorum fanout.Quorum
}

// QuorumRule is the step's quorum as fanout.Gather takes it (meaningful in
// mode quorum).
func (p *Parallel) QuorumRule() fanout.Quorum { return p.quorum }

// Branch is one task of a Parallel step.
type Branch struct {
	Name string `json:"name"`
	Call string `json:"call"`
	// Input maps the branch's payload; without it, the step's.
	Input     json.RawMessage `json:"input,omitempty"`
	TimeoutMS int64           `json:"timeout_ms,omitempty"`

	input any
}

// Action is what a step's failure does.
type Action string

// Failure actions.
const (
	// ActionAbort ends the run; a critical step's compensations run first.
	ActionAbort Action = "abort"
	// ActionSkip goes on with the next step, as if the step had not run.
	ActionSkip Action = "skip"
	// ActionFallback calls another capability with the step's input; its
	// result stands in for the step's, and its failure aborts.
	ActionFallback Action = "fallback"
)

// OnFailure is a step's failure policy: "skip", "abort" or
// {"fallback": "<capability>"}.
type OnFailure struct {
	Action   Action
	Fallback string // the capability of ActionFallback
}

// MarshalJSON writes "skip", "abort" or {"fallback": "<capability>"}.
func (o OnFailure) MarshalJSON() ([]byte, error) {
	if o.Action == ActionFallback {
		return json.Marshal(map[string]string{"fallback": o.Fallback})
	}
	return json.Marshal(string(o.Action))
}

// Action returns what a failure of st does: its OnFailure's action, abort
// without one.
func (st *Step) Action() Action {
	if st.OnFailure == nil {
		return ActionAbort
	}
	return st.OnFailure.Action
}

// Parse reads a definition from JSON or YAML (go.yaml.in/yaml/v3, as every
// document of Agent-Reach), strictly — an unknown field, a key given twice
// or a value of the wrong type is an error — and validates it: step names
// unique, references only to earlier steps and to declared params,
// conditions of the allowed shape with comparable types, known modes,
// valid capability names, no step calling the workflow itself. Every error
// wraps ErrInvalidDefinition and names the step and the field.
func Parse(data []byte) (*Definition, error) {
	// ParsePolicy reads YAML as every REACH_POLICY value is read and hands
	// the JSON to decodePolicy; the key "workflow" checks no name.
	v, err := policy.Parse(PolicyKind, data)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), policy.ErrInvalid.Error()+": "+PolicyKind+": ")
		return nil, fmt.Errorf("%w: %s", ErrInvalidDefinition, msg)
	}
	return v.Decoded.(*Definition), nil
}

// decodePolicy is the REACH_POLICY decoder of the workflow kind: the value
// of "workflow.<name>" must define <name>.
func decodePolicy(key string, value json.RawMessage) (any, error) {
	def, err := Decode(value)
	if err != nil {
		return nil, err
	}
	if name, ok := strings.CutPrefix(key, PolicyPrefix); ok && name != def.Name {
		return nil, fmt.Errorf("name: %q, but the key is %s (a definition is stored under %s<its name>)", def.Name, key, PolicyPrefix)
	}
	return def, nil
}

// Decode reads and validates a definition from JSON (a Definition
// marshalled, as a run's record keeps it), by Parse's rules; its errors
// do not wrap ErrInvalidDefinition.
func Decode(data []byte) (*Definition, error) {
	tree, err := document.ReadTree(data)
	if err != nil {
		return nil, err
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want an object with name and steps, got %s", typeName(tree))
	}
	if err := knownKeys(obj, "", "name", "description", "params", "steps", "output"); err != nil {
		return nil, err
	}
	d := &Definition{index: map[string]int{}, params: map[string]any{}}
	if d.Name, err = str(obj, "name", "name", true); err != nil {
		return nil, err
	}
	if err := streams.ValidateCapability(d.Name); err != nil {
		return nil, fmt.Errorf("name: %v (a workflow is called like a capability)", err)
	}
	if d.Description, err = str(obj, "description", "description", false); err != nil {
		return nil, err
	}
	if raw, set := obj["params"]; set {
		params, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("params: want an object of names and default values, got %s", typeName(raw))
		}
		d.Params = make(map[string]json.RawMessage, len(params))
		for _, k := range slices.Sorted(maps.Keys(params)) {
			if streams.ValidateInstanceID(k) != nil {
				return nil, fmt.Errorf("params.%s: a parameter name is letters, digits, '_' and '-'", k)
			}
			d.params[k] = params[k]
			d.Params[k] = encodeJSON(params[k])
		}
	}
	d.paramsJSON = slices.Clip(encodeJSON(d.params)) // shared by every run: an append makes a copy
	steps, ok := obj["steps"].([]any)
	switch {
	case !ok:
		return nil, fmt.Errorf("steps: want an array of steps, got %s", typeName(obj["steps"]))
	case len(steps) == 0:
		return nil, errors.New("steps: a workflow needs at least one step")
	case len(steps) > MaxSteps:
		return nil, fmt.Errorf("steps: %d, more than the %d allowed", len(steps), MaxSteps)
	}
	for i, raw := range steps {
		st, err := d.decodeStep(i, raw)
		if err != nil {
			return nil, err
		}
		d.index[st.Name] = i
		d.Steps = append(d.Steps, st)
	}
	if raw, set := obj["output"]; set {
		if d.output, err = compileTemplate(raw, "output", d.refCheck("the output")); err != nil {
			return nil, err
		}
		d.Output = encodeJSON(raw)
	}
	return d, nil
}

// refCheck validates a reference made in what ("this step", "the
// output"): it may name a declared parameter, and only a step read
// already — for a step, the steps before it; for the output, any step.
func (d *Definition) refCheck(what string) func(r *ref, path string) error {
	return func(r *ref, _ string) error {
		switch r.root {
		case rootStep:
			if _, ok := d.index[r.name]; !ok {
				return fmt.Errorf("%s: %q is not a step before %s (a step may use only the results of earlier steps)", r.text, r.name, what)
			}
		case rootParam:
			if _, ok := d.params[r.name]; !ok {
				return fmt.Errorf("%s: no parameter %q in params (%s)", r.text, r.name, strings.Join(slices.Sorted(maps.Keys(d.params)), ", "))
			}
		}
		return nil
	}
}

// decodeStep reads step i.
func (d *Definition) decodeStep(i int, raw any) (*Step, error) {
	path := fmt.Sprintf("steps[%d]", i)
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want an object, got %s", path, typeName(raw))
	}
	st := &Step{}
	name, err := str(obj, "name", path+".name", true)
	if err != nil {
		return nil, err
	}
	if streams.ValidateInstanceID(name) != nil {
		return nil, fmt.Errorf("%s.name: %q: want 1 to %d letters, digits, '_' and '-'", path, name, streams.MaxNameLength)
	}
	if j, dup := d.index[name]; dup {
		return nil, fmt.Errorf("%s.name: %q is also the name of steps[%d]", path, name, j)
	}
	st.Name = name
	path = fmt.Sprintf("step %q (steps[%d])", name, i)
	if err := knownKeys(obj, path, "name", "call", "parallel", "input", "when", "critical", "on_failure", "compensate", "timeout_ms"); err != nil {
		return nil, err
	}
	check := d.refCheck("this step")
	_, hasCall := obj["call"]
	_, hasParallel := obj["parallel"]
	switch {
	case hasCall == hasParallel:
		return nil, fmt.Errorf("%s: want exactly one of call (a capability) or parallel (branches)", path)
	case hasCall:
		if st.Call, err = d.capability(obj, "call", path); err != nil {
			return nil, err
		}
	default:
		if st.Parallel, err = d.decodeParallel(obj["parallel"], path+".parallel", check); err != nil {
			return nil, err
		}
	}
	if raw, set := obj["input"]; set {
		if st.input, err = compileTemplate(raw, path+".input", check); err != nil {
			return nil, err
		}
		st.Input = encodeJSON(raw)
	}
	if raw, set := obj["when"]; set {
		nodes := 0
		if st.When, err = compileCondition(raw, path+".when", check, d.params, &nodes); err != nil {
			return nil, err
		}
	}
	if raw, set := obj["critical"]; set {
		if st.Critical, ok = raw.(bool); !ok {
			return nil, fmt.Errorf("%s.critical: want true or false, got %s", path, describe(raw))
		}
	}
	if raw, set := obj["on_failure"]; set {
		if st.OnFailure, err = d.decodeOnFailure(raw, path+".on_failure"); err != nil {
			return nil, err
		}
		if st.Critical && st.OnFailure.Action == ActionSkip {
			return nil, fmt.Errorf("%s.on_failure: a critical step's failure ends the run, so it cannot be skip", path)
		}
	}
	if _, set := obj["compensate"]; set {
		if st.Compensate, err = d.capability(obj, "compensate", path); err != nil {
			return nil, err
		}
	}
	if st.TimeoutMS, err = millis(obj, "timeout_ms", path); err != nil {
		return nil, err
	}
	return st, nil
}

func (d *Definition) decodeParallel(raw any, path string, check func(*ref, string) error) (*Parallel, error) {
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want an object with branches, got %s", path, typeName(raw))
	}
	if err := knownKeys(obj, path, "mode", "quorum", "max_wait_ms", "branches"); err != nil {
		return nil, err
	}
	p := &Parallel{}
	branches, ok := obj["branches"].([]any)
	switch {
	case !ok:
		return nil, fmt.Errorf("%s.branches: want an array of {name, call}, got %s", path, typeName(obj["branches"]))
	case len(branches) == 0:
		return nil, fmt.Errorf("%s.branches: a parallel step needs at least one branch", path)
	case len(branches) > fanout.MaxBranches:
		return nil, fmt.Errorf("%s.branches: %d, more than the %d allowed", path, len(branches), fanout.MaxBranches)
	}
	seen := map[string]int{}
	for i, rb := range branches {
		bpath := fmt.Sprintf("%s.branches[%d]", path, i)
		bobj, ok := rb.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want an object with name and call, got %s", bpath, typeName(rb))
		}
		if err := knownKeys(bobj, bpath, "name", "call", "input", "timeout_ms"); err != nil {
			return nil, err
		}
		b := &Branch{}
		var err error
		if b.Name, err = str(bobj, "name", bpath+".name", true); err != nil {
			return nil, err
		}
		if streams.ValidateInstanceID(b.Name) != nil {
			return nil, fmt.Errorf("%s.name: %q: want letters, digits, '_' and '-'", bpath, b.Name)
		}
		if j, dup := seen[b.Name]; dup {
			return nil, fmt.Errorf("%s.name: %q is also the name of branches[%d]", bpath, b.Name, j)
		}
		seen[b.Name] = i
		if b.Call, err = d.capability(bobj, "call", bpath); err != nil {
			return nil, err
		}
		if raw, set := bobj["input"]; set {
			if b.input, err = compileTemplate(raw, bpath+".input", check); err != nil {
				return nil, err
			}
			b.Input = encodeJSON(raw)
		}
		if b.TimeoutMS, err = millis(bobj, "timeout_ms", bpath); err != nil {
			return nil, err
		}
		p.Branches = append(p.Branches, b)
	}
	mode, err := str(obj, "mode", path+".mode", false)
	if err != nil {
		return nil, err
	}
	p.Mode = fanout.Mode(mode)
	if raw, set := obj["quorum"]; set {
		n, ok := raw.(json.Number)
		f, ferr := strconv.ParseFloat(string(n), 64)
		if !ok || ferr != nil {
			return nil, fmt.Errorf("%s.quorum: want a fraction between 0 and 1 (0.6) or a count (2), got %s", path, describe(raw))
		}
		q, err := fanout.NewQuorum(f)
		if err != nil {
			return nil, fmt.Errorf("%s.quorum: %v", path, err)
		}
		if q.Count > len(p.Branches) {
			return nil, fmt.Errorf("%s.quorum: %d, more than the %d branches", path, q.Count, len(p.Branches))
		}
		p.Quorum, p.quorum = &f, q
	}
	switch {
	case p.Mode == "" && p.Quorum != nil:
		p.Mode = fanout.ModeQuorum
	case p.Mode == "":
		p.Mode = fanout.ModeAll
	case p.Mode != fanout.ModeAll && p.Mode != fanout.ModeQuorum && p.Mode != fanout.ModeFirst:
		return nil, fmt.Errorf("%s.mode: %q: want all, quorum or first", path, mode)
	case p.Mode != fanout.ModeQuorum && p.Quorum != nil:
		return nil, fmt.Errorf("%s.quorum: applies to mode quorum, not %s", path, p.Mode)
	}
	if p.MaxWaitMS, err = millis(obj, "max_wait_ms", path); err != nil {
		return nil, err
	}
	return p, nil
}

func (d *Definition) decodeOnFailure(raw any, path string) (*OnFailure, error) {
	switch v := raw.(type) {
	case string:
		switch Action(v) {
		case ActionSkip, ActionAbort:
			return &OnFailure{Action: Action(v)}, nil
		}
	case map[string]any:
		if err := knownKeys(v, path, "fallback"); err != nil {
			return nil, err
		}
		c, err := d.capability(v, "fallback", path)
		if err != nil {
			return nil, err
		}
		return &OnFailure{Action: ActionFallback, Fallback: c}, nil
	}
	return nil, fmt.Errorf("%s: want skip, abort or {fallback: <capability>}, got %s", path, describe(raw))
}

// capability reads obj[key], a capability other than the workflow itself.
func (d *Definition) capability(obj map[string]any, key, path string) (string, error) {
	c, err := str(obj, key, path+"."+key, true)
	if err != nil {
		return "", err
	}
	if err := streams.ValidateCapability(c); err != nil {
		return "", fmt.Errorf("%s.%s: %v", path, key, err)
	}
	if c == d.Name {
		return "", fmt.Errorf("%s.%s: %q is this workflow: a step calling it would run it again, without end", path, key, c)
	}
	return c, nil
}

// str reads obj[key] as a string; a missing key is "" unless required.
func str(obj map[string]any, key, path string, required bool) (string, error) {
	raw, set := obj[key]
	if !set {
		if required {
			return "", fmt.Errorf("%s: required", path)
		}
		return "", nil
	}
	s, ok := raw.(string)
	if !ok || required && s == "" {
		return "", fmt.Errorf("%s: want a non-empty string, got %s", path, describe(raw))
	}
	return s, nil
}

// maxMS caps millisecond fields: a day.
const maxMS = 24 * 60 * 60 * 1000

// millis reads obj[key], a whole number of milliseconds from 0 to a day.
func millis(obj map[string]any, key, path string) (int64, error) {
	raw, set := obj[key]
	if !set {
		return 0, nil
	}
	n, ok := raw.(json.Number)
	v, err := strconv.ParseInt(string(n), 10, 64)
	if !ok || err != nil || v < 0 || v > maxMS {
		return 0, fmt.Errorf("%s.%s: want whole milliseconds from 0 to %d, got %s", path, key, maxMS, describe(raw))
	}
	return v, nil
}

// Step returns the step called name, or nil.
func (d *Definition) Step(name string) *Step {
	if i, ok := d.index[name]; ok {
		return d.Steps[i]
	}
	return nil
}

// StepIndex returns the index in Steps of the step called name, or -1.
func (d *Definition) StepIndex(name string) int {
	if i, ok := d.index[name]; ok {
		return i
	}
	return -1
}

// ParamsFor returns a run's parameters as a JSON object: the defaults,
// overridden by the caller's JSON object (HeaderParams), each of a known
// name and of its default's type (any type where the default is null).
func (d *Definition) ParamsFor(override string) (json.RawMessage, error) {
	if override == "" {
		return d.paramsJSON, nil
	}
	out := maps.Clone(d.params)
	v, err := parseJSON([]byte(override))
	obj, ok := v.(map[string]any)
	if err != nil || !ok {
		return nil, fmt.Errorf("header %s: want a JSON object of parameters, got %q", HeaderParams, override)
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		def, known := d.params[k]
		switch {
		case !known:
			return nil, fmt.Errorf("header %s: %s has no parameter %q (it has: %s)", HeaderParams, d.Name, k, strings.Join(slices.Sorted(maps.Keys(d.params)), ", "))
		case def != nil && typeName(def) != typeName(obj[k]):
			return nil, fmt.Errorf("header %s: parameter %s is %s, got %s", HeaderParams, k, typeName(def), typeName(obj[k]))
		}
		out[k] = obj[k]
	}
	return encodeJSON(out), nil
}
