package stack

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
)

// The --http values: where `up` serves HTTP by default, and the word that
// turns it off (the default of `dispatcher`).
const (
	defaultHTTP = "127.0.0.1:8080"
	httpOff     = "off"
)

// httpFlags are the HTTP gateway's flags; up and dispatcher share them.
type httpFlags struct {
	addr      string // --http: host:port, or "off"
	TLS       bool   // --http-tls
	Cert, Key string // --http-cert, --http-key
	// devCA is where up keeps its development CA (<data-dir>/tls), which
	// signs the gateway's certificate for --http-tls without --http-cert;
	// "" for dispatcher, which has none. devHosts are the names that
	// certificate covers.
	devCA    string
	devHosts []string
	hosts    string // --http-hosts: comma-separated, or "*"
	admin    bool   // --http-admin: the console's actions without auth
}

// Register defines --http with its default, and the HTTPS flags.
func (h *httpFlags) Register(fs *flag.FlagSet, def string) {
	fs.StringVar(&h.addr, "http", def, "`host:port` of the HTTP gateway: the API, /healthz, /metrics and the dashboard at /\n"+
		"(port 0: any free port; off: no HTTP)")
	fs.BoolVar(&h.TLS, "http-tls", false, "serve the gateway over HTTPS: with --http-cert and --http-key, or (up only) with a\n"+
		"certificate of the development CA in <data-dir>/tls, the one --tls makes")
	fs.StringVar(&h.Cert, "http-cert", "", "certificate `file` (PEM, with its chain) the gateway serves HTTPS with (turns HTTPS on)")
	fs.StringVar(&h.Key, "http-key", "", "private key `file` (PEM) of --http-cert")
	fs.StringVar(&h.hosts, "http-hosts", "", "comma-separated `names` the gateway answers as Host besides localhost, loopback IPs and\n"+
		"the address a request arrives on (any other Host: 421, against DNS rebinding); give the names\n"+
		"clients dial behind a proxy or in a container; * turns the check off (unsafe)")
	fs.BoolVar(&h.admin, "http-admin", false, "without auth, turn the dashboard's actions on (replay, drop and resolve dead letters and\n"+
		"review entries) for anyone who reaches the port; with auth on they are each identity's under the ACL")
}

// hostList is --http-hosts as gateway.Config.Hosts.
func (h *httpFlags) hostList() []string {
	var hosts []string
	for _, name := range strings.Split(h.hosts, ",") {
		if name = strings.TrimSpace(name); name != "" {
			hosts = append(hosts, name)
		}
	}
	return hosts
}

// https reports whether the gateway serves HTTPS.
func (h *httpFlags) HTTPS() bool { return h.TLS || h.Cert != "" }

// devCAFile returns the CA certificate a client needs to trust the
// gateway when it serves a certificate of the development CA, else "".
func (h *httpFlags) devCAFile() string {
	if !h.HTTPS() || h.Cert != "" || h.devCA == "" {
		return ""
	}
	return devtls.TLSFilesIn(h.devCA).CA
}

// check validates the flags; devCA says whether the command has a
// development CA to fall back on.
func (h *httpFlags) check(devCA bool) error {
	if h.addr != httpOff {
		_, p, err := net.SplitHostPort(h.addr)
		if err == nil {
			var port int
			if port, err = strconv.Atoi(p); err == nil && (port < 0 || port > 65535) {
				err = fmt.Errorf("port %d out of range", port)
			}
		}
		if err != nil {
			return fmt.Errorf("--http %q: want host:port such as %s, or %s", h.addr, defaultHTTP, httpOff)
		}
	}
	if err := gateway.ValidateHosts(h.hostList()); err != nil {
		return fmt.Errorf("--http-hosts %q: %w", h.hosts, err)
	}
	switch {
	case (h.Cert == "") != (h.Key == ""):
		return errors.New("--http-cert and --http-key go together")
	case h.HTTPS() && h.addr == httpOff:
		return errors.New("--http-tls and --http-cert need the gateway on: give --http host:port")
	case h.TLS && h.Cert == "" && !devCA:
		return errors.New("--http-tls needs --http-cert and --http-key here (only up has a development CA to make one)")
	}
	return nil
}

// gatewayConfig returns the gateway's configuration: its Host names, and
// its TLS (serverTLS).
func (h *httpFlags) gatewayConfig() (gateway.Config, error) {
	tlsConfig, err := h.serverTLS()
	return gateway.Config{TLS: tlsConfig, Hosts: h.hostList()}, err
}

// serverTLS returns the gateway's TLS configuration, nil for plain HTTP:
// the certificate of --http-cert and --http-key, else one of the
// development CA (made or renewed as up --tls does).
func (h *httpFlags) serverTLS() (*tls.Config, error) {
	if !h.HTTPS() {
		return nil, nil
	}
	cert, key := h.Cert, h.Key
	if cert == "" {
		files, err := devtls.EnsureTLS(h.devCA, h.devHosts)
		if err != nil {
			return nil, fmt.Errorf("--http-tls: %w", err)
		}
		cert, key = files.ServerCert, files.ServerKey
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--http-cert %s, --http-key %s: %w", cert, key, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// devCertHosts returns the names a development certificate covers: the
// loopback names and the host of every host:port in addrs that clients
// can dial (not an unspecified address such as 0.0.0.0).
func devCertHosts(addrs ...string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if ip := net.ParseIP(host); err != nil || host == "" || (ip != nil && ip.IsUnspecified()) || slices.Contains(hosts, host) {
			continue
		}
		hosts = append(hosts, host)
	}
	return hosts
}

// free fails when --http's port is taken, before anything starts.
func (h *httpFlags) free() error {
	if h.addr == httpOff {
		return nil
	}
	l, err := net.Listen("tcp", h.addr)
	if err != nil {
		return httpTaken(h.addr, err)
	}
	return l.Close()
}

// httpTaken explains a --http address that cannot be listened on, naming
// the flag and the variable that move it (as up's NATS port error does).
func httpTaken(v string, err error) error {
	move := "--http or " + cli.EnvName("http")
	if host, p, serr := net.SplitHostPort(v); serr == nil {
		if port, perr := strconv.Atoi(p); perr == nil {
			move = moveListener("http", host, port)
		}
	}
	return fmt.Errorf("--http %s: cannot listen: %w (is another agentreach or service on that port? move it with %s, or turn it off with --http off)", v, err, move)
}
