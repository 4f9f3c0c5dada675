package clitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Seen returns what the editor was given on its n-th run, "" if it did not
// run that often.
func Seen(t *testing.T, dir string, n int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("seen-%d.yaml", n)))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Goroutines notes the goroutines running now, for checkNoLeaks.
func Goroutines() goleak.Option { return goleak.IgnoreCurrent() }

// CheckNoLeaks fails t when goroutines started since before are still
// running after a bounded wait.
func CheckNoLeaks(t *testing.T, before goleak.Option) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() error { return goleak.Find(before) })
}

// SyncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Result is the outcome of one command run.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// RunCmd runs a command to completion with a bounded context.
func RunCmd(t *testing.T, run cli.RunFunc, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr SyncBuffer
	code := run(ctx, args, &stdout, &stderr)
	return Result{code, stdout.String(), stderr.String()}
}

// Background runs a long-running command until the test ends, then stops it
// and checks that it exits 0 within a bound. It returns the command's stderr.
func Background(t *testing.T, name string, run cli.RunFunc, args ...string) *SyncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := new(SyncBuffer)
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, io.Discard, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != cli.ExitOK {
				t.Errorf("%s exited %d; stderr:\n%s", name, code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30s", name)
		}
	})
	return stderr
}

// WaitOutput polls until w holds want.
func WaitOutput(t *testing.T, w *SyncBuffer, want string) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(w.String(), want) {
			return fmt.Errorf("no %q in output:\n%s", want, w.String())
		}
		return nil
	})
}

// DecodeFailure decodes what a failure prints on stdout with --json,
// failing t unless stdout holds exactly one JSON object with an error code
// and message.
func DecodeFailure(t *testing.T, r Result) cli.FailureOutput {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.Stdout))
	var out cli.FailureOutput
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("stdout %q holds no JSON object: %v (stderr %q)", r.Stdout, err, r.Stderr)
	}
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		t.Fatalf("stdout %q holds more than one JSON value", r.Stdout)
	}
	if out.Error == nil || out.Error.Code == "" || out.Error.Message == "" {
		t.Fatalf("stdout %q: no error code and message", r.Stdout)
	}
	return out
}

// SetConfirmInput makes purge read its confirmation from answer, as if from
// a terminal or not, until the test ends.
func SetConfirmInput(t *testing.T, answer string, terminal bool) {
	old := cli.ConfirmInput
	cli.ConfirmInput = func() (io.Reader, bool) { return strings.NewReader(answer), terminal }
	t.Cleanup(func() { cli.ConfirmInput = old })
}

// SetPayloadInput makes a payload of "-" read input until the test ends.
func SetPayloadInput(t *testing.T, input string) {
	old := cli.PayloadInput
	cli.PayloadInput = func() io.Reader { return strings.NewReader(input) }
	t.Cleanup(func() { cli.PayloadInput = old })
}

// Provisioned runs a server with the topology and returns it with the
// connection flags that reach it.
func Provisioned(t *testing.T) (*server.Server, []string) {
	t.Helper()
	s := natstest.RunServer(t)
	natstest.Provision(t, natstest.Connect(t, s), streams.Topology{Memory: true})
	return s, []string{"--server", s.ClientURL(), "--timeout", "5s"}
}

// Bucket returns a bucket of s, for putting values by hand.
func Bucket(t *testing.T, s *server.Server, name string) jetstream.KeyValue {
	t.Helper()
	js, _ := jetstream.New(natstest.Connect(t, s))
	kv, err := js.KeyValue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// WriteFiles writes name → content into a new directory and returns it.
func WriteFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Expect checks a command's exit code and that its output holds each want
// ("out:" prefix: stdout, else stderr).
func Expect(t *testing.T, r Result, code int, want ...string) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.Code, code, r.Stdout, r.Stderr)
	}
	for _, w := range want {
		if s, ok := strings.CutPrefix(w, "out:"); ok {
			if !strings.Contains(r.Stdout, s) {
				t.Errorf("stdout lacks %q:\n%s", s, r.Stdout)
			}
		} else if !strings.Contains(r.Stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.Stderr)
		}
	}
}

// FailureCode returns the code of the one JSON failure object on stdout.
func FailureCode(t *testing.T, stdout string) string {
	t.Helper()
	var out cli.FailureOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Error == nil {
		t.Fatalf("stdout is not one failure object: %q (%v)", stdout, err)
	}
	return string(out.Error.Code)
}
