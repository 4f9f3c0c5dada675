package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket and stream names (docs/protocol.md, State in NATS).
const (
	BucketAgents      = "REACH_AGENTS"
	BucketCaps        = "REACH_CAPS"
	BucketIdempotency = "REACH_IDEMPOTENCY"
	BucketPolicy      = "REACH_POLICY"
	// BucketBreakers holds circuit-breaker transitions per instance, so
	// dispatcher replicas agree on which breakers are open.
	BucketBreakers = "REACH_BREAKERS"
	// BucketRuns holds durable workflow runs (docs/workflows.md): key = run id,
	// the steps done, their outputs and every decision.
	BucketRuns = "REACH_RUNS"

	StreamTasks   = "REACH_TASKS"
	StreamResults = "REACH_RESULTS"
	StreamDLQ     = "REACH_DLQ"
	StreamReview  = "REACH_REVIEW"
	StreamEvents  = "REACH_EVENTS"
)

// Defaults of Topology.
const (
	DefaultHeartbeat      = 5 * time.Second
	DefaultIdempotencyTTL = 24 * time.Hour
	DefaultResultsMaxAge  = 24 * time.Hour
	DefaultEventsMaxAge   = 7 * 24 * time.Hour
	DefaultEventsMaxBytes = 1 << 30
	// DefaultRunsTTL is how long a workflow run's record is kept after its
	// last change.
	DefaultRunsTTL = 7 * 24 * time.Hour
)

// Topology describes the buckets and streams of one deployment. The zero
// value means all defaults: prefix "reach", one replica, file storage, 5 s
// heartbeats.
type Topology struct {
	// Subjects names the subjects; zero means prefix "reach".
	Subjects Subjects
	// Replicas of every bucket and stream; 0 means 1. Use 3 on a cluster.
	Replicas int
	// Heartbeat is the agents' heartbeat interval; REACH_AGENTS expires a
	// record after 3 × Heartbeat. 0 means DefaultHeartbeat.
	Heartbeat time.Duration
	// Memory keeps everything in memory instead of files (tests only); the
	// events stream is then capped at 64 MiB instead of 1 GiB.
	Memory bool
	// IdempotencyTTL is how long stored results are kept; 0 means 24 h.
	IdempotencyTTL time.Duration
	// PendingPerCapability bounds the durable tasks waiting per capability
	// in REACH_TASKS; beyond it the server refuses submissions (see
	// IsBufferFull). 0 means DefaultPendingPerCapability.
	PendingPerCapability int64
}

// DefaultPendingPerCapability is the durable buffer bound per capability.
const DefaultPendingPerCapability = 10000

// IsBufferFull reports whether a submission error is the server refusing a
// durable task because its capability's buffer is full.
func IsBufferFull(err error) bool {
	return err != nil && strings.Contains(err.Error(), "maximum messages per subject exceeded")
}

func (t Topology) replicas() int {
	if t.Replicas <= 0 {
		return 1
	}
	return t.Replicas
}

func (t Topology) storage() jetstream.StorageType {
	if t.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// HeartbeatInterval returns the configured heartbeat or its default.
func (t Topology) HeartbeatInterval() time.Duration {
	if t.Heartbeat <= 0 {
		return DefaultHeartbeat
	}
	return t.Heartbeat
}

// AgentTTL is the REACH_AGENTS bucket TTL: 3 × heartbeat.
func (t Topology) AgentTTL() time.Duration { return 3 * t.HeartbeatInterval() }

// Validate reports a topology that cannot be provisioned.
func (t Topology) Validate() error {
	if t.Heartbeat != 0 && t.Heartbeat < 100*time.Millisecond {
		return fmt.Errorf("heartbeat %v is below the 100ms minimum", t.Heartbeat)
	}
	if t.Replicas < 0 || t.Replicas > 5 {
		return fmt.Errorf("replicas %d must be between 1 and 5", t.Replicas)
	}
	return nil
}

// KeyValueConfigs returns the configuration of every bucket.
func (t Topology) KeyValueConfigs() []jetstream.KeyValueConfig {
	idemTTL := t.IdempotencyTTL
	if idemTTL <= 0 {
		idemTTL = DefaultIdempotencyTTL
	}
	markerTTL := t.HeartbeatInterval()
	if markerTTL < time.Second {
		markerTTL = time.Second // the server's minimum
	}
	r, st := t.replicas(), t.storage()
	return []jetstream.KeyValueConfig{
		{Bucket: BucketAgents, Description: "Agent-Reach: live agent instances (expire after 3 heartbeats)",
			History: 1, TTL: t.AgentTTL(), LimitMarkerTTL: markerTTL, Storage: st, Replicas: r},
		{Bucket: BucketCaps, Description: "Agent-Reach: capability declarations per agent type",
			History: 5, Storage: st, Replicas: r},
		{Bucket: BucketIdempotency, Description: "Agent-Reach: results stored per idempotency key",
			History: 1, TTL: idemTTL, LimitMarkerTTL: time.Minute, Storage: st, Replicas: r},
		{Bucket: BucketPolicy, Description: "Agent-Reach: routing policy, ACL and limits",
			History: 10, Storage: st, Replicas: r},
		{Bucket: BucketBreakers, Description: "Agent-Reach: circuit-breaker transitions per instance",
			History: 1, TTL: time.Hour, LimitMarkerTTL: time.Minute, Storage: st, Replicas: r},
		{Bucket: BucketRuns, Description: "Agent-Reach: workflow runs (steps, outputs, decisions)",
			History: 1, TTL: DefaultRunsTTL, Storage: st, Replicas: r},
	}
}

// StreamConfigs returns the configuration of every stream.
func (t Topology) StreamConfigs() []jetstream.StreamConfig {
	r, st := t.replicas(), t.storage()
	pending := t.PendingPerCapability
	if pending <= 0 {
		pending = DefaultPendingPerCapability
	}
	eventsMax := int64(DefaultEventsMaxBytes)
	if t.Memory {
		eventsMax = 64 << 20
	}
	return []jetstream.StreamConfig{
		{Name: StreamTasks, Description: "Agent-Reach: durable-tier tasks",
			Subjects: []string{t.Subjects.SubmitWildcard()}, Retention: jetstream.WorkQueuePolicy,
			Duplicates: 2 * time.Minute, Storage: st, Replicas: r,
			// The buffer bound per capability: the server refuses the
			// submission (never a silent drop) once a subject holds this many.
			MaxMsgsPerSubject: pending, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true},
		{Name: StreamResults, Description: "Agent-Reach: durable-tier results",
			Subjects: []string{t.Subjects.ResultWildcard()}, MaxAge: DefaultResultsMaxAge, Storage: st, Replicas: r,
			// A caller reads its results by direct get of one subject,
			// the only read its permissions scope (docs/security.md).
			AllowDirect: true},
		{Name: StreamDLQ, Description: "Agent-Reach: dead letters",
			Subjects: []string{t.Subjects.DeadLetterWildcard()}, Storage: st, Replicas: r},
		{Name: StreamReview, Description: "Agent-Reach: tasks for a person: past their deadline, or in doubt",
			Subjects: []string{t.Subjects.ReviewWildcard()}, Storage: st, Replicas: r},
		{Name: StreamEvents, Description: "Agent-Reach: one feedback record per task",
			Subjects: []string{t.Subjects.EventWildcard()}, MaxAge: DefaultEventsMaxAge, MaxBytes: eventsMax,
			Storage: st, Replicas: r},
	}
}

// Provision creates every bucket and stream of t that does not exist yet. It
// is idempotent and safe to run from several processes at once: a resource
// that exists with a compatible configuration is left alone; one whose
// configuration conflicts (other subjects, retention or TTL) is reported as
// ErrIncompatible, naming the difference, and is not changed.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) error {
	if err := t.Validate(); err != nil {
		return err
	}
	for _, cfg := range t.KeyValueConfigs() {
		if err := provisionBucket(ctx, js, cfg); err != nil {
			return err
		}
	}
	for _, cfg := range t.StreamConfigs() {
		if err := provisionStream(ctx, js, cfg); err != nil {
			return err
		}
	}
	return nil
}

func provisionBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // lost a race, or differs
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return fmt.Errorf("provision bucket %s: %w", cfg.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("provision bucket %s: %w", cfg.Bucket, err)
	}
	switch {
	case st.TTL() != cfg.TTL:
		return fmt.Errorf("%w: bucket %s has TTL %v, want %v (delete it or use the same heartbeat everywhere)",
			ErrIncompatible, cfg.Bucket, st.TTL(), cfg.TTL)
	case cfg.LimitMarkerTTL > 0 && st.LimitMarkerTTL() == 0:
		return fmt.Errorf("%w: bucket %s has no limit markers, which expiry watching needs", ErrIncompatible, cfg.Bucket)
	}
	return nil
}

func provisionStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, cfg.Name)
		}
	}
	if err != nil {
		return fmt.Errorf("provision stream %s: %w", cfg.Name, err)
	}
	have := s.CachedInfo().Config
	if cfg.AllowDirect && !have.AllowDirect { // provisioned by an older version
		have.AllowDirect = true
		if _, err := js.UpdateStream(ctx, have); err != nil {
			return fmt.Errorf("provision stream %s: allow direct get: %w", cfg.Name, err)
		}
	}
	if have.Retention != cfg.Retention {
		return fmt.Errorf("%w: stream %s has retention %v, want %v", ErrIncompatible, cfg.Name, have.Retention, cfg.Retention)
	}
	if !slices.Equal(have.Subjects, cfg.Subjects) {
		return fmt.Errorf("%w: stream %s has subjects %v, want %v", ErrIncompatible, cfg.Name, have.Subjects, cfg.Subjects)
	}
	return nil
}
