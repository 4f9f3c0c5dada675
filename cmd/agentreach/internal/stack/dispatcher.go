package stack

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

const dispatcherAbout = `
Runs a dispatcher against an existing NATS server or cluster. It provisions the
buckets and streams (idempotently, unless --provision=false), joins the
dispatchers' queue group on <prefix>.task.> and routes every task to a capable
agent instance. Run as many replicas as you like.

It reconnects forever. On SIGTERM or Ctrl-C it leaves the queue group, lets the
tasks it holds finish (up to 25 s) and exits.`

// dispatcherFlags tune a dispatcher; `up` and `dispatcher` share them.
type dispatcherFlags struct {
	name          string
	queueGroup    string
	strategy      string
	ackTimeout    time.Duration
	MaxInFlight   int
	fairShareAt   int
	capStrategies cli.PairList
	retries       int
	writeRetries  int
	writes        string
	capRetries    cli.PairList
	deadline      time.Duration
	queueWait     time.Duration
	relayResults  bool
	handlers      int
	dlqInterval   int
	HTTP          httpFlags
}

func (f *dispatcherFlags) Register(fs *flag.FlagSet) {
	names := strings.Join(selection.StrategyNames(), ", ")
	f.strategy = config.DefaultStrategy
	f.capStrategies.Check = func(capability, strategy string) error {
		if err := streams.ValidateCapability(capability); err != nil {
			return err
		}
		return checkStrategy(strategy)
	}
	fs.StringVar(&f.name, "name", "", "this replica's `name` in logs and stats; none means dispatcher-<random>")
	fs.StringVar(&f.queueGroup, "queue-group", config.DefaultQueueGroup, "queue `group` shared by all dispatcher replicas")
	fs.Var(cli.CheckedString{V: &f.strategy, Check: checkStrategy}, "strategy", "default selection `strategy`: "+names)
	fs.Var(&f.capStrategies, "capability-strategy",
		"per-capability strategy as `cap=strategy`, e.g. echo=round_robin (repeatable)")
	fs.DurationVar(&f.ackTimeout, "ack-timeout", config.DefaultAckTimeout,
		"how long an instance has to answer ACKED before the task goes elsewhere")
	fs.IntVar(&f.MaxInFlight, "max-in-flight", config.DefaultMaxInFlight,
		"tasks this replica handles at once; beyond it callers get OVERLOADED")
	fs.IntVar(&f.fairShareAt, "fair-share-at", 0,
		"tasks in flight above which the rest is shared fairly between callers (Reach-Source): one holding its share gets\n"+
			"OVERLOADED first (0: 80% of --max-in-flight; --max-in-flight turns fair share off)")
	fs.DurationVar(&f.queueWait, "queue-wait", config.DefaultQueueWait,
		"how long a task waits, in arrival order, for a free slot when every instance is busy; then TARGET_BUSY (negative: no waiting)")
	fs.IntVar(&f.handlers, "handlers", runtime.GOMAXPROCS(0),
		"goroutines taking tasks, and as many taking agents' replies, each on a subscription of its own")
	fs.BoolVar(&f.relayResults, "relay-results", false,
		"send every result through the dispatcher; by default agents that may publish to callers' inboxes answer them directly")
	fs.IntVar(&f.retries, "retries", config.DefaultRetries,
		"deliveries after the first on TIMEOUT, TARGET_BUSY, no ACK or transport failure (-1: none)")
	fs.IntVar(&f.writeRetries, "write-retries", config.DefaultWriteRetries, "--retries for the capabilities in --writes (-1: none)")
	fs.StringVar(&f.writes, "writes", "", "comma-separated `capabilities` that change state: each task gets an idempotency key")
	f.capRetries.Check = func(capability, n string) error {
		if err := streams.ValidateCapability(capability); err != nil {
			return err
		}
		if v, err := strconv.Atoi(n); err != nil || v < config.NoRetries {
			return fmt.Errorf("retries %q must be a whole number, -1 or more", n)
		}
		return nil
	}
	fs.Var(&f.capRetries, "capability-retries", "per-capability retries as `cap=n` (repeatable)")
	fs.DurationVar(&f.deadline, "deadline", config.DefaultDeadline, "overall deadline of a task whose caller sets no Reach-Deadline")
	fs.IntVar(&f.dlqInterval, "dead-letter-retry-interval", int(durable.DefaultDeadLetterRetryInterval/time.Second),
		"`seconds` between replays of the dead letters whose capability has a healthy instance (-1: never)")
}

func checkStrategy(s string) error {
	if !slices.Contains(selection.StrategyNames(), s) {
		return fmt.Errorf("unknown strategy %q (want one of %s)", s, strings.Join(selection.StrategyNames(), ", "))
	}
	return nil
}

// config returns the dispatcher configuration of the flags.
func (f *dispatcherFlags) config(subjects streams.Subjects) config.Config {
	cfg := config.Config{
		Subjects:                subjects,
		QueueGroup:              f.queueGroup,
		Name:                    f.name,
		AckTimeout:              f.ackTimeout,
		MaxInFlight:             f.MaxInFlight,
		FairShareAt:             f.fairShareAt,
		QueueWait:               f.queueWait,
		RelayResults:            f.relayResults,
		Handlers:                f.handlers,
		DefaultStrategy:         f.strategy,
		Retries:                 f.retries,
		WriteRetries:            f.writeRetries,
		Writes:                  cli.SplitList(f.writes),
		Deadline:                f.deadline,
		DeadLetterRetryInterval: time.Duration(f.dlqInterval) * time.Second,
	}
	if f.dlqInterval < 0 {
		cfg.DeadLetterRetryInterval = -1
	}
	if f.retries == 0 {
		cfg.Retries = config.NoRetries // an explicit 0 means none, not the default
	}
	if f.writeRetries == 0 {
		cfg.WriteRetries = config.NoRetries
	}
	for _, p := range f.capRetries.Pairs {
		if cfg.CapabilityRetries == nil {
			cfg.CapabilityRetries = make(map[string]int)
		}
		cfg.CapabilityRetries[p.Key], _ = strconv.Atoi(p.Value)
	}
	if len(f.capStrategies.Pairs) > 0 {
		cfg.Strategies = make(map[string]string, len(f.capStrategies.Pairs))
		for _, p := range f.capStrategies.Pairs {
			cfg.Strategies[p.Key] = p.Value
		}
	}
	return cfg
}

// provision creates the buckets and streams of topo that do not exist yet.
func provision(ctx context.Context, nc *nats.Conn, topo streams.Topology) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := streams.Provision(ctx, js, topo); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	return nil
}

func RunDispatcher(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn      cli.ConnFlags
		df        dispatcherFlags
		replicas  int
		heartbeat time.Duration
		storeMB   int64
		doProv    bool
		verifier  string
	)
	cl := cli.NewCmdline("dispatcher", "agentreach dispatcher [flags]", dispatcherAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		df.Register(fs)
		fs.IntVar(&replicas, "replicas", 1, "replicas of every bucket and stream when provisioning (3 on a cluster)")
		fs.BoolVar(&doProv, "provision", true, "create missing buckets and streams at start (idempotent)")
		cli.RegisterHeartbeat(fs, &heartbeat)
		cli.RegisterStoreMB(fs, &storeMB)
		fs.StringVar(&verifier, "verifier", "", "the verifier key `file` of the identity store (keys/verifier.nk, see agentreach auth):\n"+
			"turns access control on: every task must prove its Reach-Source and be granted by the acl")
		df.HTTP.Register(fs, httpOff)
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting, provisioning and joining the queue group")
	})
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	if storeMB < 1 || storeMB > 1<<30 {
		return cl.UsageError(stderr, "--store-mb %d: want 1 MiB or more", storeMB)
	}
	topo := streams.Topology{Subjects: conn.Subjects(), Replicas: replicas, Heartbeat: heartbeat, MaxBytes: storeMB << 20}
	if err := topo.Validate(); err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	if err := df.HTTP.check(false); err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	log := conn.Logger(stderr)
	conn.Log = log
	if err := serveDispatcher(ctx, &conn, &df, topo, doProv, verifier, log); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return cli.ExitFail
	}
	return cli.ExitOK
}

// serveDispatcher runs a dispatcher until ctx ends, then drains it; with a
// verifier file, with access control on.
func serveDispatcher(ctx context.Context, conn *cli.ConnFlags, df *dispatcherFlags, topo streams.Topology, doProv bool, verifier string, log zerolog.Logger) (err error) {
	var st cli.Stopper
	defer func() {
		if serr := st.Stop(cli.StopTimeout); err == nil {
			err = serr
		}
	}()
	if err := startTracing(ctx, &st); err != nil { // off unless OTEL_* asks; stopped last, after the last span
		return err
	}
	nc, err := conn.Connect("agentreach-dispatcher")
	if err != nil {
		return err
	}
	st.Add("connection", cli.CloseConn(nc))
	sctx, cancel := context.WithTimeout(ctx, conn.Timeout)
	defer cancel()
	if doProv {
		if err := provision(sctx, nc, topo); err != nil {
			return err
		}
	}
	var az *auth.Authorizer
	if verifier != "" {
		if az, err = startAuthorizer(sctx, nc, verifier, log); err != nil {
			return err
		}
		st.Add("authorizer", func(context.Context) error { az.Close(); return nil })
	}
	d, err := df.start(sctx, nc, topo.Subjects, log, az)
	if err != nil {
		return err
	}
	st.Add("dispatcher", d.Drain)
	log.Info().Str("server", nc.ConnectedUrlRedacted()).Str("name", d.Name()).Str("http", d.URL()).Msg("dispatcher running")
	<-ctx.Done()
	log.Info().Msg("stopping: draining the dispatcher")
	return nil
}
