package harness

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress redraws one status line on a terminal every 250 ms: the
// scenario, the current step and a live counter the step supplies.
type progress struct {
	w        io.Writer
	scenario string

	mu     sync.Mutex
	step   string
	since  time.Time
	status func() string

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func newProgress(w io.Writer, scenario string) *progress {
	p := &progress{w: w, scenario: scenario, stop: make(chan struct{}), done: make(chan struct{})}
	if w == nil {
		close(p.done)
		return p
	}
	go p.loop()
	return p
}

// Begin names the current step; status, when not nil, is called on every
// redraw for a live counter.
func (p *progress) Begin(step string, status func() string) {
	p.mu.Lock()
	p.step, p.since, p.status = step, time.Now(), status
	p.mu.Unlock()
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-t.C:
			p.mu.Lock()
			line := fmt.Sprintf("%s | %s | %4.1fs", p.scenario, p.step, time.Since(p.since).Seconds())
			if p.status != nil {
				line += " | " + p.status()
			}
			p.mu.Unlock()
			fmt.Fprint(p.w, "\r\033[K"+line)
		}
	}
}

// Close erases the line and stops redrawing; calling it again does nothing.
func (p *progress) Close() {
	p.once.Do(func() {
		if p.w != nil {
			close(p.stop)
		}
		<-p.done
	})
}
