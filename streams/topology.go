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
	// BucketOutcomes holds one create-only claim per durable task (its
	// REACH_TASKS message) on the outcome it gets, written before the
	// outcome is published: a task never has two (docs/protocol.md).
	BucketOutcomes = "REACH_OUTCOMES"

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
	// DefaultOutcomesTTL is how long a durable task's outcome claim is
	// kept: far longer than a redelivery comes (the ack wait, 30 s), and
	// than a replica stalled or cut off mid-task is expected to stay so.
	// With about 350 bytes a claim, the default 256 MiB holds an hour of
	// 200 durable tasks a second.
	DefaultOutcomesTTL = time.Hour
	// OutcomeMaxValueSize bounds one outcome claim (where, why, who).
	OutcomeMaxValueSize = 4 << 10
)

// Size limits of Topology (docs/security.md, Size limits): every bucket and
// stream is bounded in bytes and in the size of one value or message, so no
// identity can fill the store. A full one refuses the next write with an
// error (DiscardNew) and drops nothing, except REACH_EVENTS, whose oldest
// feedback records make room.
const (
	// DefaultMaxPayload is nats-server's default max_payload; it stands for
	// the server's when a configuration is built without a connection.
	DefaultMaxPayload = 1 << 20
	// DefaultMaxBytes bounds each stream and bucket that holds tasks or
	// their outcomes (REACH_TASKS, REACH_RESULTS, REACH_DLQ, REACH_REVIEW,
	// REACH_IDEMPOTENCY, REACH_RUNS) on file storage.
	DefaultMaxBytes = 256 << 20
	// DefaultMemoryMaxBytes is DefaultMaxBytes with Topology.Memory.
	DefaultMemoryMaxBytes = 16 << 20
	// RecordMaxValueSize bounds one value of REACH_AGENTS and
	// REACH_BREAKERS: an instance's record, a breaker's transition.
	RecordMaxValueSize = 64 << 10
	// DocumentMaxValueSize bounds one value of REACH_CAPS and REACH_POLICY:
	// a declaration or a policy document (declare.MaxDeclarationSize,
	// policy.MaxSize) and room for its headers.
	DocumentMaxValueSize = 1<<20 + 4<<10
	// minSmallMaxBytes is the least a small bucket holds: a few documents
	// with their history.
	minSmallMaxBytes = 8 << 20
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
	// MaxPayload is the largest message, headers and body, a stream or a
	// task-data bucket (REACH_IDEMPOTENCY, REACH_RUNS) accepts: the
	// server's max_payload. 0 means the connection's at Provision, and
	// DefaultMaxPayload in KeyValueConfigs and StreamConfigs.
	MaxPayload int64
	// MaxBytes bounds each stream and bucket holding tasks or their
	// outcomes; the small buckets (REACH_AGENTS, REACH_CAPS, REACH_POLICY,
	// REACH_BREAKERS) hold a 16th of it, at least 8 MiB. 0 means
	// DefaultMaxBytes, or DefaultMemoryMaxBytes with Memory.
	MaxBytes int64
}

// DefaultPendingPerCapability is the durable buffer bound per capability.
const DefaultPendingPerCapability = 10000

// IsBufferFull reports whether a submission error is the server refusing a
// durable task because its capability's buffer is full, or REACH_TASKS as a
// whole is (Topology.MaxBytes).
func IsBufferFull(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "maximum messages per subject exceeded") ||
		strings.Contains(err.Error(), "maximum bytes exceeded") || strings.Contains(err.Error(), "maximum messages exceeded"))
}

// IsTooLarge reports whether a write was refused because the message or
// value exceeds its stream's or bucket's size limit.
func IsTooLarge(err error) bool {
	return err != nil && strings.Contains(err.Error(), "message size exceeds maximum allowed")
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

func (t Topology) maxPayload() int32 {
	if t.MaxPayload <= 0 {
		return DefaultMaxPayload
	}
	return int32(min(t.MaxPayload, 1<<31-1))
}

func (t Topology) maxBytes() int64 {
	switch {
	case t.MaxBytes > 0:
		return t.MaxBytes
	case t.Memory:
		return DefaultMemoryMaxBytes
	}
	return DefaultMaxBytes
}

// smallMaxBytes bounds each small bucket: a 16th of maxBytes, at least
// minSmallMaxBytes.
func (t Topology) smallMaxBytes() int64 { return max(t.maxBytes()/16, minSmallMaxBytes) }

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
	if t.MaxBytes < 0 || t.MaxBytes > 0 && t.MaxBytes < 1<<20 {
		return fmt.Errorf("max bytes %d: want at least 1 MiB", t.MaxBytes)
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
	big, small, payload := t.maxBytes(), t.smallMaxBytes(), t.maxPayload()
	// A bucket is DiscardNew (jetstream's default for buckets): a full one
	// refuses the next write.
	return []jetstream.KeyValueConfig{
		{Bucket: BucketAgents, Description: "Agent-Reach: live agent instances (expire after 3 heartbeats)",
			History: 1, TTL: t.AgentTTL(), LimitMarkerTTL: markerTTL, Storage: st, Replicas: r,
			MaxBytes: small, MaxValueSize: min(RecordMaxValueSize, payload)},
		{Bucket: BucketCaps, Description: "Agent-Reach: capability declarations per agent type",
			History: 5, Storage: st, Replicas: r, MaxBytes: small, MaxValueSize: DocumentMaxValueSize},
		// No limit markers: nothing watches the bucket (agents poll a key),
		// and without them the server lets rollups be refused — a
		// "Nats-Rollup: all" on one key would purge every stored outcome.
		{Bucket: BucketIdempotency, Description: "Agent-Reach: results stored per idempotency key",
			History: 1, TTL: idemTTL, Storage: st, Replicas: r,
			MaxBytes: big, MaxValueSize: payload},
		{Bucket: BucketPolicy, Description: "Agent-Reach: routing policy, ACL and limits",
			History: 10, Storage: st, Replicas: r, MaxBytes: small, MaxValueSize: DocumentMaxValueSize},
		{Bucket: BucketBreakers, Description: "Agent-Reach: circuit-breaker transitions per instance",
			History: 1, TTL: time.Hour, LimitMarkerTTL: time.Minute, Storage: st, Replicas: r,
			MaxBytes: small, MaxValueSize: min(RecordMaxValueSize, payload)},
		{Bucket: BucketRuns, Description: "Agent-Reach: workflow runs (steps, outputs, decisions)",
			History: 1, TTL: DefaultRunsTTL, Storage: st, Replicas: r, MaxBytes: big, MaxValueSize: payload},
		{Bucket: BucketOutcomes, Description: "Agent-Reach: one claim per durable task on its outcome (create-only)",
			History: 1, TTL: DefaultOutcomesTTL, Storage: st, Replicas: r, MaxBytes: big, MaxValueSize: OutcomeMaxValueSize},
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
	big, payload := t.maxBytes(), t.maxPayload()
	// Every stream but REACH_EVENTS is DiscardNew: when it holds big bytes
	// the server refuses the next message, and the dispatcher leaves the
	// task in REACH_TASKS (redelivered later) rather than lose an outcome.
	return []jetstream.StreamConfig{
		{Name: StreamTasks, Description: "Agent-Reach: durable-tier tasks",
			Subjects: []string{t.Subjects.SubmitWildcard()}, Retention: jetstream.WorkQueuePolicy,
			Duplicates: 2 * time.Minute, Storage: st, Replicas: r,
			// The buffer bound per capability: the server refuses the
			// submission (never a silent drop) once a subject holds this many.
			MaxMsgsPerSubject: pending, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
			MaxBytes: big, MaxMsgSize: payload},
		{Name: StreamResults, Description: "Agent-Reach: durable-tier results",
			Subjects: []string{t.Subjects.ResultWildcard()}, MaxAge: DefaultResultsMaxAge, Storage: st, Replicas: r,
			MaxBytes: big, MaxMsgSize: payload, Discard: jetstream.DiscardNew,
			// A caller reads its results by direct get of one subject,
			// the only read its permissions scope (docs/security.md).
			AllowDirect: true},
		{Name: StreamDLQ, Description: "Agent-Reach: dead letters",
			Subjects: []string{t.Subjects.DeadLetterWildcard()}, Storage: st, Replicas: r,
			MaxBytes: big, MaxMsgSize: payload, Discard: jetstream.DiscardNew},
		{Name: StreamReview, Description: "Agent-Reach: tasks for a person: past their deadline, or in doubt",
			Subjects: []string{t.Subjects.ReviewWildcard()}, Storage: st, Replicas: r,
			MaxBytes: big, MaxMsgSize: payload, Discard: jetstream.DiscardNew},
		{Name: StreamEvents, Description: "Agent-Reach: one feedback record per task",
			Subjects: []string{t.Subjects.EventWildcard()}, MaxAge: DefaultEventsMaxAge, MaxBytes: eventsMax,
			MaxMsgSize: payload, Storage: st, Replicas: r},
	}
}

// Provision creates every bucket and stream of t that does not exist yet. It
// is idempotent and safe to run from several processes at once: a resource
// that exists with a compatible configuration is left alone, except that one
// made without size limits (before they existed) gets t's; one whose
// configuration conflicts (other subjects, retention or TTL) is reported as
// ErrIncompatible, naming the difference, and is not changed. Limits an
// existing resource has are kept, so processes with other limits do not
// undo each other. A zero t.MaxPayload is js's connection's max_payload.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.MaxPayload <= 0 {
		if nc := js.Conn(); nc != nil {
			t.MaxPayload = nc.MaxPayload()
		}
	}
	for _, cfg := range t.KeyValueConfigs() {
		if err := provisionBucket(ctx, js, cfg); err != nil {
			return reservationHint(err)
		}
	}
	for _, cfg := range t.StreamConfigs() {
		if err := provisionStream(ctx, js, cfg); err != nil {
			return reservationHint(err)
		}
	}
	return nil
}

// reservationHint explains the server's refusal to reserve a byte limit.
func reservationHint(err error) error {
	if !strings.Contains(err.Error(), "insufficient") {
		return err
	}
	return fmt.Errorf("%w (JetStream reserves every bucket's and stream's byte limit: give the server more "+
		"max_file_store or max_memory_store, or lower Topology.MaxBytes)", err)
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
	s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err == nil && cfg.LimitMarkerTTL == 0 && s.CachedInfo().Config.SubjectDeleteMarkerTTL > 0 {
		// Made with limit markers it no longer needs (REACH_IDEMPOTENCY
		// was): off, so that its rollups can be refused below.
		c := s.CachedInfo().Config
		c.SubjectDeleteMarkerTTL = 0
		if _, err = js.UpdateStream(ctx, c); err == nil {
			s, err = js.Stream(ctx, "KV_"+cfg.Bucket)
		}
	}
	if err == nil {
		err = addLimits(ctx, js, s, jetstream.StreamConfig{MaxBytes: cfg.MaxBytes, MaxMsgSize: cfg.MaxValueSize, Discard: jetstream.DiscardNew,
			AllowRollup: false})
	}
	if err != nil {
		return fmt.Errorf("provision bucket %s: %w", cfg.Bucket, err)
	}
	return nil
}

// addLimits gives the stream s the size limits of want it has none of (it
// was made before they existed), and want's discard policy with a byte
// limit. Limits s has are left as they are. Rollups it turns off unless
// want allows them: jetstream makes every bucket with rollups on, and a
// "Nats-Rollup: all" header on a write to the one key an identity may
// write would purge every other key of the bucket (every agent's record,
// every type's declaration). Nothing of Agent-Reach purges a key. The
// server keeps rollups on where a bucket has limit markers (REACH_AGENTS,
// REACH_BREAKERS): there the hole stays open (docs/security.md).
func addLimits(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, want jetstream.StreamConfig) error {
	cfg := s.CachedInfo().Config
	changed := false
	if cfg.AllowRollup && !want.AllowRollup && cfg.SubjectDeleteMarkerTTL == 0 {
		cfg.AllowRollup, changed = false, true
	}
	if cfg.MaxBytes <= 0 && want.MaxBytes > 0 {
		cfg.MaxBytes, cfg.Discard, changed = want.MaxBytes, want.Discard, true
	}
	if cfg.MaxMsgSize <= 0 && want.MaxMsgSize > 0 {
		cfg.MaxMsgSize, changed = want.MaxMsgSize, true
	}
	if !changed {
		return nil
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("set max bytes %d, max message size %d, rollups %v: %w", cfg.MaxBytes, cfg.MaxMsgSize, cfg.AllowRollup, err)
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
	if err := addLimits(ctx, js, s, cfg); err != nil {
		return fmt.Errorf("provision stream %s: %w", cfg.Name, err)
	}
	return nil
}
