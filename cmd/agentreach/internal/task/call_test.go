package task

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/streams"
)

// TestPrintResultEndsInOneNewline: whatever whitespace an agent's answer or
// error ends with, every output of call ends in exactly one newline, with
// no blank line before it.
func TestPrintResultEndsInOneNewline(t *testing.T) {
	ok := func(contentType, data string) *agentkit.Result {
		return &agentkit.Result{Status: streams.StatusFinished, ContentType: contentType, Data: []byte(data), RequestID: "r1"}
	}
	failed := streams.NewError(streams.CodeBizReject, "no such order\n\n")
	for _, c := range []struct {
		name   string
		res    *agentkit.Result
		err    error
		asJSON bool
		stdout string // "" when nothing is printed there
		stderr string // the start of stderr's last line
	}{
		{"json body with a newline", ok(streams.ContentTypeJSON, "{\"text\":\"hi\"}\n\n"), nil, false, "{\n  \"text\": \"hi\"\n}\n", "status=FINISHED"},
		{"json body --json", ok(streams.ContentTypeJSON, "{\"text\":\"hi\"}\n"), nil, true, `{"result":{"text":"hi"},"meta":`, ""},
		{"text body", ok("text/plain", "hi\n"), nil, false, "\"hi\\n\"\n", "status=FINISHED"},
		{"error", nil, failed, false, "", "error: BIZ_REJECT: no such order"},
		{"error --json", nil, failed, true, `{"error":{"code":"BIZ_REJECT"`, "error: BIZ_REJECT: no such order"},
		{"plain error", nil, errors.New("connection closed\n"), false, "", "error: INTERNAL: connection closed"},
	} {
		var stdout, stderr bytes.Buffer
		printResult(&stdout, &stderr, c.res, c.err, "r1", c.asJSON)
		for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
			if out != "" && (!strings.HasSuffix(out, "\n") || strings.HasSuffix(out, "\n\n") || strings.HasSuffix(strings.TrimSuffix(out, "\n"), " ")) {
				t.Errorf("%s: %s ends badly: %q", c.name, name, out)
			}
		}
		if !strings.HasPrefix(stdout.String(), c.stdout) || (c.stdout == "" && stdout.Len() > 0) {
			t.Errorf("%s: stdout %q, want it to start with %q", c.name, stdout.String(), c.stdout)
		}
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if !strings.HasPrefix(lines[len(lines)-1], c.stderr) {
			t.Errorf("%s: stderr %q, want its last line to start with %q", c.name, stderr.String(), c.stderr)
		}
	}
}
