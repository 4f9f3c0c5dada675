package declare

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/agent-reach/agentreach/registry/document"
	"github.com/agent-reach/agentreach/streams"
)

// The JSON Schemas of declarations are compiled with
// github.com/santhosh-tekuri/jsonschema/v6, draft 2020-12 unless a schema's
// $schema names another draft. A schema must be self-contained: nothing is
// loaded from files or the network.

// schemaURL names every compiled schema; a schema's own $id may override it.
const schemaURL = "urn:agentreach:schema"

// selfContained refuses to load any document a schema refers to.
type selfContained struct{}

func (selfContained) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is another document", url)
}

// compileSchema compiles one JSON Schema; the error says what is wrong in
// it, by its path inside the schema.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(selfContained{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("not a valid JSON Schema: %v", err)
	}
	sch, err := c.Compile(schemaURL)
	var invalid *jsonschema.SchemaValidationError
	var load *jsonschema.LoadURLError
	switch {
	case err == nil:
		return sch, nil
	case errors.As(err, &invalid):
		var ve *jsonschema.ValidationError
		if errors.As(invalid.Err, &ve) {
			return nil, fmt.Errorf("not a valid JSON Schema: %s", describeSchemaError(ve, "", doc))
		}
		return nil, fmt.Errorf("not a valid JSON Schema: %v", invalid.Err)
	case errors.As(err, &load):
		return nil, fmt.Errorf("refers to %s: a schema must be self-contained (a $ref only to its own parts, such as \"#/$defs/item\")", load.URL)
	}
	return nil, fmt.Errorf("not a valid JSON Schema: %v", err)
}

// validatePayload checks body, of the given content type, against sch.
func validatePayload(sch *jsonschema.Schema, contentType string, body []byte) error {
	var v any
	if len(bytes.TrimSpace(body)) > 0 {
		var err error
		switch contentType {
		case streams.ContentTypeJSON:
			v, err = jsonschema.UnmarshalJSON(bytes.NewReader(body))
		case streams.ContentTypeMsgpack:
			if !streams.ValidMsgpack(body) { // first: a container header alone may claim gigabytes
				return fmt.Errorf("%w: payload is not one well-formed msgpack value", ErrInvalidPayload)
			}
			dec := msgpack.GetDecoder()
			dec.Reset(bytes.NewReader(body))
			v, err = dec.DecodeInterface()
			msgpack.PutDecoder(dec)
		default:
			return fmt.Errorf("%w: unsupported content type %q (want %s or %s)", ErrInvalidPayload, contentType,
				streams.ContentTypeJSON, streams.ContentTypeMsgpack)
		}
		if err != nil {
			return fmt.Errorf("%w: payload is not valid %s: %v", ErrInvalidPayload, contentType, err)
		}
	}
	err := sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return fmt.Errorf("%w: %s", ErrInvalidPayload, describeSchemaError(ve, "payload", v))
	}
	return fmt.Errorf("%w: %v", ErrInvalidPayload, err)
}

var englishPrinter = message.NewPrinter(language.English)

// describeSchemaError says in a sentence what the first problem of ve is,
// at which path below root of instance, and how many more there are.
// Problems are ordered by path, so the answer does not change from call to
// call.
func describeSchemaError(ve *jsonschema.ValidationError, root string, instance any) string {
	leaves := schemaLeaves(ve, nil)
	sort.SliceStable(leaves, func(i, j int) bool {
		a, b := strings.Join(leaves[i].InstanceLocation, "/"), strings.Join(leaves[j].InstanceLocation, "/")
		if a != b {
			return a < b
		}
		return strings.Join(leaves[i].ErrorKind.KeywordPath(), "/") < strings.Join(leaves[j].ErrorKind.KeywordPath(), "/")
	})
	first := leaves[0]
	msg := schemaProblem(first)
	if at := instancePath(root, first.InstanceLocation, instance); at != "" {
		msg = at + ": " + msg
	}
	if n := len(leaves) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more %s)", n, plural(n, "problem", "problems"))
	}
	return msg
}

// schemaLeaves collects the errors that say what failed, below the ones
// that only group them (the schema, a $ref, allOf).
func schemaLeaves(ve *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	switch ve.ErrorKind.(type) {
	case *kind.Schema, *kind.Reference, *kind.AllOf, *kind.Group:
		if len(ve.Causes) > 0 {
			for _, c := range ve.Causes {
				out = schemaLeaves(c, out)
			}
			return out
		}
	}
	return append(out, ve)
}

// schemaProblem words one failed keyword.
func schemaProblem(ve *jsonschema.ValidationError) string {
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		return fmt.Sprintf("%s %s %s required", plural(len(k.Missing), "field", "fields"), quoteAll(k.Missing), plural(len(k.Missing), "is", "are"))
	case *kind.AdditionalProperties:
		return fmt.Sprintf("%s %s %s not allowed", plural(len(k.Properties), "field", "fields"), quoteAll(k.Properties), plural(len(k.Properties), "is", "are"))
	case *kind.Type:
		return fmt.Sprintf("want %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			b, _ := json.Marshal(w)
			want[i] = string(b)
		}
		return "must be one of " + strings.Join(want, ", ")
	case *kind.Const:
		b, _ := json.Marshal(k.Want)
		return "must be " + string(b)
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s, got %s", ratString(k.Want), ratString(k.Got))
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s, got %s", ratString(k.Want), ratString(k.Got))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("must be more than %s, got %s", ratString(k.Want), ratString(k.Got))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("must be less than %s, got %s", ratString(k.Want), ratString(k.Got))
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long, got %d", k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long, got %d", k.Want, k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items, got %d", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items, got %d", k.Want, k.Got)
	case *kind.Pattern:
		return fmt.Sprintf("must match the pattern %q", k.Want)
	case *kind.AnyOf:
		return "matches none of the shapes anyOf allows" + alternatives(ve)
	case *kind.OneOf:
		if len(k.Subschemas) > 1 {
			return "matches more than one of the shapes oneOf allows"
		}
		return "matches none of the shapes oneOf allows" + alternatives(ve)
	case *kind.InvalidJsonValue:
		return "holds a value JSON cannot express (a msgpack binary or extension value)"
	}
	return ve.ErrorKind.LocalizedString(englishPrinter)
}

// alternatives says why each branch of a failed anyOf or oneOf failed.
func alternatives(ve *jsonschema.ValidationError) string {
	var why []string
	for _, c := range ve.Causes {
		if leaves := schemaLeaves(c, nil); len(leaves) > 0 {
			why = append(why, schemaProblem(leaves[0]))
		}
	}
	if len(why) == 0 {
		return ""
	}
	return ": " + strings.Join(why, "; or ")
}

// instancePath turns a schema error's location into a path such as
// payload.items[2].qty, looking at instance to tell indexes from keys.
func instancePath(root string, loc []string, instance any) string {
	path := root
	for _, tok := range loc {
		switch v := instance.(type) {
		case []any:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(v) {
				path += "[" + tok + "]"
				instance = v[i]
				continue
			}
		case map[string]any:
			instance = v[tok]
		default:
			instance = nil
		}
		if plainKey(tok) {
			path = document.JoinPath(path, tok)
		} else {
			path += "[" + strconv.Quote(tok) + "]"
		}
	}
	return path
}

// plainKey reports whether a key reads unambiguously after a dot.
func plainKey(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '$') {
			return false
		}
	}
	return true
}

// ratString writes a schema bound the way it was most likely written.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
