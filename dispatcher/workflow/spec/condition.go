package spec

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agent-reach/agentreach/registry/document"
)

// Op is the comparison of a condition.
type Op string

// Comparisons. Ordering (gt, ge, lt, le) compares two numbers or two
// strings; eq and ne compare any two values (numbers by value); in holds
// when the field equals an element of the value, an array; exists holds
// when the field is there (value false: when it is not).
const (
	OpEq     Op = "eq"
	OpNe     Op = "ne"
	OpGt     Op = "gt"
	OpGe     Op = "ge"
	OpLt     Op = "lt"
	OpLe     Op = "le"
	OpIn     Op = "in"
	OpExists Op = "exists"
)

var ops = []Op{OpEq, OpNe, OpGt, OpGe, OpLt, OpLe, OpIn, OpExists}

// maxConditionNodes bounds the comparisons and joins of one condition.
const maxConditionNodes = 64

// Condition decides whether a step runs (its when): one comparison of a
// single field — Field, Op and Value — or conditions joined by All (every
// one holds) or Any (at least one does), nested as deep as needed. Field
// is a reference ($input…, $steps.<name>.result…, $params.<name>…);
// Value is a literal or a $params reference: no functions, no
// expressions. All and Any stop at the first condition that decides them,
// so {all: [{field: X, op: exists}, {field: X, op: gt, value: 3}]} never
// compares a missing X.
type Condition struct {
	All   []*Condition    `json:"all,omitempty"`
	Any   []*Condition    `json:"any,omitempty"`
	Field string          `json:"field,omitempty"`
	Op    Op              `json:"op,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`

	field *ref
	value any // a literal, or a *ref to a parameter
}

// compileCondition reads a condition at path from a definition's tree;
// check validates the references, params are the definition's (for the
// types a comparison can be checked against before any run).
func compileCondition(tree any, path string, check func(*ref, string) error, params map[string]any, nodes *int) (*Condition, error) {
	*nodes++
	if *nodes > maxConditionNodes {
		return nil, fmt.Errorf("%s: more than %d comparisons and joins in one condition", path, maxConditionNodes)
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want an object ({field, op, value}, {all: […]} or {any: […]}), got %s", path, typeName(tree))
	}
	if err := knownKeys(obj, path, "all", "any", "field", "op", "value"); err != nil {
		return nil, err
	}
	_, hasAll := obj["all"]
	_, hasAny := obj["any"]
	_, hasField := obj["field"]
	n := 0
	for _, has := range []bool{hasAll, hasAny, hasField} {
		if has {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%s: want exactly one of field (a comparison), all or any", path)
	}
	c := &Condition{}
	if hasAll || hasAny {
		join, key := &c.All, "all"
		if hasAny {
			join, key = &c.Any, "any"
		}
		for _, k := range []string{"op", "value"} {
			if _, set := obj[k]; set {
				return nil, fmt.Errorf("%s.%s: belongs to a comparison, not beside %s", path, k, key)
			}
		}
		list, ok := obj[key].([]any)
		if !ok || len(list) == 0 {
			return nil, fmt.Errorf("%s.%s: want a non-empty array of conditions", path, key)
		}
		for i, sub := range list {
			sc, err := compileCondition(sub, fmt.Sprintf("%s.%s[%d]", path, key, i), check, params, nodes)
			if err != nil {
				return nil, err
			}
			*join = append(*join, sc)
		}
		return c, nil
	}
	field, ok := obj["field"].(string)
	if !ok || !strings.HasPrefix(field, "$") || strings.HasPrefix(field, "$$") {
		return nil, fmt.Errorf("%s.field: want a reference ($input…, $steps.<name>.result…, $params.<name>…), got %s", path, describe(obj["field"]))
	}
	r, err := parseRef(field)
	if err == nil {
		err = check(r, path+".field")
	}
	if err != nil {
		return nil, fmt.Errorf("%s.field: %v", path, err)
	}
	c.Field, c.field = field, r
	op, _ := obj["op"].(string)
	c.Op = Op(op)
	if !slices.Contains(ops, c.Op) {
		return nil, fmt.Errorf("%s.op: %s is not a comparison (want one of eq, ne, gt, ge, lt, le, in, exists)", path, describe(obj["op"]))
	}
	value, hasValue := obj["value"]
	switch {
	case c.Op == OpExists:
		if _, isBool := value.(bool); hasValue && !isBool {
			return nil, fmt.Errorf("%s.value: exists takes true (the default) or false, got %s", path, describe(value))
		}
	case !hasValue:
		return nil, fmt.Errorf("%s.value: %s needs a value to compare with", path, c.Op)
	}
	if hasValue {
		c.Value = encodeJSON(value)
		c.value = value
		if s, isStr := value.(string); isStr && strings.HasPrefix(s, "$") {
			if strings.HasPrefix(s, "$$") {
				c.value = s[1:]
			} else {
				vr, err := parseRef(s)
				if err == nil && vr.root != rootParam {
					err = fmt.Errorf("%q: a condition compares with literals or $params.<name>, not with %s", s, map[refRoot]string{rootInput: "the input", rootStep: "a step's result"}[vr.root])
				}
				if err == nil {
					err = check(vr, path+".value")
				}
				if err != nil {
					return nil, fmt.Errorf("%s.value: %v", path, err)
				}
				c.value = vr
			}
		}
	}
	if err := c.checkTypes(params); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return c, nil
}

// checkTypes refuses a comparison whose types are known to clash before
// any run: the value's (a literal, or a parameter's default) and, for a
// parameter field, the field's. A null default says nothing about type.
func (c *Condition) checkTypes(params map[string]any) error {
	known := &Scope{params: encodeJSON(params)}
	value, valueKnown := c.value, true
	if r, isRef := c.value.(*ref); isRef {
		v, err := known.resolve(r)
		if err != nil {
			return err
		}
		value, valueKnown = v, v != nil
	}
	var field any
	fieldKnown := false
	if c.field.root == rootParam {
		v, err := known.resolve(c.field)
		if err != nil {
			return err
		}
		field, fieldKnown = v, v != nil
	}
	switch c.Op {
	case OpGt, OpGe, OpLt, OpLe:
		if valueKnown && !ordered(value) {
			return fmt.Errorf("%s compares numbers or strings, not %s (%s)", c.Op, typeName(value), describe(value))
		}
		if valueKnown && fieldKnown {
			if _, ok := compare(field, value); !ok {
				return fmt.Errorf("%s is %s, which %s cannot compare with %s", c.Field, typeName(field), c.Op, typeName(value))
			}
		}
	case OpIn:
		if _, isArr := value.([]any); valueKnown && !isArr {
			return fmt.Errorf("in takes an array of values, not %s (%s)", typeName(value), describe(value))
		}
	}
	return nil
}

// Eval reports whether c holds in s, writing what it looked at to trace.
// A comparison whose field is missing (other than exists), or whose
// values cannot be compared, is an error naming the condition at path.
func (c *Condition) Eval(s *Scope, path string, trace *strings.Builder) (bool, error) {
	if c.All != nil || c.Any != nil {
		list, key, stopAt := c.All, "all", false
		if c.Any != nil {
			list, key, stopAt = c.Any, "any", true
		}
		trace.WriteString(key + "[")
		result := !stopAt
		for i, sub := range list {
			if i > 0 {
				trace.WriteString(", ")
			}
			v, err := sub.Eval(s, fmt.Sprintf("%s.%s[%d]", path, key, i), trace)
			if err != nil {
				return false, err
			}
			if v == stopAt {
				result = stopAt
				break
			}
		}
		fmt.Fprintf(trace, "] → %v", result)
		return result, nil
	}
	field, ferr := s.resolve(c.field)
	if c.Op == OpExists {
		want := true
		if b, isBool := c.value.(bool); isBool {
			want = b
		}
		got := ferr == nil
		present := "absent"
		if got {
			present = describe(field)
		}
		fmt.Fprintf(trace, "%s (%s) exists", c.Field, present)
		if !want {
			trace.WriteString(" false")
		}
		fmt.Fprintf(trace, " → %v", got == want)
		return got == want, nil
	}
	if ferr != nil {
		return false, fmt.Errorf("%s: %v", path, ferr)
	}
	value := c.value
	valueText := string(c.Value)
	if r, isRef := c.value.(*ref); isRef {
		v, err := s.resolve(r)
		if err != nil {
			return false, fmt.Errorf("%s: %v", path, err)
		}
		value, valueText = v, fmt.Sprintf("%s (%s)", r.text, describe(v))
	}
	var result bool
	switch c.Op {
	case OpEq, OpNe:
		result = equal(field, value) == (c.Op == OpEq)
	case OpIn:
		list, ok := value.([]any)
		if !ok {
			return false, fmt.Errorf("%s: in takes an array of values, and %s is %s", path, valueText, typeName(value))
		}
		result = slices.ContainsFunc(list, func(e any) bool { return equal(field, e) })
	default:
		n, ok := compare(field, value)
		if !ok {
			return false, fmt.Errorf("%s: %s is %s (%s), which %s cannot compare with %s %s",
				path, c.Field, typeName(field), describe(field), c.Op, typeName(value), valueText)
		}
		switch c.Op {
		case OpGt:
			result = n > 0
		case OpGe:
			result = n >= 0
		case OpLt:
			result = n < 0
		case OpLe:
			result = n <= 0
		}
	}
	fmt.Fprintf(trace, "%s (%s) %s %s → %v", c.Field, describe(field), c.Op, valueText, result)
	return result, nil
}

// String writes the condition as it reads: "any[$a lt 0.3, $b gt $params.t]".
func (c *Condition) String() string {
	if c.All != nil || c.Any != nil {
		list, key := c.All, "all"
		if c.Any != nil {
			list, key = c.Any, "any"
		}
		parts := make([]string, len(list))
		for i, sub := range list {
			parts[i] = sub.String()
		}
		return key + "[" + strings.Join(parts, ", ") + "]"
	}
	switch v := c.value.(type) {
	case nil:
		if c.Value == nil {
			return c.Field + " " + string(c.Op)
		}
	case *ref:
		return c.Field + " " + string(c.Op) + " " + v.text
	}
	return c.Field + " " + string(c.Op) + " " + string(c.Value)
}

// knownKeys refuses a key of obj not among allowed, naming it and what is
// allowed.
func knownKeys(obj map[string]any, path string, allowed ...string) error {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("%s: unknown field (want one of %s)", document.JoinPath(path, k), strings.Join(allowed, ", "))
		}
	}
	return nil
}
