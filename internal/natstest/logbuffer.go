package natstest

import (
	"bytes"
	"encoding/json"
	"sync"
)

// LogBuffer collects what a logger under test writes (zerolog's JSON
// lines); goroutines may write it at once. The zero value is ready.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the JSON log lines written so far whose message is msg.
func (b *LogBuffer) Lines(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range bytes.Split([]byte(b.String()), []byte("\n")) {
		var line map[string]any
		if json.Unmarshal(l, &line) == nil && line["message"] == msg {
			out = append(out, line)
		}
	}
	return out
}
