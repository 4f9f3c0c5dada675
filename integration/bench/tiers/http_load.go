package tiers

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

// httpLoop is closedLoop POSTing payload to addr's path, an answer other
// than 200 a failure.
func httpLoop(r *harness.Run, addr, path string, payload []byte, step string, dur, timeout time.Duration) (*harness.Latency, error) {
	req := []byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		path, addr, streams.ContentTypeJSON, len(payload), payload))
	return closedLoop(r, addr, req, httpFailure, step, dur, timeout)
}

// cpuPerTask is l's CPU in µs per answered call.
func cpuPerTask(l *harness.Latency) float64 {
	return harness.Ratio(harness.Micros(l.CPU), float64(l.OK))
}

// latencyRow is the table row of the HTTP scenarios for a path: rps, p50
// and p99 ms, failed, CPU µs per task.
func latencyRow(path string, l *harness.Latency) []string {
	return []string{path, harness.Cell(l.RPS()), harness.Cell(harness.Millis(l.P(50))), harness.Cell(harness.Millis(l.P(99))),
		fmt.Sprint(l.Failed()), harness.Cell(cpuPerTask(l))}
}

// httpFailure says why an answer is a failure: its status when not 200,
// else "".
func httpFailure(status int, _ []byte) string {
	if status != http.StatusOK {
		return strconv.Itoa(status)
	}
	return ""
}

// closedLoop runs httpCallers callers sending the prepared request req to
// addr, each on a keep-alive connection of its own and sending its next
// request as soon as the previous one is answered, for dur; an answer
// failure names (a non-empty code) counts as failed, its latency as the
// timeout. The client is a minimal HTTP/1.1 one (a prepared request, the
// status line, Content-Length or chunks read), as a load generator such as
// wrk is: what is measured is the gateway, not Go's HTTP client, which
// would take as much CPU again on the machine's cores as the server it
// calls. Every HTTP scenario (http, mcp, a2a) loads through it.
func closedLoop(r *harness.Run, addr string, req []byte, failure func(status int, body []byte) string, step string, dur, timeout time.Duration) (*harness.Latency, error) {
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
				status, body, err := c.roundTrip(addr, req, timeout)
				lat := time.Since(t0)
				code := ""
				if err != nil {
					code = err.Error()
					c.Close() // the next request dials again
				} else {
					code = failure(status, body)
				}
				if code != "" {
					mine.Errors++
					mine.Codes[code]++
					lat = timeout
				} else {
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

// httpConn is one keep-alive connection of closedLoop's client.
type httpConn struct {
	conn net.Conn
	br   *bufio.Reader
	body []byte
}

// roundTrip sends req and reads the response: its status and body
// (Content-Length or chunked).
func (c *httpConn) roundTrip(addr string, req []byte, timeout time.Duration) (int, []byte, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 4096)
	}
	if err := c.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, nil, err
	}
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	length, chunked := -1, false
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case !ok:
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, nil, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")) && bytes.EqualFold(value, []byte("chunked")):
			chunked = true
		}
	}
	c.body = c.body[:0]
	switch {
	case chunked:
		for {
			line, err := c.br.ReadSlice('\n')
			if err != nil {
				return 0, nil, err
			}
			size, err := strconv.ParseInt(string(bytes.TrimRight(line, "\r\n")), 16, 32)
			if err != nil {
				return 0, nil, fmt.Errorf("bad chunk size %q", line)
			}
			n := len(c.body)
			c.body = slices.Grow(c.body, int(size)+2)[:n+int(size)+2]
			if _, err := io.ReadFull(c.br, c.body[n:]); err != nil {
				return 0, nil, err
			}
			c.body = c.body[:n+int(size)]
			if size == 0 {
				return status, c.body, nil
			}
		}
	case length >= 0:
		c.body = slices.Grow(c.body, length)[:length]
		if _, err := io.ReadFull(c.br, c.body); err != nil {
			return 0, nil, err
		}
		return status, c.body, nil
	}
	return 0, nil, fmt.Errorf("response without Content-Length or chunks")
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
