package tiers

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

// httpLoop runs httpCallers callers POSTing payload to addr's path, each
// on a keep-alive connection of its own and sending its next request as
// soon as the previous one is answered, for dur. The client is a minimal
// HTTP/1.1 one (a prepared request, the status line and Content-Length
// read), as a load generator such as wrk is: what is measured is the
// gateway, not Go's HTTP client, which would take as much CPU again on the
// machine's cores as the server it calls.
func httpLoop(r *harness.Run, addr, path string, payload []byte, step string, dur, timeout time.Duration) (*harness.Latency, error) {
	req := []byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		path, addr, streams.ContentTypeJSON, len(payload), payload))
	res := harness.NewLatency()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var count atomic.Int64
	r.Prog.Begin(step, func() string { return fmt.Sprintf("%d callers, %d answered", httpCallers, count.Load()) })
	cpu0 := harness.ProcessCPU()
	start := time.Now()
	end := start.Add(dur)
	for range httpCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := harness.NewLatency()
			c := &httpConn{}
			defer c.Close()
			for time.Now().Before(end) && r.Ctx.Err() == nil {
				t0 := time.Now()
				status, err := c.roundTrip(addr, req, timeout)
				lat := time.Since(t0)
				switch {
				case err != nil:
					mine.Errors++
					mine.Codes[err.Error()]++
					lat = timeout
					c.Close() // the next request dials again
				case status != http.StatusOK:
					mine.Errors++
					mine.Codes[strconv.Itoa(status)]++
					lat = timeout
				default:
					mine.OK++
					count.Add(1)
				}
				_ = mine.Hist.RecordValue(max(lat.Microseconds(), 1))
			}
			mu.Lock()
			res.Add(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.CPU = harness.ProcessCPU() - cpu0
	return res, r.Ctx.Err()
}

// httpConn is one keep-alive connection of httpLoop's client.
type httpConn struct {
	conn net.Conn
	br   *bufio.Reader
	body []byte
}

// roundTrip sends req on c (dialling addr first when not connected) and reads
// the response: its status; the body is read and dropped.
func (c *httpConn) roundTrip(addr string, req []byte, timeout time.Duration) (int, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return 0, err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 4096)
	}
	if err := c.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	if _, err := c.conn.Write(req); err != nil {
		return 0, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length := -1
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if name, value, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(name, []byte("Content-Length")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		}
	}
	if length < 0 {
		return 0, fmt.Errorf("response without Content-Length")
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	if _, err := io.ReadFull(c.br, c.body[:length]); err != nil {
		return 0, err
	}
	return status, nil
}

func (c *httpConn) Close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// scrapeEverySecond reads h's metrics page once a second until stop.
func scrapeEverySecond(h http.Handler) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/metrics", nil))
			}
		}
	}()
	return func() { close(done); <-exited }
}
