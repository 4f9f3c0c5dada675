package streams

import (
	"bytes"
	"encoding/json"

	"github.com/nats-io/nats.go"
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

// maxMsgpackDepth bounds how deeply a msgpack body may nest arrays and
// maps, as encoding/json bounds JSON.
const maxMsgpackDepth = 10000

// ValidMsgpack reports whether b holds exactly one well-formed msgpack
// value and nothing after it, nested at most maxMsgpackDepth deep. Decode
// outside msgpack only after this check: the decoder allocates what a
// header claims and recurses as deep as a value nests. ValidMsgpack walks b
// without decoding it, so what it costs is what b holds.
func ValidMsgpack(b []byte) bool {
	open := []int{1} // per array or map being read: the values it still holds
	pos := 0
	for len(open) > 0 {
		if open[len(open)-1] == 0 {
			open = open[:len(open)-1]
			continue
		}
		open[len(open)-1]--
		if pos >= len(b) {
			return false
		}
		c := b[pos]
		pos++
		var size, items int // the bytes that follow; the values it holds
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		case c <= 0x8f: // fixmap
			items = 2 * int(c&0x0f)
		case c <= 0x9f: // fixarray
			items = int(c & 0x0f)
		case c <= 0xbf: // fixstr
			size = int(c & 0x1f)
		case c == 0xc1: // never used
			return false
		default:
			f := msgpackFormats[c-0xc4]
			n, ok := bigEndian(b, pos, f.lenBytes)
			if !ok {
				return false
			}
			pos += f.lenBytes
			size, items = f.fixed+n*f.perLen, n*f.itemsPerLen
		}
		if size > len(b)-pos || items > len(b)-pos { // every value takes a byte at least
			return false
		}
		pos += size
		if items > 0 {
			if len(open) > maxMsgpackDepth {
				return false
			}
			open = append(open, items)
		}
	}
	return pos == len(b)
}

// msgpackFormat describes a msgpack format from 0xc4 to 0xdf: the bytes of
// its length field, then fixed + n*perLen bytes and n*itemsPerLen values
// for a length n (a format without a length field has fixed bytes).
type msgpackFormat struct{ lenBytes, fixed, perLen, itemsPerLen int }

var msgpackFormats = [...]msgpackFormat{
	{1, 0, 1, 0}, {2, 0, 1, 0}, {4, 0, 1, 0}, // bin 8/16/32
	{1, 1, 1, 0}, {2, 1, 1, 0}, {4, 1, 1, 0}, // ext 8/16/32: the type byte, then the data
	{0, 4, 0, 0}, {0, 8, 0, 0}, // float 32/64
	{0, 1, 0, 0}, {0, 2, 0, 0}, {0, 4, 0, 0}, {0, 8, 0, 0}, // uint 8/16/32/64
	{0, 1, 0, 0}, {0, 2, 0, 0}, {0, 4, 0, 0}, {0, 8, 0, 0}, // int 8/16/32/64
	{0, 2, 0, 0}, {0, 3, 0, 0}, {0, 5, 0, 0}, {0, 9, 0, 0}, {0, 17, 0, 0}, // fixext 1/2/4/8/16: the type byte, then the data
	{1, 0, 1, 0}, {2, 0, 1, 0}, {4, 0, 1, 0}, // str 8/16/32
	{2, 0, 0, 1}, {4, 0, 0, 1}, // array 16/32
	{2, 0, 0, 2}, {4, 0, 0, 2}, // map 16/32
}

// bigEndian reads the n-byte unsigned integer at b[pos:].
func bigEndian(b []byte, pos, n int) (int, bool) {
	if n > len(b)-pos {
		return 0, false
	}
	v := 0
	for _, x := range b[pos : pos+n] {
		v = v<<8 | int(x)
	}
	return v, true
}
