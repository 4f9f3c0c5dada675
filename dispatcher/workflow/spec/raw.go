package spec

import (
	"bytes"
	"encoding/json"
	"slices"
)

// Lazy field access. A run's values are held as JSON (Scope); a reference
// reads into one by scanning it: the members of each object on its path
// are skipped over, not decoded, and what it finds is a slice of the
// value, which a mapping passes on as it is. The values are valid JSON
// (DecodeBody checked them, or a run's record held them); on anything
// else the scan finds nothing, and never reads out of bounds.

// jsonValue returns a JSON value without the space around it, its
// capacity clipped (an append makes a copy); null when it is empty.
func jsonValue(b json.RawMessage) json.RawMessage {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return slices.Clip(b)
}

// kindOf returns the first byte of a JSON value: '{', '[', '"', 't', 'f'
// or 'n'; '0' for a number (and for nothing, which no value is).
func kindOf(v json.RawMessage) byte {
	if len(v) == 0 {
		return '0'
	}
	switch c := v[0]; c {
	case '{', '[', '"', 't', 'f', 'n':
		return c
	}
	return '0'
}

// kindName names a JSON value's type for an error, as typeName does.
func kindName(v json.RawMessage) string {
	switch kindOf(v) {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the index of the first byte of b from i that is no
// space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringEnd returns the index just past the closing quote of the string
// that starts at b[i], or -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexAny(b[j:], `"\`)
		switch {
		case k < 0:
			return -1
		case b[j+k] == '"':
			return j + k + 1
		}
		j += k + 2 // a backslash and the byte it escapes
	}
	return -1
}

// valueEnd returns the index just past the value that starts at b[i], or
// -1.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := stringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i // a number, true, false or null: up to what ends it
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
		j++
	}
	return j
}

// member returns the value of key in the JSON object obj (the last one,
// as a decoder keeps, when the key is there twice), and whether it is
// there.
func member(obj json.RawMessage, key string) (json.RawMessage, bool) {
	b := []byte(obj)
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	var found json.RawMessage
	ok := false
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return nil, false
	}
	for i < len(b) && b[i] == '"' {
		kend := stringEnd(b, i)
		if kend < 0 {
			return nil, false
		}
		k := b[i+1 : kend-1]
		if i = skipSpace(b, kend); i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		vend := valueEnd(b, i)
		if vend < 0 {
			return nil, false
		}
		if keyIs(k, key) {
			found, ok = b[i:vend], true
		}
		switch i = skipSpace(b, vend); {
		case i < len(b) && b[i] == '}':
			return found, ok
		case i >= len(b) || b[i] != ',':
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
	return nil, false
}

// keyIs reports whether the quoted content raw of an object's key is key.
func keyIs(raw []byte, key string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == key
	}
	var k string
	quoted := append(append([]byte{'"'}, raw...), '"')
	return json.Unmarshal(quoted, &k) == nil && k == key
}

// element returns element n (from 0) of the JSON array arr; nil when it
// has no element n, with its length.
func element(arr json.RawMessage, n int) (json.RawMessage, int) {
	b := []byte(arr)
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, 0
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == ']' {
		return nil, 0
	}
	for count := 0; i < len(b); count++ {
		end := valueEnd(b, i)
		if end < 0 {
			return nil, count
		}
		if count == n {
			return b[i:end], 0
		}
		switch i = skipSpace(b, end); {
		case i < len(b) && b[i] == ']':
			return nil, count + 1
		case i >= len(b) || b[i] != ',':
			return nil, count + 1
		}
		i = skipSpace(b, i+1)
	}
	return nil, 0
}
