package deploy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A reader for the plain subset of YAML that docker-compose.yml keeps to, so
// the tests need nothing beyond the standard library: block mappings, block
// sequences of scalars, one-line flow sequences and mappings, plain, single-
// and double-quoted scalars, and comments. Anything else (anchors, aliases,
// merge keys, tags, multi-line scalars, sequences of mappings) is reported as
// unsupported with its line number rather than misread. Scalars stay strings.

type yamlLine struct {
	num    int    // 1-based line number
	indent int    // leading spaces
	text   string // without indentation and comment
}

func parseYAMLSubset(src string) (map[string]any, error) {
	var lines []yamlLine
	for i, raw := range strings.Split(src, "\n") {
		raw = strings.TrimRight(raw, " \r")
		body := strings.TrimLeft(raw, " ")
		if strings.HasPrefix(body, "\t") {
			return nil, fmt.Errorf("line %d: tab in indentation", i+1)
		}
		text, err := stripYAMLComment(body)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		if text == "" || (text == "---" && len(lines) == 0) {
			continue
		}
		lines = append(lines, yamlLine{num: i + 1, indent: len(raw) - len(body), text: text})
	}
	if len(lines) == 0 {
		return map[string]any{}, nil
	}
	p := &yamlParser{lines: lines}
	if lines[0].indent != 0 {
		return nil, fmt.Errorf("line %d: document must start at column 1", lines[0].num)
	}
	v, err := p.block(0)
	if err != nil {
		return nil, err
	}
	if p.i < len(p.lines) {
		return nil, fmt.Errorf("line %d: unexpected content after the document", p.lines[p.i].num)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("top level is not a mapping")
	}
	return m, nil
}

// stripYAMLComment removes a trailing "# comment" outside quotes and trailing
// blanks.
func stripYAMLComment(s string) (string, error) {
	// Quotes only open a scalar at its start, after ": ", "- ", "[", "{" or ",".
	opens := func(i int) bool { return i == 0 || strings.ContainsRune(" [{,", rune(s[i-1])) }
	cut := -1
	open := eachUnquoted(s, opens, func(i int, c byte) bool {
		if c == '#' && (i == 0 || s[i-1] == ' ') {
			cut = i
			return false
		}
		return true
	})
	if cut >= 0 {
		return strings.TrimRight(s[:cut], " "), nil
	}
	if open != 0 {
		return "", fmt.Errorf("unterminated %c-quoted scalar (multi-line scalars are not supported)", open)
	}
	return s, nil
}

// eachUnquoted calls fn with the index and byte of every character of s
// outside quoted scalars, in order, until fn returns false. A quote opens
// a scalar where opens(i) allows it; inside double quotes a backslash
// escapes the next byte. It returns the quote still open at the end, 0 if
// none.
func eachUnquoted(s string, opens func(i int) bool, fn func(i int, c byte) bool) byte {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case (c == '"' || c == '\'') && opens(i):
			quote = c
		case !fn(i, c):
			return quote
		}
	}
	return quote
}

type yamlParser struct {
	lines []yamlLine
	i     int
}

func isSeqItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

// block parses the mapping or sequence whose lines start at column indent.
func (p *yamlParser) block(indent int) (any, error) {
	if isSeqItem(p.lines[p.i].text) {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func (p *yamlParser) mapping(indent int) (any, error) {
	m := map[string]any{}
	for p.i < len(p.lines) {
		ln := p.lines[p.i]
		if ln.indent < indent {
			break
		}
		if ln.indent > indent {
			return nil, fmt.Errorf("line %d: unexpected indentation", ln.num)
		}
		if isSeqItem(ln.text) {
			return nil, fmt.Errorf("line %d: sequence item where a mapping key was expected", ln.num)
		}
		key, rest, ok := splitYAMLKey(ln.text)
		if !ok {
			return nil, fmt.Errorf("line %d: expected \"key: value\", got %q", ln.num, ln.text)
		}
		if key == "<<" {
			return nil, fmt.Errorf("line %d: merge keys (<<) are not supported", ln.num)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %q", ln.num, key)
		}
		p.i++
		if rest != "" {
			v, err := yamlScalar(rest, ln.num)
			if err != nil {
				return nil, err
			}
			m[key] = v
			continue
		}
		// Nested block: deeper, or a sequence at the same column.
		if p.i < len(p.lines) {
			next := p.lines[p.i]
			if next.indent > indent || (next.indent == indent && isSeqItem(next.text)) {
				v, err := p.block(next.indent)
				if err != nil {
					return nil, err
				}
				m[key] = v
				continue
			}
		}
		m[key] = nil
	}
	return m, nil
}

func (p *yamlParser) sequence(indent int) (any, error) {
	var seq []any
	for p.i < len(p.lines) {
		ln := p.lines[p.i]
		if ln.indent != indent || !isSeqItem(ln.text) {
			if ln.indent > indent {
				return nil, fmt.Errorf("line %d: unexpected indentation", ln.num)
			}
			break
		}
		p.i++
		item := strings.TrimSpace(strings.TrimPrefix(ln.text, "-"))
		if item == "" {
			if p.i < len(p.lines) && p.lines[p.i].indent > indent {
				v, err := p.block(p.lines[p.i].indent)
				if err != nil {
					return nil, err
				}
				seq = append(seq, v)
				continue
			}
			seq = append(seq, nil)
			continue
		}
		if _, _, ok := splitYAMLKey(item); ok {
			return nil, fmt.Errorf("line %d: sequences of mappings are not supported; quote the item if it is a string", ln.num)
		}
		v, err := yamlScalar(item, ln.num)
		if err != nil {
			return nil, err
		}
		seq = append(seq, v)
	}
	return seq, nil
}

// splitYAMLKey splits "key: rest" at the first ": " (or a final ':') outside
// quotes.
func splitYAMLKey(s string) (key, rest string, ok bool) {
	eachUnquoted(s, func(i int) bool { return i == 0 }, func(i int, c byte) bool {
		switch {
		case (c == '[' || c == '{') && i == 0:
			return false
		case c == ':' && (i == len(s)-1 || s[i+1] == ' '):
			key = strings.TrimSpace(s[:i])
			if uq, err := yamlScalar(key, 0); err == nil {
				if ks, isStr := uq.(string); isStr {
					key = ks
				}
			}
			rest, ok = strings.TrimSpace(s[i+1:]), key != ""
			return false
		}
		return true
	})
	return key, rest, ok
}

// yamlScalar reads one value written on a single line.
func yamlScalar(s string, line int) (any, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	switch s[0] {
	case '&', '*', '!', '|', '>', '%', '@', '`':
		return nil, fmt.Errorf("line %d: %q: anchors, aliases, tags and block scalars are not supported", line, s)
	case '"':
		var out string
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("line %d: bad double-quoted scalar %s: %v", line, s, err)
		}
		return out, nil
	case '\'':
		if len(s) < 2 || s[len(s)-1] != '\'' {
			return nil, fmt.Errorf("line %d: bad single-quoted scalar %s", line, s)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case '[', '{':
		closer := map[byte]byte{'[': ']', '{': '}'}[s[0]]
		if s[len(s)-1] != closer {
			return nil, fmt.Errorf("line %d: flow collection %s must close on the same line", line, s)
		}
		items, err := splitFlow(s[1:len(s)-1], line)
		if err != nil {
			return nil, err
		}
		if s[0] == '[' {
			seq := []any{}
			for _, it := range items {
				v, err := yamlScalar(it, line)
				if err != nil {
					return nil, err
				}
				seq = append(seq, v)
			}
			return seq, nil
		}
		m := map[string]any{}
		for _, it := range items {
			k, rest, ok := splitYAMLKey(it)
			if !ok {
				return nil, fmt.Errorf("line %d: expected \"key: value\" in flow mapping, got %q", line, it)
			}
			v, err := yamlScalar(rest, line)
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		return m, nil
	}
	return s, nil
}

// splitFlow splits the inside of a one-level flow collection at commas
// outside quotes; nested collections are not supported.
func splitFlow(s string, line int) ([]string, error) {
	var items []string
	start, nested := 0, false
	eachUnquoted(s, func(int) bool { return true }, func(i int, c byte) bool {
		switch c {
		case '[', '{':
			nested = true
			return false
		case ',':
			items = append(items, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
		return true
	})
	if nested {
		return nil, fmt.Errorf("line %d: nested flow collections are not supported", line)
	}
	if last := strings.TrimSpace(s[start:]); last != "" {
		items = append(items, last)
	} else if len(items) > 0 {
		return nil, fmt.Errorf("line %d: empty item in flow collection", line)
	}
	return items, nil
}

func TestYAMLSubsetParser(t *testing.T) {
	got, err := parseYAMLSubset(`# comment
a: plain value # trailing
b: "quoted # not a comment"
c: 'it''s'
d:
  - one
  - "two"
e:
- same column
f: ["x", y, 'z']
g: {k: v, "q": "w"}
h:
  nested:
    deeper: "1"
i:
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": "plain value",
		"b": "quoted # not a comment",
		"c": "it's",
		"d": []any{"one", "two"},
		"e": []any{"same column"},
		"f": []any{"x", "y", "z"},
		"g": map[string]any{"k": "v", "q": "w"},
		"h": map[string]any{"nested": map[string]any{"deeper": "1"}},
		"i": nil,
	}
	if g, w := fmt.Sprint(got), fmt.Sprint(want); g != w {
		t.Errorf("parse mismatch:\n got %s\nwant %s", g, w)
	}

	for name, src := range map[string]string{
		"anchor":        "a: &x 1\n",
		"merge":         "a:\n  <<: *x\n",
		"block scalar":  "a: |\n  text\n",
		"duplicate":     "a: 1\na: 2\n",
		"bad indent":    "a: 1\n  b: 2\n",
		"seq of maps":   "a:\n  - k: v\n",
		"unterminated":  "a: \"open\n",
		"tab":           "a:\n\tb: 1\n",
		"nested flow":   "a: [[1]]\n",
		"multi-line fl": "a: [1,\n  2]\n",
	} {
		if _, err := parseYAMLSubset(src); err == nil {
			t.Errorf("%s: expected an error for %q", name, src)
		}
	}
}
