package document

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// YAML is read with go.yaml.in/yaml/v3, the YAML organisation's maintained
// fork of gopkg.in/yaml.v3: YAML 1.2 scalars (yes, no, on and off stay
// strings, so a label value "no" is not a boolean), anchors, aliases and
// merge keys, and line numbers in its errors. A document is converted to
// JSON, keys in their order, and then read like JSON, so both formats obey
// one set of json tags and one strict reader.

// YAMLToJSON converts one YAML document to JSON. A second document, a
// mapping key that is not a scalar, a key given twice, a custom tag and a
// number that is not finite are errors; timestamps and binary values stay
// the strings they were written as. The output is bounded by
// maxYAMLOutput, so aliases cannot blow it up.
func YAMLToJSON(data []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the document is empty")
		}
		return nil, fmt.Errorf("not valid YAML or JSON: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("holds more than one YAML document (a line with ---); put one document in a file")
	}
	w := &yamlWriter{}
	if err := w.value(&doc, "", 0); err != nil {
		return nil, err
	}
	return w.buf.Bytes(), nil
}

// maxYAMLOutput bounds the JSON one YAML document converts to, and
// maxYAMLSteps the nodes and merged keys visited on the way: aliases can
// make a small document expand exponentially.
const (
	maxYAMLOutput = 4 << 20
	maxYAMLSteps  = 1 << 20
)

type yamlWriter struct {
	buf   bytes.Buffer
	steps int
}

// step counts one node or merged key against maxYAMLSteps.
func (w *yamlWriter) step() error {
	w.steps++
	if w.steps > maxYAMLSteps || w.buf.Len() > maxYAMLOutput {
		return fmt.Errorf("expands to too much (more than %d nodes or %d bytes of JSON; aliases?)", maxYAMLSteps, maxYAMLOutput)
	}
	return nil
}

// yamlPair is one key and value of a mapping, merge keys resolved.
type yamlPair struct {
	key   string
	value *yaml.Node
}

func (w *yamlWriter) value(n *yaml.Node, path string, depth int) error {
	if depth > maxDocumentDepth {
		return fmt.Errorf("%s: nested more than %d levels deep (or an alias refers to itself)", pathOrTop(path), maxDocumentDepth)
	}
	if err := w.step(); err != nil {
		return err
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return errors.New("the document is empty")
		}
		return w.value(n.Content[0], path, depth)
	case yaml.AliasNode:
		return w.value(n.Alias, path, depth+1)
	case yaml.SequenceNode:
		w.buf.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			if err := w.value(item, IndexPath(path, i), depth+1); err != nil {
				return err
			}
		}
		w.buf.WriteByte(']')
		return nil
	case yaml.MappingNode:
		pairs, err := w.mappingPairs(n, path, depth)
		if err != nil {
			return err
		}
		w.buf.WriteByte('{')
		for i, p := range pairs {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			k, _ := json.Marshal(p.key) // a string always marshals
			w.buf.Write(k)
			w.buf.WriteByte(':')
			if err := w.value(p.value, JoinPath(path, p.key), depth+1); err != nil {
				return err
			}
		}
		w.buf.WriteByte('}')
		return nil
	case yaml.ScalarNode:
		return w.scalar(n, path)
	}
	return fmt.Errorf("line %d: %s: unsupported YAML node", n.Line, pathOrTop(path))
}

func (w *yamlWriter) scalar(n *yaml.Node, path string) error {
	switch n.ShortTag() {
	case "!!null":
		w.buf.WriteString("null")
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return fmt.Errorf("line %d: %s: %v", n.Line, pathOrTop(path), err)
		}
		w.buf.WriteString(strconv.FormatBool(b))
	case "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %s: %v", n.Line, pathOrTop(path), err)
		}
		switch v := v.(type) {
		case int:
			w.buf.WriteString(strconv.Itoa(v))
		case int64:
			w.buf.WriteString(strconv.FormatInt(v, 10))
		case uint64:
			w.buf.WriteString(strconv.FormatUint(v, 10))
		case float64:
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return fmt.Errorf("line %d: %s: %s is not a finite number", n.Line, pathOrTop(path), n.Value)
			}
			w.buf.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		default:
			return fmt.Errorf("line %d: %s: %q is not a number JSON can hold", n.Line, pathOrTop(path), n.Value)
		}
	case "!!str", "!!timestamp", "!!binary":
		s, _ := json.Marshal(n.Value) // a string always marshals
		w.buf.Write(s)
	default:
		return fmt.Errorf("line %d: %s: the tag %s is not supported", n.Line, pathOrTop(path), n.Tag)
	}
	return nil
}

// mappingPairs returns the keys and values of mapping n in order, with the
// pairs of merge keys (<<) added after its own unless it sets them itself.
func (w *yamlWriter) mappingPairs(n *yaml.Node, path string, depth int) ([]yamlPair, error) {
	var own, merged []yamlPair
	seen := make(map[string]int) // key → line
	for i := 0; i+1 < len(n.Content); i += 2 {
		if err := w.step(); err != nil {
			return nil, err
		}
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: %s: a mapping key must be a plain value, not a collection", k.Line, pathOrTop(path))
		}
		if k.ShortTag() == "!!merge" {
			more, err := w.mergePairs(v, path, depth)
			if err != nil {
				return nil, err
			}
			merged = append(merged, more...)
			continue
		}
		if line, dup := seen[k.Value]; dup {
			return nil, fmt.Errorf("line %d: %s: key given twice (first on line %d)", k.Line, JoinPath(path, k.Value), line)
		}
		seen[k.Value] = k.Line
		own = append(own, yamlPair{k.Value, v})
	}
	for _, p := range merged {
		if err := w.step(); err != nil {
			return nil, err
		}
		if _, set := seen[p.key]; !set {
			seen[p.key] = 0
			own = append(own, p)
		}
	}
	return own, nil
}

// mergePairs returns the pairs a merge key's value brings: one mapping, or
// a sequence of mappings of which the earlier win.
func (w *yamlWriter) mergePairs(v *yaml.Node, path string, depth int) ([]yamlPair, error) {
	if depth > maxDocumentDepth {
		return nil, fmt.Errorf("%s: merge keys nested more than %d levels deep", pathOrTop(path), maxDocumentDepth)
	}
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.MappingNode:
		return w.mappingPairs(v, path, depth+1)
	case yaml.SequenceNode:
		var out []yamlPair
		for _, item := range v.Content {
			more, err := w.mergePairs(item, path, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, more...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: %s: a merge key (<<) takes a mapping or a list of mappings", v.Line, pathOrTop(path))
}
