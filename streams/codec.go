package streams

import (
	"bytes"
	"encoding/json"
	"fmt"
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
			return NewError(CodeBadRequest, "payload is not valid JSON for %T: %v", v, err)
		}
		return nil
	case ContentTypeMsgpack:
		dec := msgpack.GetDecoder()
		defer msgpack.PutDecoder(dec)
		dec.Reset(bytes.NewReader(data))
		dec.SetCustomStructTag("json")
		if err := dec.Decode(v); err != nil {
			return NewError(CodeBadRequest, "payload is not valid msgpack for %T: %v", v, err)
		}
		return nil
	default:
		return NewError(CodeBadRequest, "unsupported content type %q (want %s or %s)", contentType, ContentTypeMsgpack, ContentTypeJSON)
	}
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
		e.Message = body.Message
	}
	return e
}
