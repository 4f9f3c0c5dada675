package eventstats

import (
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"math"
	"sort"
	"sync"
	"time"
)

// Dimension is what a Summary groups by.
type Dimension string

// The dimensions of a Summary.
const (
	ByCapability Dimension = "capability" // the task's capability
	ByAgent      Dimension = "agent"      // the instance of its last attempt ("none" when nothing was delivered)
	ByType       Dimension = "type"       // that instance's agent type
)

// Dimensions lists every Dimension in the order the help names them.
func Dimensions() []Dimension { return []Dimension{ByCapability, ByAgent, ByType} }

// ParseDimension returns the dimension named s, or ErrInvalidQuery.
func ParseDimension(s string) (Dimension, error) {
	for i, d := range Dimensions() {
		if string(d) == s {
			return Dimensions()[i], nil
		}
	}
	return "", fmt.Errorf("%w: unknown dimension %q (want capability, agent or type)", ErrInvalidQuery, s)
}

// Defaults of Config.
const (
	DefaultWindow  = time.Hour
	DefaultBuckets = 360 // 10 s each over the default hour
	DefaultMaxKeys = 1000
	// OtherKey is the key past MaxKeys distinct keys of a dimension.
	OtherKey = "other"
	// NoneKey is the agent and type of a task nothing was delivered for.
	NoneKey = "none"
	// recentFailures is how many failed tasks Summary lists.
	recentFailures = 20
	// requestsKept is how many request ids are remembered, to credit a
	// feedback score (which names the request and the instance) to the
	// task's capability.
	requestsKept = 1 << 16
)

// Config configures an Aggregator. The zero value means all defaults.
type Config struct {
	// Window is how far back the aggregate reaches; older records are
	// dropped. Default 1 h.
	Window time.Duration
	// Buckets is how many time slices the window is kept in, the
	// resolution of Series and of the window's sliding edge; default 360.
	Buckets int
	// MaxKeys bounds the distinct keys per dimension; past it records count
	// under "other". Default 1000.
	MaxKeys int
	// TypeOf returns the agent type of an instance id ("" when unknown);
	// default: none known, every instance's type is "unknown".
	TypeOf func(instance string) string
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Aggregator holds the aggregate of the records fed to it. Create it with
// New; its methods are safe for concurrent use.
type Aggregator struct {
	cfg   Config
	width time.Duration

	mu       sync.Mutex
	dims     map[Dimension]map[string]*ring
	gathers  *ring             // broadcasts and fan-outs, whatever the dimension
	requests map[string]string // request id → capability
	reqOrder []string
	reqNext  int
	failures []Failure // ring of the latest failed tasks
	failNext int
	added    int64
	edges    edges // topology.go
}

// New returns an empty aggregator, or an error for a Config out of range.
func New(cfg Config) (*Aggregator, error) {
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Buckets == 0 {
		cfg.Buckets = DefaultBuckets
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.Window < time.Second:
		return nil, fmt.Errorf("eventstats: Window must be at least 1s, got %v", cfg.Window)
	case cfg.Buckets < 1 || cfg.Buckets > 100_000:
		return nil, fmt.Errorf("eventstats: Buckets must be 1 to 100000, got %d", cfg.Buckets)
	case cfg.MaxKeys < 1:
		return nil, fmt.Errorf("eventstats: MaxKeys must be at least 1, got %d", cfg.MaxKeys)
	}
	a := &Aggregator{cfg: cfg, width: cfg.Window / time.Duration(cfg.Buckets),
		dims: make(map[Dimension]map[string]*ring), requests: make(map[string]string),
		gathers: &ring{slots: make([]bucket, cfg.Buckets)}}
	for _, d := range Dimensions() {
		a.dims[d] = make(map[string]*ring)
	}
	return a, nil
}

// Window returns how far back the aggregate reaches.
func (a *Aggregator) Window() time.Duration { return a.cfg.Window }

// Added returns how many records have been added.
func (a *Aggregator) Added() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.added
}

// Failure is one task that did not finish, as the dashboard lists them;
// Class tells the caller's own doing (rejected) from the service's
// failures (failed).
type Failure struct {
	Time       time.Time    `json:"time"`
	RequestID  string       `json:"request_id"`
	Capability string       `json:"capability"`
	Node       string       `json:"node,omitempty"`
	Status     string       `json:"status"`
	Code       string       `json:"code"`
	Message    string       `json:"message,omitempty"` // the error's message (dispatcher.Event.Error)
	Unknown    bool         `json:"unknown,omitempty"` // NO_AGENT for a name never registered
	Class      events.Class `json:"class"`
	Outcome    string       `json:"outcome"`
	Attempts   int          `json:"attempts"`
	LatencyMS  float64      `json:"latency_ms"`
}

// Add folds one record into the aggregate by the counting model
// (dispatcher.Event.Count): a task's record counts for its capability,
// instance and type; a broadcast's or fan-out's own record counts it and
// its branches in the total (the branches count as tasks of their own); a
// feedback record's score for the instance it names, its type and the
// capability of the scored task (when that task's record was added
// before). Review resolutions and workflow records are left out, as are
// records older than the window.
func (a *Aggregator) Add(ev *events.Event) {
	now := a.cfg.Now()
	at := ev.Start
	if at.IsZero() || at.After(now) {
		at = now
	}
	if now.Sub(at) >= a.cfg.Window {
		return
	}
	epoch := at.UnixNano() / int64(a.width)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case ev.Kind == "feedback" && ev.Score != nil && !math.IsNaN(*ev.Score):
		a.added++
		score := *ev.Score
		a.bucket(ByAgent, ev.Node, epoch).score(score)
		a.bucket(ByType, a.typeOf(ev.Node), epoch).score(score)
		if c, ok := a.requests[ev.RequestID]; ok {
			a.bucket(ByCapability, c, epoch).score(score)
		}
	case ev.Kind == events.KindBroadcast || ev.Kind == events.KindFanOut:
		a.added++
		b := a.gathers.at(epoch)
		b.counts.Add(ev.Count())
	case !ev.IsTask():
	default:
		a.added++
		node := ev.Node
		if node == "" {
			node = NoneKey
		}
		for _, k := range [...]struct {
			d   Dimension
			key string
		}{{ByCapability, ev.Capability}, {ByAgent, node}, {ByType, a.typeOf(ev.Node)}} {
			a.bucket(k.d, k.key, epoch).task(ev)
		}
		a.remember(ev.RequestID, ev.Capability)
		a.addEdges(ev, at)
		if class := ev.Class(); class != events.ClassFinished {
			a.fail(Failure{Time: at, RequestID: ev.RequestID, Capability: ev.Capability, Node: ev.Node, Status: ev.Status,
				Code: ev.Code, Message: ev.Error, Unknown: ev.Unknown, Class: class, Outcome: ev.Outcome, Attempts: ev.Attempts,
				LatencyMS: ev.LatencyMS})
		}
	}
}

func (a *Aggregator) typeOf(node string) string {
	if node == "" {
		return NoneKey
	}
	if a.cfg.TypeOf != nil {
		if t := a.cfg.TypeOf(node); t != "" {
			return t
		}
	}
	return "unknown"
}

// bucket returns key's bucket of epoch in dimension d; the lock is held.
func (a *Aggregator) bucket(d Dimension, key string, epoch int64) *bucket {
	m := a.dims[d]
	r := m[key]
	if r == nil {
		if len(m) >= a.cfg.MaxKeys {
			key = OtherKey
			r = m[key]
		}
		if r == nil {
			r = &ring{slots: make([]bucket, a.cfg.Buckets)}
			m[key] = r
		}
	}
	return r.at(epoch)
}

func (a *Aggregator) remember(requestID, capability string) {
	if _, ok := a.requests[requestID]; ok {
		return
	}
	if len(a.reqOrder) < requestsKept {
		a.reqOrder = append(a.reqOrder, requestID)
	} else {
		delete(a.requests, a.reqOrder[a.reqNext])
		a.reqOrder[a.reqNext] = requestID
		a.reqNext = (a.reqNext + 1) % requestsKept
	}
	a.requests[requestID] = capability
}

func (a *Aggregator) fail(f Failure) {
	if len(a.failures) < recentFailures {
		a.failures = append(a.failures, f)
		return
	}
	a.failures[a.failNext] = f
	a.failNext = (a.failNext + 1) % recentFailures
}

// ring is one key's buckets, slot = epoch modulo their number.
type ring struct{ slots []bucket }

// at returns the bucket of epoch, emptied when it held an older one.
func (r *ring) at(epoch int64) *bucket {
	b := &r.slots[epoch%int64(len(r.slots))]
	if b.epoch != epoch {
		*b = bucket{epoch: epoch}
	}
	return b
}

// bucket is what one key's records of one time slice add up to.
type bucket struct {
	epoch        int64 // start of the slice / width; 0: empty
	counts       events.Counts
	hedged       int64
	cost         float64
	latencySumMS float64
	lat          *histogram
	scoreSum     float64
	scores       int64
	errors       map[string]int64
}

func (b *bucket) task(ev *events.Event) {
	b.counts.Add(ev.Count())
	if ev.Code != "" {
		if b.errors == nil {
			b.errors = make(map[string]int64)
		}
		b.errors[ev.Code]++
	}
	if ev.Hedged {
		b.hedged++
	}
	if !math.IsNaN(ev.Cost) && !math.IsInf(ev.Cost, 0) {
		b.cost += ev.Cost
	}
	if b.lat == nil {
		b.lat = new(histogram)
	}
	b.lat.add(ev.LatencyMS)
	b.latencySumMS += ev.LatencyMS
}

func (b *bucket) score(s float64) {
	b.scoreSum += s
	b.scores++
}

// Row is the aggregate of one key, counted by the counting model
// (dispatcher.Counts): Tasks = Finished + Rejected + Failed.
type Row struct {
	Key          string           `json:"key"`
	Tasks        int64            `json:"tasks"`
	Finished     int64            `json:"finished"`
	Rejected     int64            `json:"rejected"`     // the caller's own doing (dispatcher.ClassOf)
	Failed       int64            `json:"failed"`       // the service's failures
	SuccessRate  float64          `json:"success_rate"` // finished / tasks; 0 without tasks
	LatencyP50MS float64          `json:"latency_p50_ms"`
	LatencyP95MS float64          `json:"latency_p95_ms"`
	LatencyP99MS float64          `json:"latency_p99_ms"`
	LatencyMean  float64          `json:"latency_mean_ms"`
	Retries      int64            `json:"retries"`
	Hedged       int64            `json:"hedged"`
	Cost         float64          `json:"cost"`
	CostPerTask  float64          `json:"cost_per_task"`
	Quality      *float64         `json:"quality,omitempty"` // mean feedback score, when there is one
	Scores       int64            `json:"scores"`
	Errors       map[string]int64 `json:"errors,omitempty"` // tasks that did not finish, by error code
	// Broadcasts and FanOuts count the scatter-gathers answered, Branches
	// the branches they expected (each also a task, in Tasks): on the
	// total only, whatever the dimension.
	Broadcasts int64 `json:"broadcasts,omitempty"`
	FanOuts    int64 `json:"fanouts,omitempty"`
	Branches   int64 `json:"branches,omitempty"`
}

// Summary is the aggregate of a window, one Row per key.
type Summary struct {
	By    Dimension `json:"by"`
	Since string    `json:"since"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	// Rows are sorted by tasks, most first, then by key.
	Rows  []Row `json:"rows"`
	Total Row   `json:"total"`
	// Failures are the latest failed tasks, newest first (whatever the
	// window).
	Failures []Failure `json:"failures"`
}

// Summary returns the aggregate of the last since (the whole window when
// since is 0) grouped by by.
func (a *Aggregator) Summary(by Dimension, since time.Duration) (*Summary, error) {
	if since == 0 {
		since = a.cfg.Window
	}
	if _, ok := a.dims[by]; !ok {
		return nil, fmt.Errorf("%w: unknown dimension %q (want capability, agent or type)", ErrInvalidQuery, by)
	}
	if since < 0 || since > a.cfg.Window {
		return nil, fmt.Errorf("%w: since %v: want up to the window of %v", ErrInvalidQuery, since, a.cfg.Window)
	}
	now := a.cfg.Now()
	first := a.firstEpoch(now, since)
	s := &Summary{By: by, Since: since.String(), From: now.Add(-since), To: now, Rows: []Row{}, Failures: []Failure{}}
	var all acc
	a.mu.Lock()
	for key, r := range a.dims[by] {
		var k acc
		for i := range r.slots {
			if b := &r.slots[i]; b.epoch >= first && b.epoch != 0 {
				k.add(b)
				all.add(b)
			}
		}
		if k.counts.Tasks > 0 || k.scores > 0 {
			s.Rows = append(s.Rows, k.row(key))
		}
	}
	var gathers acc
	for i := range a.gathers.slots {
		if b := &a.gathers.slots[i]; b.epoch >= first && b.epoch != 0 {
			gathers.add(b)
		}
	}
	for i := range a.failures {
		s.Failures = append(s.Failures, a.failures[(a.failNext+len(a.failures)-1-i)%len(a.failures)])
	}
	a.mu.Unlock()
	s.Total = all.row("all")
	s.Total.Broadcasts, s.Total.FanOuts, s.Total.Branches = gathers.counts.Broadcasts, gathers.counts.FanOuts, gathers.counts.Branches
	sort.Slice(s.Rows, func(i, j int) bool {
		if s.Rows[i].Tasks != s.Rows[j].Tasks {
			return s.Rows[i].Tasks > s.Rows[j].Tasks
		}
		return s.Rows[i].Key < s.Rows[j].Key
	})
	return s, nil
}

// firstEpoch is the first bucket inside the last since.
func (a *Aggregator) firstEpoch(now time.Time, since time.Duration) int64 {
	return now.Add(-since).UnixNano()/int64(a.width) + 1
}

// Point is one time slice of a capability's Series; Tasks = Finished +
// Rejected + Failed.
type Point struct {
	Time         time.Time `json:"t"`
	Tasks        int64     `json:"tasks"`
	Rejected     int64     `json:"rejected"`
	Failed       int64     `json:"failed"`
	LatencyP50MS float64   `json:"p50_ms"`
	LatencyP95MS float64   `json:"p95_ms"`
}

// Series returns, for every capability with a task in the last since, one
// Point per time slice of the aggregator (Window / Buckets), oldest first,
// empty slices included.
func (a *Aggregator) Series(since time.Duration) (map[string][]Point, error) {
	if since <= 0 || since > a.cfg.Window {
		return nil, fmt.Errorf("%w: since %v: want more than 0, up to the window of %v", ErrInvalidQuery, since, a.cfg.Window)
	}
	now := a.cfg.Now()
	first, last := a.firstEpoch(now, since), now.UnixNano()/int64(a.width)
	out := make(map[string][]Point)
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, r := range a.dims[ByCapability] {
		pts := make([]Point, 0, last-first+1)
		any := false
		for e := first; e <= last; e++ {
			p := Point{Time: time.Unix(0, e*int64(a.width)).UTC()}
			if b := &r.slots[e%int64(len(r.slots))]; b.epoch == e && b.counts.Tasks > 0 {
				any = true
				p.Tasks, p.Rejected, p.Failed = b.counts.Tasks, b.counts.Rejected, b.counts.Failed
				p.LatencyP50MS, p.LatencyP95MS = b.lat.quantile(0.5), b.lat.quantile(0.95)
			}
			pts = append(pts, p)
		}
		if any {
			out[key] = pts
		}
	}
	return out, nil
}

// acc adds buckets up into a Row.
type acc struct {
	counts                       events.Counts
	hedged, scores               int64
	cost, latencySumMS, scoreSum float64
	lat                          histogram
	errors                       map[string]int64
}

func (k *acc) add(b *bucket) {
	k.counts.Add(b.counts)
	k.hedged += b.hedged
	k.cost += b.cost
	k.latencySumMS += b.latencySumMS
	k.scoreSum += b.scoreSum
	k.scores += b.scores
	if b.lat != nil {
		k.lat.merge(b.lat)
	}
	for c, n := range b.errors {
		if k.errors == nil {
			k.errors = make(map[string]int64)
		}
		k.errors[c] += n
	}
}

func (k *acc) row(key string) Row {
	c := k.counts
	r := Row{Key: key, Tasks: c.Tasks, Finished: c.Finished, Rejected: c.Rejected, Failed: c.Failed, Retries: c.Retries,
		Hedged: k.hedged, Cost: k.cost, Scores: k.scores, Errors: k.errors}
	if c.Tasks > 0 {
		r.SuccessRate = float64(c.Finished) / float64(c.Tasks)
		r.LatencyMean = k.latencySumMS / float64(c.Tasks)
		r.CostPerTask = k.cost / float64(c.Tasks)
		r.LatencyP50MS, r.LatencyP95MS, r.LatencyP99MS = k.lat.quantile(0.5), k.lat.quantile(0.95), k.lat.quantile(0.99)
	}
	if k.scores > 0 {
		q := k.scoreSum / float64(k.scores)
		r.Quality = &q
	}
	return r
}
