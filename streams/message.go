package streams

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// MsgSize returns the bytes m occupies against the server's max_payload:
// its data plus its encoded headers.
func MsgSize(m *nats.Msg) int { return HeaderSize(m) + len(m.Data) }

// HeaderSize returns the bytes of m's headers as they are encoded on the
// wire ("NATS/1.0", then a "key: value" line each), 0 without headers. The
// server counts them against max_payload with the body.
func HeaderSize(m *nats.Msg) int {
	if len(m.Header) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	return n
}

// CheckSize returns a PAYLOAD_TOO_LARGE error when m, headers and body,
// exceeds max bytes (a max of 0 or less checks nothing). The error names
// the limit and both parts, since a body under the limit can grow past it
// with the headers added on its way.
func CheckSize(m *nats.Msg, max int64) error {
	hdr := HeaderSize(m)
	if size := hdr + len(m.Data); max > 0 && int64(size) > max {
		return NewError(CodePayloadTooLarge, "message of %d bytes (%d of headers + %d of body) exceeds the server's max_payload of %d bytes, which counts headers and body",
			size, hdr, len(m.Data), max)
	}
	return nil
}

// StatusReply builds a reply carrying a lifecycle status and no body.
func StatusReply(subject string, status Status, requestID string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(HeaderStatus, string(status))
	if requestID != "" {
		m.Header.Set(HeaderRequestID, requestID)
	}
	return m
}

// ErrorReply builds a FAILED (or TIMEOUT, for CodeTimeout) reply with the
// Reach-Error header and a {"code","message"} body in contentType.
func ErrorReply(subject, contentType, requestID string, e *Error) *nats.Msg {
	status := StatusFailed
	if e.Code == CodeTimeout {
		status = StatusTimeout
	}
	m := StatusReply(subject, status, requestID)
	if contentType != ContentTypeMsgpack {
		contentType = ContentTypeJSON
	}
	m.Header.Set(HeaderError, string(e.Code))
	m.Header.Set(HeaderContentType, contentType)
	m.Data = ErrorBody(contentType, e)
	return m
}

// IntHeader returns the integer value of header k, or 0.
func IntHeader(h nats.Header, k string) int64 {
	v, _ := strconv.ParseInt(h.Get(k), 10, 64)
	return v
}
