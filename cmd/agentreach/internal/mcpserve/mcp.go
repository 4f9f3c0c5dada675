// Package mcpserve holds the mcp command: the routable capabilities as MCP
// tools on stdin/stdout for a desktop client (docs/mcp.md).
package mcpserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/dispatcher/gateway/mcp"
)

const mcpAbout = `
Serves every routable capability as an MCP tool on standard input and output,
for a desktop MCP client that starts it (docs/mcp.md). The tools follow the
registry: an agent joining or leaving is pushed as tools/list_changed. Each
tools/call is a task routed by the dispatchers, as the identity of --creds
(signed) when given; with an Agent-Reach identity the tools are those the ACL
lets it call. Over NATS the identity must be able to read REACH_AGENTS,
REACH_CAPS and REACH_POLICY; a caller identity, which may not, gives --url: the
tools of a gateway's /mcp are then relayed, called with the bearer token of
--creds. Logs go to standard error.`

// Run is the mcp command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn cli.ConnFlags
		url  string
	)
	cl := cli.NewCmdline("mcp", "agentreach mcp [flags]", mcpAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.StringVar(&url, "url", "", "relay the MCP endpoint at `url` (a gateway's https://host:8080/mcp) instead of\nfollowing the registry over NATS; --creds gives its bearer token, --tls-ca its CA")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and reading the registry at start")
	})
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	conn.Log = conn.Logger(stderr)
	t := &sdk.IOTransport{Reader: os.Stdin, Writer: nopWriteCloser{stdout}}
	if url != "" {
		hc, err := relayClient(&conn)
		if err != nil {
			return cl.Fail(stderr, err)
		}
		if err := mcp.Relay(ctx, url, hc, t, cli.ShortVersion(), conn.Log); err != nil && ctx.Err() == nil {
			return cl.Fail(stderr, err)
		}
		return cli.ExitOK
	}
	nc, err := conn.Connect("agentreach-mcp")
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer nc.Close()
	caller := ""
	opts := []agentkit.ClientOption{agentkit.WithJSON(), agentkit.WithSubjects(conn.Subjects())}
	if conn.Signs() {
		opts = append(opts, agentkit.WithCredentials(conn.Creds))
		if caller, _, err = auth.CredentialsName(conn.Creds); err != nil {
			return cl.Fail(stderr, err)
		}
	}
	client, err := agentkit.NewClient(nc, opts...)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	start, cancel := conn.Bounded(ctx)
	src, err := mcp.NewNATSSource(start, nc, client, caller != "", conn.Log)
	cancel()
	if err != nil {
		return cl.Fail(stderr, conn.NotProvisioned(err, "the registry"))
	}
	defer src.Close()
	srv := mcp.New(src, mcp.Config{Version: cli.ShortVersion()}, mcp.WithLogger(conn.Log))
	srv.Start(ctx)
	defer srv.Close()
	if err := srv.Serve(ctx, caller, t); err != nil && ctx.Err() == nil {
		return cl.Fail(stderr, err)
	}
	return cli.ExitOK
}

// nopWriteCloser is a writer the transport may close without closing it.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// relayClient is the HTTP client of --url: the bearer token of --creds'
// identity on every request, and the CA of --tls-ca.
func relayClient(conn *cli.ConnFlags) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if conn.TLSCA != "" {
		pem, err := os.ReadFile(conn.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate", conn.TLSCA)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = tr
	if conn.Creds != "" {
		signer, err := auth.LoadSigner(conn.Creds)
		if err != nil {
			return nil, fmt.Errorf("--creds: %w", err)
		}
		rt = bearerTransport{token: signer.Bearer(), next: tr}
	}
	return &http.Client{Transport: rt}, nil
}

// bearerTransport sends an Authorization header with every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
