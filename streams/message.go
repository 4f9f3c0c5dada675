package streams

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// MsgSize returns the bytes m occupies against the server's max_payload:
// its data plus its encoded headers.
func MsgSize(m *nats.Msg) int {
	n := len(m.Data)
	if len(m.Header) > 0 {
		n += len("NATS/1.0\r\n\r\n")
		for k, vs := range m.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4 // "k: v\r\n"
			}
		}
	}
	return n
}

// CheckSize returns a PAYLOAD_TOO_LARGE error when m exceeds max bytes.
func CheckSize(m *nats.Msg, max int64) error {
	if size := MsgSize(m); max > 0 && int64(size) > max {
		return NewError(CodePayloadTooLarge, "message of %d bytes exceeds the server's max_payload of %d", size, max)
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
