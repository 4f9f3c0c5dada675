package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agent-reach/agentreach/streams"
)

// Values. Everything a run handles — its input, its params, the steps'
// results — is held as JSON (Scope, raw.go). What a condition compares is
// read from it into a value tree: map[string]any, []any, string,
// json.Number, bool and nil. Numbers stay json.Number, so an integer too
// large for a float64 compares exactly; comparisons read them as int64
// when both sides are integers, else as float64.

// orTop names the top of a document when path is empty.
func orTop(path string) string {
	if path == "" {
		return "document"
	}
	return path
}

// parseJSON reads one JSON value into a tree; empty input is null.
func parseJSON(data []byte) (any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// DecodeBody reads a message body of contentType (JSON or msgpack) as one
// JSON value, null when it is empty; a BAD_REQUEST says what is wrong with
// it. JSON is checked, not decoded: the value is the body's own bytes
// (without the space around it), unless it holds invalid UTF-8, which is
// replaced as a decoder would.
func DecodeBody(contentType string, data []byte) (json.RawMessage, *streams.Error) {
	if contentType == streams.ContentTypeJSON {
		b := jsonValue(data)
		if json.Valid(b) && utf8.Valid(b) {
			return b, nil
		}
		v, err := parseJSON(b)
		if err != nil {
			return nil, streams.NewError(streams.CodeBadRequest, "payload is not valid JSON: %v", err)
		}
		return encodeJSON(v), nil
	}
	var v any
	if err := streams.Decode(contentType, data, &v); err != nil {
		return nil, streams.AsError(err)
	}
	// msgpack's values (int64, []byte, …) become JSON's.
	b, err := json.Marshal(v)
	if err != nil {
		return nil, streams.NewError(streams.CodeBadRequest, "payload cannot be read as JSON values: %v", err)
	}
	return b, nil
}

// encodeJSON writes a tree as JSON; a tree always encodes.
func encodeJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// typeName names a value's JSON type for an error.
func typeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("a %T", v)
}

// describe writes a value short enough for a decision's text.
func describe(v any) string {
	b := encodeJSON(v)
	const most = 80
	if len(b) > most {
		return string(b[:most]) + "…"
	}
	return string(b)
}

// equal reports whether two trees are the same JSON value, numbers
// compared by value (1 equals 1.0).
func equal(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		c, _ := compareNumbers(a, bn)
		return c == 0
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			w, ok := bm[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		ba, ok := b.([]any)
		if !ok || len(a) != len(ba) {
			return false
		}
		for i := range a {
			if !equal(a[i], ba[i]) {
				return false
			}
		}
		return true
	case string:
		bs, ok := b.(string)
		return ok && a == bs
	case bool:
		bb, ok := b.(bool)
		return ok && a == bb
	case nil:
		return b == nil
	}
	return false
}

// ordered reports whether a value can be ordered: a number or a string.
func ordered(v any) bool {
	switch v.(type) {
	case json.Number, string:
		return true
	}
	return false
}

// compare orders two numbers or two strings; ok is false for any other
// pair.
func compare(a, b any) (c int, ok bool) {
	switch a := a.(type) {
	case json.Number:
		if bn, isNum := b.(json.Number); isNum {
			return compareNumbers(a, bn)
		}
	case string:
		if bs, isStr := b.(string); isStr {
			return strings.Compare(a, bs), true
		}
	}
	return 0, false
}

// compareNumbers orders two JSON numbers: as integers when both are, else
// as floats. ok is false for a number neither reading takes (it cannot
// come from a JSON parser).
func compareNumbers(a, b json.Number) (int, bool) {
	ai, aerr := strconv.ParseInt(string(a), 10, 64)
	bi, berr := strconv.ParseInt(string(b), 10, 64)
	if aerr == nil && berr == nil {
		return cmp3(ai, bi), true
	}
	af, aerr := strconv.ParseFloat(string(a), 64)
	bf, berr := strconv.ParseFloat(string(b), 64)
	if aerr != nil && !errors.Is(aerr, strconv.ErrRange) || berr != nil && !errors.Is(berr, strconv.ErrRange) {
		return 0, false
	}
	return cmp3(af, bf), true
}

func cmp3[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
