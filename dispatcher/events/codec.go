package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agent-reach/agentreach/streams"
)

// How records travel. A message on reach.event.<capability> carries one or
// more records, one JSON object per line, and says how many in its
// Reach-Events header. Direct-tier records are batched: a batch goes out
// when it holds eventBatchMax records or eventBatchBytes, or eventFlush after
// its first record, so a busy replica writes one stored message per many
// tasks instead of one per task. A durable task's record goes alone, with a
// message id, so a redelivery after a crash does not record it twice.
const (
	HeaderEvents    = streams.HeaderEvents // how many records a message carries
	eventBatchMax   = 128
	eventBatchBytes = 64 << 10
	eventFlush      = 100 * time.Millisecond
)

// DecodeEvents returns the records of one REACH_EVENTS message.
func DecodeEvents(data []byte) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return out, fmt.Errorf("event record %d: %w", len(out)+1, err)
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// Append appends ev as one line of JSON, as encoding/json writes it
// (the same keys and omissions), without reflection.
func Append(b []byte, ev *Event) []byte {
	b = append(b, `{"request_id":`...)
	b = appendString(b, ev.RequestID)
	b = append(b, `,"orchestration_id":`...)
	b = appendString(b, ev.OrchestrationID)
	b = append(b, `,"capability":`...)
	b = appendString(b, ev.Capability)
	if ev.Source != "" {
		b = append(b, `,"source":`...)
		b = appendString(b, ev.Source)
	}
	b = append(b, `,"tier":`...)
	b = appendString(b, ev.Tier)
	b = append(b, `,"dispatcher":`...)
	b = appendString(b, ev.Dispatcher)
	b = append(b, `,"status":`...)
	b = appendString(b, ev.Status)
	if ev.Code != "" {
		b = append(b, `,"code":`...)
		b = appendString(b, ev.Code)
	}
	if ev.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, ev.Error)
	}
	if ev.Unknown {
		b = append(b, `,"unknown":true`...)
	}
	b = append(b, `,"outcome":`...)
	b = appendString(b, ev.Outcome)
	b = append(b, `,"candidates":`...)
	b = strconv.AppendInt(b, int64(ev.Candidates), 10)
	if ev.Node != "" {
		b = append(b, `,"node":`...)
		b = appendString(b, ev.Node)
	}
	if len(ev.Failed) > 0 {
		b = append(b, `,"failed":[`...)
		for i, id := range ev.Failed {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, id)
		}
		b = append(b, ']')
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(ev.Attempts), 10)
	if ev.Cost != 0 && !math.IsNaN(ev.Cost) && !math.IsInf(ev.Cost, 0) {
		b = append(b, `,"cost":`...)
		b = strconv.AppendFloat(b, ev.Cost, 'g', -1, 64)
	}
	b = append(b, `,"latency_ms":`...)
	b = strconv.AppendFloat(b, ev.LatencyMS, 'g', -1, 64)
	b = append(b, `,"start":"`...)
	b = ev.Start.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if ev.ParentID != "" {
		b = append(b, `,"parent_id":`...)
		b = appendString(b, ev.ParentID)
	}
	if ev.Kind != "" {
		b = append(b, `,"kind":`...)
		b = appendString(b, ev.Kind)
	}
	if ev.By != "" {
		b = append(b, `,"by":`...)
		b = appendString(b, ev.By)
	}
	if ev.Hedged {
		b = append(b, `,"hedged":true`...)
	}
	if ev.HedgeWon {
		b = append(b, `,"hedge_won":true`...)
	}
	if ev.Score != nil && !math.IsNaN(*ev.Score) && !math.IsInf(*ev.Score, 0) {
		b = strconv.AppendFloat(append(b, `,"score":`...), *ev.Score, 'g', -1, 64)
	}
	if len(ev.Excluded) > 0 { // a few entries: the plain encoder will do
		x, _ := json.Marshal(ev.Excluded)
		b = append(append(b, `,"excluded":`...), x...)
	}
	if ev.ExcludedTotal != 0 {
		b = strconv.AppendInt(append(b, `,"excluded_total":`...), int64(ev.ExcludedTotal), 10)
	}
	for _, f := range [...]struct {
		key string
		n   int
	}{{`,"expected":`, ev.Expected}, {`,"answered":`, ev.Answered}, {`,"succeeded":`, ev.Succeeded}} {
		if f.n != 0 {
			b = strconv.AppendInt(append(b, f.key...), int64(f.n), 10)
		}
	}
	return append(b, "}\n"...)
}

// appendString appends s as a JSON string: the runs that need no escape
// (most strings are one) are copied whole.
func appendString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		q, _ := json.Marshal(s) // replaces invalid bytes, as encoding/json does
		return append(b, q...)
	}
	b = append(b, '"')
	run := 0 // start of the bytes not appended yet
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[run:i]...)
		run = i + 1
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		}
	}
	b = append(b, s[run:]...)
	return append(b, '"')
}
