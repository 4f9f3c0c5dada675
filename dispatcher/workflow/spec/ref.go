package spec

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/agent-reach/agentreach/registry/document"
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
// Each is held as the JSON it arrived in, never decoded whole: a reference
// into one extracts the field it names, and a reference to the whole
// passes its bytes on. It is not safe for concurrent use.
type Scope struct {
	input   json.RawMessage
	params  json.RawMessage            // an object
	results map[string]json.RawMessage // the results of the steps done
	missing map[string]string          // why a step has no result: skipped, failed, not run yet
}

// NewScope returns the scope of a run whose input and parameters are
// input and params: JSON, as DecodeBody and Definition.ParamsFor return
// it (or a run's record holds it).
func NewScope(input, params json.RawMessage) *Scope {
	return &Scope{input: jsonValue(input), params: jsonValue(params),
		results: map[string]json.RawMessage{}, missing: map[string]string{}}
}

// SetResult records the result of step, JSON as DecodeBody returns it,
// which references to the step then read.
func (s *Scope) SetResult(step string, result json.RawMessage) {
	s.results[step] = jsonValue(result)
}

// SetMissing records why step has no result (a reference to it says so).
func (s *Scope) SetMissing(step, why string) { s.missing[step] = why }

// resolve returns the value r refers to as a tree (for a condition), or an
// error naming r and the first key that is not there.
func (s *Scope) resolve(r *ref) (any, error) {
	raw, err := s.resolveJSON(r)
	if err != nil {
		return nil, err
	}
	return parseJSON(raw)
}

// resolveJSON returns the JSON of the value r refers to: a slice of the
// value it starts from, which only the keys of r's path are read in.
func (s *Scope) resolveJSON(r *ref) (json.RawMessage, error) {
	var v json.RawMessage
	var where string
	switch r.root {
	case rootInput:
		v, where = s.input, "the input"
	case rootParam:
		p, ok := member(s.params, r.name)
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
		switch kindOf(v) {
		case '{':
			next, ok := member(v, seg)
			if !ok {
				return nil, fmt.Errorf("%s: %s has no field %q", r.text, at, seg)
			}
			v = next
		case '[':
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 {
				n = -1 // no index: element counts the array
			}
			next, length := element(v, n)
			if next == nil {
				return nil, fmt.Errorf("%s: %s is an array of %d, and %q is not an index of it", r.text, at, length, seg)
			}
			v = next
		default:
			return nil, fmt.Errorf("%s: %s is %s, which has no field %q", r.text, at, kindName(v), seg)
		}
	}
	return slices.Clip(v), nil // a slice of a value the run keeps: an append makes a copy
}

// A template is a compiled mapping: each part without a reference encoded
// once, as JSON (literal); an object or array with references in it a
// *tmplObject or *tmplArray; a reference its *ref. Filling one writes
// JSON: the literals as they are, each reference's value as the JSON it
// was found in.

// literal is a part of a template without references, encoded.
type literal json.RawMessage

// literalOf encodes a part without references. Its slice is shared by
// every run, so its capacity is clipped: an append makes a copy.
func literalOf(v any) literal { return literal(slices.Clip(encodeJSON(v))) }

// tmplObject is an object of a template with references in it: its keys
// in order, each encoded with its colon ("key":), and their values.
type tmplObject struct {
	keys [][]byte
	vals []any
}

// tmplArray is an array of a template with references in it.
type tmplArray struct{ vals []any }

// compileTemplate compiles a mapping read from a definition at path;
// check validates each reference (the steps and parameters it names).
func compileTemplate(v any, path string, check func(r *ref, path string) error) (any, error) {
	switch x := v.(type) {
	case string:
		if !strings.HasPrefix(x, "$") {
			return literalOf(x), nil
		}
		if strings.HasPrefix(x, "$$") {
			return literalOf(x[1:]), nil
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
		out := &tmplObject{}
		constant := true
		for _, k := range slices.Sorted(maps.Keys(x)) { // the first problem in key order, as the JSON writes keys
			c, err := compileTemplate(x[k], document.JoinPath(path, k), check)
			if err != nil {
				return nil, err
			}
			_, isLiteral := c.(literal)
			constant = constant && isLiteral
			out.keys = append(out.keys, append(encodeJSON(k), ':'))
			out.vals = append(out.vals, c)
		}
		if constant {
			return literalOf(unescapeLiterals(x)), nil
		}
		return out, nil
	case []any:
		out := &tmplArray{}
		constant := true
		for i, e := range x {
			c, err := compileTemplate(e, fmt.Sprintf("%s[%d]", path, i), check)
			if err != nil {
				return nil, err
			}
			_, isLiteral := c.(literal)
			constant = constant && isLiteral
			out.vals = append(out.vals, c)
		}
		if constant {
			return literalOf(unescapeLiterals(x)), nil
		}
		return out, nil
	}
	return literalOf(v), nil
}

// unescapeLiterals returns a tree without references with its "$$"
// strings written as the literal "$" strings they stand for.
func unescapeLiterals(v any) any {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "$$") {
			return x[1:]
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = unescapeLiterals(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = unescapeLiterals(e)
		}
		return out
	}
	return v
}

// fill appends the JSON of a compiled template, evaluated in s, to b.
func (s *Scope) fill(b []byte, t any) ([]byte, error) {
	switch x := t.(type) {
	case literal:
		return append(b, x...), nil
	case *ref:
		v, err := s.resolveJSON(x)
		if err != nil {
			return nil, err
		}
		return append(b, v...), nil
	case *tmplObject:
		b = append(b, '{')
		for i, k := range x.keys {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = s.fill(append(b, k...), x.vals[i]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case *tmplArray:
		b = append(b, '[')
		for i, e := range x.vals {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = s.fill(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	}
	return nil, fmt.Errorf("template part %T", t) // compileTemplate makes none other
}

// build fills template t in s: its JSON. A reference to a whole value is
// that value's JSON itself.
func (s *Scope) build(t any) (json.RawMessage, error) {
	switch x := t.(type) {
	case literal:
		return json.RawMessage(x), nil
	case *ref:
		return s.resolveJSON(x)
	}
	return s.fill(make([]byte, 0, 128), t)
}

// BuildInput builds the payload of st's task in s from its input mapping;
// without one, it is the run's input.
func (st *Step) BuildInput(s *Scope) (json.RawMessage, error) {
	if st.input == nil {
		return s.input, nil
	}
	return s.build(st.input)
}

// BuildInput builds the payload of b's task in s from its input mapping;
// without one, it is its step's, stepInput.
func (b *Branch) BuildInput(s *Scope, stepInput json.RawMessage) (json.RawMessage, error) {
	if b.input == nil {
		return stepInput, nil
	}
	return s.build(b.input)
}

// BuildOutput builds a run's answer in s from d's output mapping; without
// one, it is the result of the last step done (null if none is).
func (d *Definition) BuildOutput(s *Scope) (json.RawMessage, error) {
	if d.output == nil {
		for i := len(d.Steps) - 1; i >= 0; i-- {
			if res, ok := s.results[d.Steps[i].Name]; ok {
				return res, nil
			}
		}
		return json.RawMessage("null"), nil
	}
	return s.build(d.output)
}
