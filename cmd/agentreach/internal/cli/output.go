package cli

import (
	"encoding/json"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"io"
	"os"
	"strings"
	"time"
)

// ConfirmInput returns where purge reads its confirmation and whether that
// is a terminal. Tests replace it.
var ConfirmInput = func() (io.Reader, bool) { return os.Stdin, IsTerminal(os.Stdin) }

// LastErrorWidth is where `ls` cuts the last error.
const LastErrorWidth = 60

// ParkedJSON is one entry as `ls --json` and `show --json` print it: the
// payload as JSON (see bodyJSON) instead of base64.
type ParkedJSON struct {
	durable.Parked
	Data json.RawMessage `json:"data"`
}

// OneLine joins the lines of s with spaces.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Truncate cuts s to at most n runes, ending in "…" when it cut.
func Truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// Count writes n with the noun's singular or plural.
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// CallMeta is the metadata of a call's outcome.
type CallMeta struct {
	Status          string  `json:"status"`
	Node            string  `json:"node,omitempty"`
	Attempt         int     `json:"attempt"`
	RequestID       string  `json:"request_id"`
	OrchestrationID string  `json:"orchestration_id,omitempty"`
	Cost            float64 `json:"cost"`
}

func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func WriteJSONLine(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil { // every field marshals; keep the output well-formed regardless
		b = []byte(`{"error":{"code":"INTERNAL","message":"encode output"}}`)
	}
	fmt.Fprintf(w, "%s\n", b)
}

// HeartbeatAge rounds an age for display: tenths of a second under a
// minute, whole seconds above. A negative age (clock skew) shows as 0s.
func HeartbeatAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
