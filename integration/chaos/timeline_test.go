//go:build chaos

package chaos

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// timelineEvery is how often the timeline samples the cluster.
const timelineEvery = 100 * time.Millisecond

// timeline records, from a fault's start until it is stopped, what each
// node says of its routes and of the JetStream leaders (/routez, /jsz),
// every dispatcher's table and whether a call succeeds — each change with
// its time — so that a scenario can print where the time after the heal
// went.
type timeline struct {
	s     *stack
	start time.Time
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	events []event
	last   map[string]string
}

type event struct {
	at   time.Time
	what string
}

// startTimeline samples the stack until stopped.
func (s *stack) startTimeline() *timeline {
	tl := &timeline{s: s, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), last: map[string]string{}}
	go tl.run()
	s.t.Cleanup(tl.halt)
	return tl
}

func (tl *timeline) run() {
	defer close(tl.done)
	tick := time.NewTicker(timelineEvery)
	defer tick.Stop()
	for {
		var wg sync.WaitGroup
		for i := range tl.s.c.nodes {
			wg.Add(2)
			go func() { defer wg.Done(); tl.routes(i) }()
			go func() { defer wg.Done(); tl.leaders(i) }()
		}
		wg.Wait()
		select {
		case <-tl.stop:
			return
		case <-tick.C:
		}
	}
}

// note records what a source says now, if it changed.
func (tl *timeline) note(source, state string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.last[source] == state {
		return
	}
	tl.last[source] = state
	tl.events = append(tl.events, event{at: time.Now(), what: source + ": " + state})
}

var monitorClient = http.Client{Timeout: 500 * time.Millisecond}

func (tl *timeline) get(i int, path string, v any) error {
	n := tl.s.c.nodes[i]
	resp, err := monitorClient.Get(fmt.Sprintf("http://%s:%d%s", n.host, n.hport, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// routes notes node i's routes: per remote node, how many connections,
// and how many hold unsent bytes (a connection stalled on TCP).
func (tl *timeline) routes(i int) {
	var rz struct {
		Routes []struct {
			Remote  string `json:"remote_name"`
			Pending int    `json:"pending_size"`
		} `json:"routes"`
	}
	name := tl.s.c.nodes[i].name
	if err := tl.get(i, "/routez", &rz); err != nil {
		tl.note(name+" routes", "unreadable")
		return
	}
	count, stalled := map[string]int{}, map[string]int{}
	for _, r := range rz.Routes {
		count[r.Remote]++
		if r.Pending > 0 {
			stalled[r.Remote]++
		}
	}
	var parts []string
	for _, n := range tl.s.c.nodes {
		if n.name == name {
			continue
		}
		p := fmt.Sprintf("%s×%d", n.name, count[n.name])
		if stalled[n.name] > 0 {
			p += fmt.Sprintf(" (%d with unsent bytes)", stalled[n.name])
		}
		parts = append(parts, p)
	}
	tl.note(name+" routes", strings.Join(parts, ", "))
}

// leaders notes the meta leader and each stream's leader as node i sees
// them.
func (tl *timeline) leaders(i int) {
	var jsz jszStreams
	name := tl.s.c.nodes[i].name
	if err := tl.get(i, "/jsz?accounts=true&streams=true", &jsz); err != nil {
		tl.note(name+" leaders", "unreadable")
		return
	}
	none := func(l string) string {
		if l == "" {
			return "none"
		}
		return l
	}
	tl.note(name+" sees the meta leader", none(jsz.Meta.Leader))
	for _, a := range jsz.Accounts {
		for _, st := range a.Streams {
			tl.note(name+" sees "+st.Name+" led by", none(st.Cluster.Leader))
		}
	}
}

// mark records a moment of the scenario (the fault, the heal).
func (tl *timeline) mark(what string) {
	tl.mu.Lock()
	tl.events = append(tl.events, event{at: time.Now(), what: what})
	tl.mu.Unlock()
}

func (tl *timeline) halt() {
	select {
	case <-tl.stop:
	default:
		close(tl.stop)
	}
	<-tl.done
}

// print logs the state 2 s before heal and every change from then on,
// each at its time after the heal.
func (tl *timeline) print(heal time.Time) {
	tl.halt()
	tl.mu.Lock()
	events := slices.Clone(tl.events)
	tl.mu.Unlock()
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	// The state 2 s before the heal, then every change.
	from := heal.Add(-2 * time.Second)
	state := map[string]string{}
	var b strings.Builder
	for _, e := range events {
		if e.at.Before(from) {
			if source, what, ok := strings.Cut(e.what, ": "); ok {
				state[source] = what
			}
			continue
		}
		fmt.Fprintf(&b, "\n  %+8.3fs %s", e.at.Sub(heal).Seconds(), e.what)
	}
	var before strings.Builder
	for _, source := range slices.Sorted(maps.Keys(state)) {
		fmt.Fprintf(&before, "\n  %s: %s", source, state[source])
	}
	tl.s.t.Logf("2 s before the heal:%s\ntimeline around the heal:%s", before.String(), b.String())
}

// election is the last leaderless spell of stream's group that began
// after heal and ended by until, as the timeline saw it: from when most
// nodes saw no leader to when every node saw one again, each measured from
// heal. A cut-off node's groups campaign while alone and come back with a
// higher term; the leader they meet steps down, and nats-server (no
// pre-vote, elections 4–9 s) elects the next one only after its election
// timeout: while it does, no write lands and a replica that had not heard
// of the last commit before the stepdown stays behind.
func (tl *timeline) election(stream string, heal, until time.Time) (from, to time.Duration, ok bool) {
	tl.mu.Lock()
	events := slices.Clone(tl.events)
	tl.mu.Unlock()
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	suffix := " sees " + stream + " led by"
	view := map[string]string{}
	nodes := len(tl.s.c.nodes)
	var began time.Time
	for _, e := range events {
		if e.at.After(until) {
			break
		}
		source, state, found := strings.Cut(e.what, ": ")
		node, isView := strings.CutSuffix(source, suffix)
		if !found || !isView {
			continue
		}
		view[node] = state
		none := 0
		for _, v := range view {
			if v == "none" {
				none++
			}
		}
		switch {
		case began.IsZero() && 2*none > nodes && e.at.After(heal):
			began = e.at
		case !began.IsZero() && none == 0 && len(view) == nodes:
			from, to, ok = began.Sub(heal), e.at.Sub(heal), true
			began = time.Time{}
		}
	}
	return from, to, ok
}

// noteProbe records a probe's answer in the scenario's timeline, if one
// runs.
func (s *stack) noteProbe(name string, err error) {
	if s.tl == nil {
		return
	}
	state := "passes"
	if err != nil {
		state = "fails: " + err.Error()
	}
	s.tl.note("probe "+name, state)
}

// TestTimelineElection checks how a scenario tells NATS's election after a
// heal apart from a late convergence, on a timeline written by hand: the
// stepdown (most nodes without a leader) must begin after the heal, and
// one node alone without a leader (the cut-off node catching up) is not
// an election.
func TestTimelineElection(t *testing.T) {
	heal := time.Now()
	at := func(ms int) time.Time { return heal.Add(time.Duration(ms) * time.Millisecond) }
	tl := &timeline{s: &stack{c: &cluster{nodes: []*node{{name: "n1"}, {name: "n2"}, {name: "n3"}}}}}
	views := func(events ...event) {
		tl.events = append([]event{
			{at(-9000), "n1 sees KV_REACH_AGENTS led by: n2"},
			{at(-9000), "n2 sees KV_REACH_AGENTS led by: n2"},
			{at(-9000), "n3 sees KV_REACH_AGENTS led by: n2"},
		}, events...)
	}
	views(
		event{at(40), "n3 sees KV_REACH_AGENTS led by: none"},
		event{at(1785), "n2 sees KV_REACH_AGENTS led by: none"},
		event{at(1800), "n2 sees REACH_TASKS led by: none"},
		event{at(6385), "n1 sees KV_REACH_AGENTS led by: none"},
		event{at(6485), "n1 sees KV_REACH_AGENTS led by: n1"},
		event{at(6485), "n2 sees KV_REACH_AGENTS led by: n1"},
		event{at(6487), "n3 sees KV_REACH_AGENTS led by: n1"},
	)
	if from, to, ok := tl.election("KV_REACH_AGENTS", heal, at(6700)); !ok || from != 1785*time.Millisecond || to != 6487*time.Millisecond {
		t.Errorf("a stepdown after the heal: election %v–%v (%v), want 1.785s–6.487s", from, to, ok)
	}
	if _, _, ok := tl.election("KV_REACH_AGENTS", heal, at(6000)); ok {
		t.Error("an election not over by the convergence counted")
	}
	views(
		event{at(40), "n3 sees KV_REACH_AGENTS led by: none"},
		event{at(1600), "n3 sees KV_REACH_AGENTS led by: n2"},
	)
	if from, to, ok := tl.election("KV_REACH_AGENTS", heal, at(6700)); ok {
		t.Errorf("the cut-off node catching up counted as an election, %v–%v", from, to)
	}
	views(
		event{at(-5000), "n1 sees KV_REACH_AGENTS led by: none"},
		event{at(-5000), "n2 sees KV_REACH_AGENTS led by: none"},
		event{at(900), "n1 sees KV_REACH_AGENTS led by: n1"},
		event{at(900), "n2 sees KV_REACH_AGENTS led by: n1"},
	)
	if from, to, ok := tl.election("KV_REACH_AGENTS", heal, at(6700)); ok {
		t.Errorf("an election under way before the heal counted, %v–%v", from, to)
	}
}
