package document

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Declarations, requirements and policy values are documents that people
// write by hand, in JSON or YAML, so they are read strictly: an unknown key,
// a key given twice or a value of the wrong type is an error that names the
// field by its path ("capabilities[1].timeout_ms"), never a Go type.

// maxDocumentDepth bounds how deeply a document may nest.
const maxDocumentDepth = 64

// Decode reads data, one JSON or YAML document, into v (a pointer to
// a struct with json tags). Data that is valid JSON is read as JSON; anything
// else as YAML, converted to JSON first. It returns the JSON it decoded.
func Decode(data []byte, v any) ([]byte, error) {
	if !json.Valid(data) {
		var err error
		if data, err = YAMLToJSON(data); err != nil {
			return nil, err
		}
	}
	return data, DecodeJSON(data, v)
}

// DecodeJSON reads one JSON object into v (a pointer to a struct with json
// tags) strictly: an unknown key, a key given twice or a value of the wrong
// type is an error naming the field by its path.
func DecodeJSON(data []byte, v any) error {
	if err := CheckUTF8(data); err != nil {
		return err
	}
	tree, err := ReadTree(data)
	if err != nil {
		return err
	}
	if _, ok := tree.(map[string]any); !ok {
		return fmt.Errorf("want an object, got %s", describeValue(tree))
	}
	if err := checkShape(tree, reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	// The shape is right, so this only fills v (exact key case was checked
	// above; encoding/json alone would also accept "Type" for "type").
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s", describeJSONError(err))
	}
	return nil
}

// CheckUTF8 refuses text that is not UTF-8, which encoding/json would
// otherwise change silently.
func CheckUTF8(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Errorf("not valid UTF-8 (at byte %d)", i)
		}
		i += n
	}
	return nil
}

// ReadTree parses one JSON document into a generic tree of map[string]any,
// []any, string, json.Number, bool and nil, refusing a key given twice
// (named by its path) and nesting deeper than 64 levels: documents written
// by hand (declarations, policies, workflows), where encoding/json would
// settle a duplicate key silently.
func ReadTree(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tree, err := readValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the document")
	}
	return tree, nil
}

func readValue(dec *json.Decoder, path string, depth int) (any, error) {
	if depth > maxDocumentDepth {
		return nil, fmt.Errorf("%s: nested more than %d levels deep", pathOrTop(path), maxDocumentDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %s", describeJSONError(err))
	}
	switch tok {
	case json.Delim('{'):
		obj := make(map[string]any)
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("not valid JSON: %s", describeJSONError(err))
			}
			key := kt.(string) // inside an object the decoder yields only string keys
			sub := JoinPath(path, key)
			if _, dup := obj[key]; dup {
				return nil, fmt.Errorf("%s: key given twice", sub)
			}
			if obj[key], err = readValue(dec, sub, depth+1); err != nil {
				return nil, err
			}
		}
		_, err = dec.Token() // '}'
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			v, err := readValue(dec, IndexPath(path, len(arr)), depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err = dec.Token() // ']'
		return arr, err
	}
	return tok, nil
}

// JoinPath appends a key to a document path.
func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// IndexPath appends an array index to a document path.
func IndexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// pathOrTop names the top of a document when path is empty.
func pathOrTop(path string) string {
	if path == "" {
		return "document"
	}
	return path
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	rawMessage      = reflect.TypeFor[json.RawMessage]()
)

// checkShape reports the first place where tree does not fit t: an unknown
// key (keys match json tags exactly), or a value of the wrong JSON type.
// Null fits anything, as in encoding/json (the field keeps its zero value).
// Types with their own UnmarshalJSON are asked directly.
func checkShape(tree any, t reflect.Type, path string) error {
	if tree == nil || t == rawMessage {
		return nil
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		raw, _ := json.Marshal(tree) // a tree of JSON values always marshals
		if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			return fmt.Errorf("%s: %v", pathOrTop(path), err)
		}
		return nil
	}
	wrong := func(want string) error {
		return fmt.Errorf("%s: want %s, got %s", pathOrTop(path), want, describeValue(tree))
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkShape(tree, t.Elem(), path)
	case reflect.Interface:
		return nil
	case reflect.Struct:
		obj, ok := tree.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		fields := jsonFields(t)
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			f, ok := fields[key]
			if !ok {
				return fmt.Errorf("%s: unknown field (want one of %s)", JoinPath(path, key), strings.Join(fieldNames(t), ", "))
			}
			if err := checkShape(obj[key], f.Type, JoinPath(path, key)); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, ok := tree.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if err := checkShape(obj[key], t.Elem(), JoinPath(path, key)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := tree.([]any)
		if !ok {
			return wrong("an array")
		}
		for i, x := range arr {
			if err := checkShape(x, t.Elem(), IndexPath(path, i)); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := tree.(string); !ok {
			return wrong("a string")
		}
	case reflect.Bool:
		if _, ok := tree.(bool); !ok {
			return wrong("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tree.(json.Number)
		if !ok {
			return wrong("an integer")
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			return wrong("an integer")
		}
	case reflect.Float32, reflect.Float64:
		n, ok := tree.(json.Number)
		if !ok {
			return wrong("a number")
		}
		if f, err := strconv.ParseFloat(n.String(), t.Bits()); err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("%s: %s is out of range", pathOrTop(path), n)
		}
	}
	return nil
}

// jsonFields maps the json names of t's exported fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := make(map[string]reflect.StructField, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

// fieldNames lists the json names of t's fields in declaration order.
func fieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if t.Field(i).IsExported() && name != "-" && name != "" {
			names = append(names, name)
		}
	}
	return names
}

// describeValue names the JSON type of a tree value for an error.
func describeValue(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "the number " + v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	return "null"
}

// describeJSONError turns an encoding/json error into words about the
// document rather than Go types.
func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("%v (at byte %d)", err, syntax.Offset)
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Sprintf("%s: want another type, got %s", typ.Field, typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the document ends early"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
