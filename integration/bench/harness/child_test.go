package harness

import (
	"bufio"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestServeChildServesUntilItsInputCloses runs the server process's body
// in this process: it reports a URL that takes JetStream requests, and
// returns once its input closes.
func TestServeChildServesUntilItsInputCloses(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveChild(t.TempDir(), inR, outW) }()

	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the URL: %v", err)
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("URL %q, want a loopback nats:// URL", url)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Request("$JS.API.INFO", nil, 5*time.Second); err != nil {
		t.Fatalf("JetStream on the child server: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("serveChild returned while its input was open: %v", err)
	default:
	}

	_ = inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serveChild: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serveChild still serving 15s after its input closed")
	}
}
