package streams

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// Content types of the envelope codec.
const (
	ContentTypeMsgpack = "application/msgpack"
	ContentTypeJSON    = "application/json"
)

// ContentType returns the content type of a message: the Content-Type header
// when present (parameters such as "; charset=utf-8" are dropped), otherwise
// JSON for a body that is valid JSON (so a plain `nats req` works) or empty,
// and msgpack for anything else.
func ContentType(h nats.Header, body []byte) string {
	if ct := h.Get(HeaderContentType); ct != "" {
		if i := strings.IndexByte(ct, ';'); i >= 0 {
			ct = ct[:i]
		}
		return strings.ToLower(strings.TrimSpace(ct))
	}
	if len(bytes.TrimSpace(body)) == 0 || json.Valid(body) {
		return ContentTypeJSON
	}
	return ContentTypeMsgpack
}

// Encode marshals v in the given content type. Structs are encoded under
// their json tags in both formats, so one Go type serves JSON and msgpack
// peers alike. An unsupported content type is a BAD_REQUEST error.
func Encode(contentType string, v any) ([]byte, error) {
	switch contentType {
	case ContentTypeJSON:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, NewError(CodeInternal, "encode JSON: %v", err)
		}
		return b, nil
	case ContentTypeMsgpack:
		var buf bytes.Buffer
		enc := msgpack.GetEncoder()
		defer msgpack.PutEncoder(enc)
		enc.Reset(&buf)
		enc.SetCustomStructTag("json")
		enc.SetOmitEmpty(false)
		if err := enc.Encode(v); err != nil {
			return nil, NewError(CodeInternal, "encode msgpack: %v", err)
		}
		return buf.Bytes(), nil
	default:
		return nil, NewError(CodeBadRequest, "unsupported content type %q (want %s or %s)", contentType, ContentTypeMsgpack, ContentTypeJSON)
	}
}

// Decode unmarshals data of the given content type into v. An empty body
// leaves v untouched. Malformed data or an unsupported content type is a
// BAD_REQUEST error that says what is wrong.
func Decode(contentType string, data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	switch contentType {
	case ContentTypeJSON:
		if err := json.Unmarshal(data, v); err != nil {
			return NewError(CodeBadRequest, "%s", describeJSONError(err))
		}
		return nil
	case ContentTypeMsgpack:
		if !ValidMsgpack(data) { // first: see ValidMsgpack
			return NewError(CodeBadRequest, "payload is not one well-formed msgpack value")
		}
		dec := msgpack.GetDecoder()
		defer msgpack.PutDecoder(dec)
		dec.Reset(bytes.NewReader(data))
		dec.SetCustomStructTag("json")
		if err := dec.Decode(v); err != nil {
			return NewError(CodeBadRequest, "payload does not have the expected shape: %v", err)
		}
		return nil
	default:
		return NewError(CodeBadRequest, "unsupported content type %q (want %s or %s)", contentType, ContentTypeMsgpack, ContentTypeJSON)
	}
}

// describeJSONError says what is wrong with a JSON payload in the caller's
// terms: the field and the JSON types, never the Go type it was decoded into.
func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return fmt.Sprintf("payload field %q must be %s, got %s", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value)
	case errors.As(err, &typeErr):
		return fmt.Sprintf("payload must be %s, got %s", jsonKind(typeErr.Type), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("payload is not valid JSON: %v (at byte %d)", err, syntaxErr.Offset)
	}
	return "payload is not valid JSON: " + err.Error()
}

// jsonKind names the JSON type a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a value"
}

// ErrorBody encodes e as the {"code","message"} body of an error reply.
func ErrorBody(contentType string, e *Error) []byte {
	if contentType != ContentTypeMsgpack {
		contentType = ContentTypeJSON
	}
	b, err := Encode(contentType, e)
	if err != nil { // an Error always encodes; keep the reply well-formed regardless
		return []byte(fmt.Sprintf(`{"code":%q,"message":"encode error"}`, e.Code))
	}
	return b
}

// ErrorFromMessage returns the *Error carried by a reply whose Reach-Error
// header is set, or nil. The message is read from the body when it decodes.
func ErrorFromMessage(m *nats.Msg) *Error {
	code := m.Header.Get(HeaderError)
	if code == "" {
		return nil
	}
	e := &Error{Code: Code(code)}
	var body Error
	if Decode(ContentType(m.Header, m.Data), m.Data, &body) == nil {
		e.Message, e.Excluded = body.Message, body.Excluded
	}
	return e
}
