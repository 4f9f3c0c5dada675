package streams

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// PayloadType returns the content type of a request and checks that its
// body is well formed for it. With a Content-Type header the body must be
// valid for that type; without one a body that is valid JSON (or empty) is
// JSON, one msgpack value is msgpack, and anything else is malformed. A
// malformed body or an unsupported type is a BAD_REQUEST error; the returned
// type is then the one to answer in: the declared one when it is supported,
// else JSON (a person typing `nats req` reads it).
func PayloadType(h nats.Header, body []byte) (string, *Error) {
	if h.Get(HeaderContentType) == "" {
		switch {
		case len(bytes.TrimSpace(body)) == 0 || json.Valid(body):
			return ContentTypeJSON, nil
		case ValidMsgpack(body):
			return ContentTypeMsgpack, nil
		}
		var probe any
		err := json.Unmarshal(body, &probe)
		return ContentTypeJSON, NewError(CodeBadRequest, "payload is neither valid JSON (%v) nor one msgpack value; set %s to say which it is",
			err, HeaderContentType)
	}
	ct := ContentType(h, body)
	switch ct {
	case ContentTypeJSON:
		if len(bytes.TrimSpace(body)) > 0 && !json.Valid(body) {
			var probe any
			return ct, NewError(CodeBadRequest, "payload is not valid JSON: %v", json.Unmarshal(body, &probe))
		}
	case ContentTypeMsgpack:
		if len(body) > 0 && !ValidMsgpack(body) {
			if json.Valid(body) {
				return ct, NewError(CodeBadRequest, "payload is JSON but %s says %s: send it as %s", HeaderContentType, ct, ContentTypeJSON)
			}
			return ct, NewError(CodeBadRequest, "payload is not one well-formed msgpack value (%s says %s)", HeaderContentType, ct)
		}
	default:
		return ContentTypeJSON, NewError(CodeBadRequest, "unsupported content type %q (want %s or %s)", ct, ContentTypeMsgpack, ContentTypeJSON)
	}
	return ct, nil
}

// ValidMsgpack reports whether b holds exactly one well-formed msgpack
// value and nothing after it. Decode outside msgpack only after this
// check: the decoder preallocates what a container header claims, so a
// few bytes claiming a billion elements would take the process's memory;
// in a well-formed value every element claimed is there.
func ValidMsgpack(b []byte) bool {
	r := bytes.NewReader(b)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(r)
	if err := dec.Skip(); err != nil {
		return false
	}
	// The decoder reads ahead through its own buffer; what it has not
	// consumed must be nothing.
	_, err := dec.Buffered().Read(make([]byte, 1))
	return errors.Is(err, io.EOF) && r.Len() == 0
}
