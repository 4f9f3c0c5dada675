package gateway

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/agent-reach/agentreach/streams"
)

// AnyHost, as the only entry of Config.Hosts, turns the Host check off.
const AnyHost = "*"

// A web page can reach a gateway on this machine by a name of its own
// that it makes resolve here (DNS rebinding); the browser then sends that
// name as Host. So the gateway answers only a Host that names it: a
// loopback name or IP, the address the request arrived on, the host Listen
// was given, or one of Config.Hosts. An IP address the request did not
// arrive on is refused like any other name. A request without Host
// (HTTP/1.0, or handed to Handler in process) comes from no browser and
// passes.

// hostSet is the names a gateway answers to besides the loopback ones and
// the address a request arrives on; nil answers every Host.
type hostSet map[string]struct{}

// ValidateHosts returns the error New would return for Config.Hosts
// hosts, nil when they are valid.
func ValidateHosts(hosts []string) error {
	_, err := newHostSet(hosts)
	return err
}

// newHostSet validates Config.Hosts.
func newHostSet(hosts []string) (hostSet, error) {
	if len(hosts) == 1 && hosts[0] == AnyHost {
		return nil, nil
	}
	set := hostSet{}
	for _, h := range hosts {
		name := canonicalHost(h)
		if name == "" || name == AnyHost || strings.ContainsAny(name, "/ ") ||
			(strings.Contains(name, ":") && net.ParseIP(name) == nil) {
			return nil, fmt.Errorf("%w: Hosts entry %q: want a host name or IP address without a port (or %q alone, which turns the check off)",
				ErrInvalidConfig, h, AnyHost)
		}
		set[name] = struct{}{}
	}
	return set, nil
}

// canonicalHost is host (of a Host header or a listen address, its port
// already removed) as compared: lower case, without IPv6 brackets or a
// trailing dot.
func canonicalHost(host string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
}

// hostOf returns the host of a Host header or a host:port address.
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return canonicalHost(h)
	}
	return canonicalHost(hostport)
}

// allowsHost reports whether r's Host names this gateway.
func (g *Gateway) allowsHost(r *http.Request) bool {
	if g.hosts == nil {
		return true
	}
	host := hostOf(r.Host)
	if host == "" || host == "localhost" { // no Host: HTTP/1.0 or in process, never a browser
		return true
	}
	if _, ok := g.hosts[host]; ok {
		return true
	}
	if listen := g.listenHost.Load(); listen != nil && *listen == host {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	return ok && local.IP.Equal(ip)
}

// checkHost answers 421 Misdirected Request, before next, to a request
// whose Host does not name this gateway.
func (g *Gateway) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.allowsHost(r) {
			writeJSON(w, http.StatusMisdirectedRequest, streams.NewError(CodeMisdirected,
				"Host %q does not name this gateway: it answers localhost, a loopback IP, the address it listens on, "+
					"and the names it is given (agentreach --http-hosts, AGENTREACH_HTTP_HOSTS), so that no web page "+
					"can reach it under a name of its own (DNS rebinding)", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}
