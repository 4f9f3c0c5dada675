package stack

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// TestHTTPFlag: a taken --http port stops up before anything starts,
// naming the flag; a malformed one, or a --http-hosts name with a port, is
// a usage error, for up and dispatcher.
func TestHTTPFlag(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	r := clitest.RunCmd(t, RunUp, "--nats-listen", listen, "--data-dir", t.TempDir(), "--http", l.Addr().String())
	if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "--http "+l.Addr().String()+": cannot listen") ||
		!strings.Contains(r.Stderr, "move it with --http or AGENTREACH_HTTP=") || !strings.Contains(r.Stderr, "--http off") {
		t.Fatalf("taken port: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if strings.Contains(r.Stdout, "Agent-Reach is up") {
		t.Fatal("up printed its banner with its HTTP port taken")
	}
	for _, run := range []cli.RunFunc{RunUp, RunDispatcher} {
		for _, bad := range []string{"8080", "localhost:http", "127.0.0.1:99999"} {
			if r := clitest.RunCmd(t, run, "--http", bad); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "--http") {
				t.Errorf("--http %s: exit %d, stderr %q", bad, r.Code, r.Stderr)
			}
		}
		if r := clitest.RunCmd(t, run, "--http", "127.0.0.1:0", "--http-hosts", "reach.example:8080"); r.Code != cli.ExitUsage ||
			!strings.Contains(r.Stderr, "--http-hosts") || !strings.Contains(r.Stderr, "without a port") {
			t.Errorf("--http-hosts with a port: exit %d, stderr %q", r.Code, r.Stderr)
		}
	}
}

// httpsClient trusts the CA certificate in caFile.
func httpsClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("no certificate in %s", caFile)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// checkHTTPS asks base's /healthz over HTTPS with client, then over plain
// HTTP, which the gateway refuses with a 400 that says why.
func checkHTTPS(t *testing.T, client *http.Client, base string) {
	t.Helper()
	res, err := client.Get(base + "healthz")
	if err != nil {
		t.Fatalf("GET %shealthz: %v", base, err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || res.TLS == nil || !strings.Contains(string(body), `"status":"ok"`) {
		t.Fatalf("GET %shealthz: %d %q", base, res.StatusCode, body)
	}
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	res, err = (&http.Client{Transport: plain, Timeout: 20 * time.Second}).Get("http://" + strings.TrimPrefix(base, "https://") + "healthz")
	if err != nil {
		t.Fatalf("plain http: %v", err)
	}
	body, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTP request to an HTTPS server") {
		t.Errorf("plain http to the HTTPS gateway: %d %q", res.StatusCode, body)
	}
}

// TestUpHTTPS runs up as the container image does with
// AGENTREACH_TLS_ENABLED=true: the gateway serves HTTPS with a certificate
// of the development CA in <data-dir>/tls, the banner says https, and
// /healthz answers a client that trusts that CA.
func TestUpHTTPS(t *testing.T) {
	before := clitest.Goroutines()
	dir := t.TempDir()
	t.Setenv("AGENTREACH_TLS_ENABLED", "true")
	u := startUp(t, "--nats-listen", "127.0.0.1:0", "--data-dir", dir, "--http", "127.0.0.1:0")
	clitest.WaitOutput(t, u.stdout, "Agent-Reach is up")
	m := regexp.MustCompile(`dashboard\s+(https://127\.0\.0\.1:\d+/)`).FindStringSubmatch(u.stdout.String())
	if m == nil {
		t.Fatalf("no https dashboard in the banner:\n%s", u.stdout.String())
	}
	checkHTTPS(t, httpsClient(t, filepath.Join(dir, "tls", "ca.pem")), m[1])
	if code := u.Stop(t); code != cli.ExitOK {
		t.Fatalf("runUp exited %d; stderr:\n%s", code, u.stderr.String())
	}
	clitest.CheckNoLeaks(t, before)
}

// TestDispatcherHTTPS gives a dispatcher its certificate through
// AGENTREACH_CERT_FILE and AGENTREACH_KEY_FILE: its gateway serves HTTPS
// with it.
func TestDispatcherHTTPS(t *testing.T) {
	s := natstest.RunServer(t)
	files, err := devtls.EnsureTLS(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTREACH_CERT_FILE", files.ServerCert)
	t.Setenv("AGENTREACH_KEY_FILE", files.ServerKey)
	stderr := clitest.Background(t, "dispatcher", RunDispatcher, "--server", s.ClientURL(), "--http", "127.0.0.1:0", "--log-level", "info")
	clitest.WaitOutput(t, stderr, "dispatcher running")
	m := regexp.MustCompile(`"http":"(https://127\.0\.0\.1:\d+/)"`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("the dispatcher logs no https gateway:\n%s", stderr.String())
	}
	checkHTTPS(t, httpsClient(t, files.CA), m[1])
}
