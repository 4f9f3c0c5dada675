package main

import (
	"flag"
	"fmt"
	"net"
	"strconv"
)

// The --http values: where `up` serves HTTP by default, and the word that
// turns it off (the default of `dispatcher`).
const (
	defaultHTTP = "127.0.0.1:8080"
	httpOff     = "off"
)

// registerHTTP defines --http with its default.
func registerHTTP(fs *flag.FlagSet, p *string, def string) {
	fs.StringVar(p, "http", def, "`host:port` of the HTTP gateway: the API, /healthz, /metrics and the dashboard at /\n"+
		"(port 0: any free port; off: no HTTP)")
}

// checkHTTP validates a --http value.
func checkHTTP(v string) error {
	if v == httpOff {
		return nil
	}
	_, p, err := net.SplitHostPort(v)
	if err == nil {
		var port int
		if port, err = strconv.Atoi(p); err == nil && (port < 0 || port > 65535) {
			err = fmt.Errorf("port %d out of range", port)
		}
	}
	if err != nil {
		return fmt.Errorf("--http %q: want host:port such as %s, or %s", v, defaultHTTP, httpOff)
	}
	return nil
}

// freeHTTP fails when --http's port is taken, before anything starts.
func freeHTTP(v string) error {
	if v == httpOff {
		return nil
	}
	l, err := net.Listen("tcp", v)
	if err != nil {
		return httpTaken(v, err)
	}
	return l.Close()
}

func httpTaken(v string, err error) error {
	return fmt.Errorf("--http %s: cannot listen: %w (is another agentreach or service on that port? choose another with --http, or --http off)", v, err)
}
