package spec

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// References. A string value in an input or output mapping, or a
// condition's field or value, that starts with "$" refers to something a
// run knows:
//
//	$input.<path>               the run's input (the request body)
//	$steps.<name>.result.<path> the result of an earlier step
//	$params.<name>.<path>       a parameter (the definition's, or the call's)
//
// A path is dot-separated keys; a key that is a number indexes an array
// ($input.items.0.sku). "$input" alone is the whole input, and so on. A
// literal string that starts with "$" is written with "$$" ("$$5" is the
// string "$5").

// refRoot is what a reference starts from.
type refRoot int

const (
	rootInput refRoot = iota
	rootStep
	rootParam
)

// ref is one parsed reference.
type ref struct {
	text string // as written
	root refRoot
	name string // the step or parameter
	path []string
}

// parseRef reads a reference (s starts with "$", not "$$").
func parseRef(s string) (*ref, error) {
	r := &ref{text: s}
	if strings.HasSuffix(s, ".") {
		return nil, fmt.Errorf("%q: the reference ends with a dot", s)
	}
	var rest string
	switch {
	case s == "$input" || strings.HasPrefix(s, "$input."):
		r.root, rest = rootInput, strings.TrimPrefix(strings.TrimPrefix(s, "$input"), ".")
	case strings.HasPrefix(s, "$steps."):
		r.root = rootStep
		name, after, _ := strings.Cut(strings.TrimPrefix(s, "$steps."), ".")
		result, path, _ := strings.Cut(after, ".")
		if name == "" || result != "result" {
			return nil, fmt.Errorf("%q: want $steps.<name>.result or $steps.<name>.result.<path>", s)
		}
		r.name, rest = name, path
	case strings.HasPrefix(s, "$params."):
		r.root = rootParam
		name, path, _ := strings.Cut(strings.TrimPrefix(s, "$params."), ".")
		if name == "" {
			return nil, fmt.Errorf("%q: want $params.<name>", s)
		}
		r.name, rest = name, path
	default:
		return nil, fmt.Errorf("%q: not a reference (want $input…, $steps.<name>.result… or $params.<name>…; write $$ for a literal $)", s)
	}
	if rest != "" {
		r.path = strings.Split(rest, ".")
		for _, seg := range r.path {
			if seg == "" {
				return nil, fmt.Errorf("%q: a key of the path is empty", s)
			}
		}
	}
	return r, nil
}

// Scope is what references resolve against during a run: its input, its
// parameters, the results of the steps done and why the others have none.
// It is not safe for concurrent use.
type Scope struct {
	input   any
	params  map[string]any
	results map[string]any    // the results of the steps done
	missing map[string]string // why a step has no result: skipped, failed, not run yet
}

// NewScope returns the scope of a run whose input and parameters are
// input and params (JSON; params an object).
func NewScope(input, params json.RawMessage) (*Scope, error) {
	s := &Scope{results: map[string]any{}, missing: map[string]string{}}
	var err error
	if s.input, err = parseJSON(input); err != nil {
		return nil, fmt.Errorf("its input: %w", err)
	}
	p, err := parseJSON(params)
	if err != nil {
		return nil, fmt.Errorf("its params: %w", err)
	}
	s.params, _ = p.(map[string]any)
	return s, nil
}

// SetResult records the result of step (JSON), which references to it
// then read.
func (s *Scope) SetResult(step string, result json.RawMessage) error {
	v, err := parseJSON(result)
	if err != nil {
		return fmt.Errorf("the result of step %s: %w", step, err)
	}
	s.results[step] = v
	return nil
}

// SetMissing records why step has no result (a reference to it says so).
func (s *Scope) SetMissing(step, why string) { s.missing[step] = why }

// resolve returns the value r refers to, or an error naming r and the
// first key that is not there.
func (s *Scope) resolve(r *ref) (any, error) {
	var v any
	var where string
	switch r.root {
	case rootInput:
		v, where = s.input, "the input"
	case rootParam:
		p, ok := s.params[r.name]
		if !ok {
			return nil, fmt.Errorf("%s: no parameter %q", r.text, r.name)
		}
		v, where = p, "parameter "+r.name
	case rootStep:
		res, ok := s.results[r.name]
		if !ok {
			why := s.missing[r.name]
			if why == "" {
				why = "has not run"
			}
			return nil, fmt.Errorf("%s: step %s has no result (it %s)", r.text, r.name, why)
		}
		v, where = res, "the result of step "+r.name
	}
	for i, seg := range r.path {
		at := where
		if i > 0 {
			at += " at " + strings.Join(r.path[:i], ".")
		}
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[seg]
			if !ok {
				return nil, fmt.Errorf("%s: %s has no field %q", r.text, at, seg)
			}
			v = next
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(x) {
				return nil, fmt.Errorf("%s: %s is an array of %d, and %q is not an index of it", r.text, at, len(x), seg)
			}
			v = x[n]
		default:
			return nil, fmt.Errorf("%s: %s is %s, which has no field %q", r.text, at, typeName(v), seg)
		}
	}
	return v, nil
}

// A template is a compiled mapping: the value tree as written, with each
// reference replaced by its *ref.

// compileTemplate compiles a mapping read from a definition at path;
// check validates each reference (the steps and parameters it names).
func compileTemplate(v any, path string, check func(r *ref, path string) error) (any, error) {
	switch x := v.(type) {
	case string:
		if !strings.HasPrefix(x, "$") {
			return x, nil
		}
		if strings.HasPrefix(x, "$$") {
			return x[1:], nil
		}
		r, err := parseRef(x)
		if err == nil {
			err = check(r, path)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", orTop(path), err)
		}
		return r, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) { // the first problem in key order
			c, err := compileTemplate(x[k], joinPath(path, k), check)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := compileTemplate(e, fmt.Sprintf("%s[%d]", path, i), check)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return v, nil
}

// BuildInput builds the payload of st's task in s from its input mapping;
// without one, it is the run's input.
func (st *Step) BuildInput(s *Scope) (json.RawMessage, error) {
	if st.input == nil {
		return encodeJSON(s.input), nil
	}
	v, err := s.fill(st.input)
	if err != nil {
		return nil, err
	}
	return encodeJSON(v), nil
}

// BuildInput builds the payload of b's task in s from its input mapping;
// without one, it is its step's, stepInput.
func (b *Branch) BuildInput(s *Scope, stepInput json.RawMessage) (json.RawMessage, error) {
	if b.input == nil {
		return stepInput, nil
	}
	v, err := s.fill(b.input)
	if err != nil {
		return nil, err
	}
	return encodeJSON(v), nil
}

// BuildOutput builds a run's answer in s from d's output mapping; without
// one, it is the result of the last step done (null if none is).
func (d *Definition) BuildOutput(s *Scope) (json.RawMessage, error) {
	if d.output == nil {
		for i := len(d.Steps) - 1; i >= 0; i-- {
			if res, ok := s.results[d.Steps[i].Name]; ok {
				return encodeJSON(res), nil
			}
		}
		return json.RawMessage("null"), nil
	}
	v, err := s.fill(d.output)
	if err != nil {
		return nil, err
	}
	return encodeJSON(v), nil
}

// fill evaluates a compiled template in s.
func (s *Scope) fill(t any) (any, error) {
	switch x := t.(type) {
	case *ref:
		return s.resolve(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) { // the first problem in key order
			v, err := s.fill(x[k])
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			v, err := s.fill(e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return t, nil
}
