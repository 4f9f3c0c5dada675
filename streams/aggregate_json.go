package streams

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// AppendJSON appends a as JSON, byte for byte what encoding/json writes,
// without reflection: a broadcast's aggregate holds a reply per instance.
// A result that is not JSON is an error, as it is for encoding/json.
func (a *Aggregate) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	if a.Code != "" {
		b = appendJSONString(append(b, `"code":`...), string(a.Code))
		b = append(b, ',')
	}
	if a.Message != "" {
		b = appendJSONString(append(b, `"message":`...), a.Message)
		b = append(b, ',')
	}
	b = strconv.AppendInt(append(b, `"expected":`...), int64(a.Expected), 10)
	b = strconv.AppendInt(append(b, `,"answered":`...), int64(a.Answered), 10)
	b = strconv.AppendInt(append(b, `,"succeeded":`...), int64(a.Succeeded), 10)
	b = strconv.AppendBool(append(b, `,"complete":`...), a.Complete)
	b = append(b, `,"replies":`...)
	if a.Replies == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range a.Replies {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = a.Replies[i].appendJSON(b); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	missing, err := json.Marshal(a.Missing) // few entries: the plain encoder will do
	if err != nil {
		return nil, err
	}
	b = append(append(b, `,"missing":`...), missing...)
	return append(b, '}'), nil
}

func (r *BranchReply) appendJSON(b []byte) ([]byte, error) {
	b = appendJSONString(append(b, `{"name":`...), r.Name)
	if r.Node != "" {
		b = appendJSONString(append(b, `,"node":`...), r.Node)
	}
	b = appendJSONString(append(b, `,"status":`...), r.Status)
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		// What encoding/json makes of Raw's bytes: checked, compacted, and
		// <, >, & and the line separators escaped.
		n := len(b)
		buf := bytes.NewBuffer(b)
		if json.Compact(buf, r.Result) != nil {
			return nil, errRawNotJSON
		}
		b = buf.Bytes()
		for _, c := range b[n:] {
			if c == '<' || c == '>' || c == '&' || c == 0xE2 { // 0xE2: U+2028 and U+2029 start so
				var esc bytes.Buffer
				json.HTMLEscape(&esc, b[n:])
				b = append(b[:n], esc.Bytes()...)
				break
			}
		}
	}
	if r.Error != nil {
		e, err := json.Marshal(r.Error)
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"error":`...), e...)
	}
	b = append(b, `,"latency_ms":`...)
	if abs := math.Abs(r.LatencyMS); abs == 0 || abs >= 1e-6 && abs < 1e21 {
		b = strconv.AppendFloat(b, r.LatencyMS, 'f', -1, 64)
	} else { // NaN, infinities and the exponent forms: encoding/json's own
		f, err := json.Marshal(r.LatencyMS)
		if err != nil {
			return nil, err
		}
		b = append(b, f...)
	}
	b = strconv.AppendInt(append(b, `,"attempts":`...), int64(r.Attempts), 10)
	return append(b, '}'), nil
}

// appendJSONString appends s as encoding/json writes a string: as it is
// when it is printable ASCII that needs no escape (instance ids, statuses),
// else by encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
