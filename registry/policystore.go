package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/nats-io/nats.go/jetstream"
)

// PolicyEntry is one REACH_POLICY key as stored.
type PolicyEntry struct {
	Key string
	// Raw is the stored value.
	Raw []byte
	// Value is Raw decoded; zero when Err is set.
	Value policy.Value
	// Err says why Raw does not validate: dispatchers ignore such a value
	// and keep the last good one.
	Err      error
	Revision uint64
	Updated  time.Time
}

func policyEntry(kve jetstream.KeyValueEntry) PolicyEntry {
	e := PolicyEntry{Key: kve.Key(), Raw: kve.Value(), Revision: kve.Revision(), Updated: kve.Created()}
	e.Value, e.Err = policy.Parse(e.Key, e.Raw)
	return e
}

// GetPolicy returns the value stored under key, or an error wrapping
// ErrNoPolicy. A stored value that does not validate is returned with Err
// set, not as an error.
func GetPolicy(ctx context.Context, kv jetstream.KeyValue, key string) (PolicyEntry, error) {
	kve, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return PolicyEntry{}, fmt.Errorf("%w under key %q", ErrNoPolicy, key)
	}
	if err != nil {
		return PolicyEntry{}, err
	}
	return policyEntry(kve), nil
}

// ListPolicy returns every stored key, sorted, invalid values with Err set.
func ListPolicy(ctx context.Context, kv jetstream.KeyValue) ([]PolicyEntry, error) {
	kves, err := listBucket(ctx, kv)
	if err != nil {
		return nil, err
	}
	out := make([]PolicyEntry, len(kves))
	for i, kve := range kves {
		out[i] = policyEntry(kve)
	}
	return out, nil
}

// PutPolicy validates data (JSON or YAML) as the value of key and stores
// its JSON form, returning the new revision. It refuses a key
// policy.ValidateKey refuses and an invalid value, writing nothing.
func PutPolicy(ctx context.Context, kv jetstream.KeyValue, key string, data []byte) (uint64, error) {
	value, err := checkedPolicy(key, data)
	if err != nil {
		return 0, err
	}
	return kv.Put(ctx, key, value)
}

// UpdatePolicy is PutPolicy that writes only if key is still at revision,
// or, with revision 0, does not exist: for changing a value read before
// without losing someone else's change made in between.
func UpdatePolicy(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, revision uint64) (uint64, error) {
	value, err := checkedPolicy(key, data)
	if err != nil {
		return 0, err
	}
	if revision == 0 {
		return kv.Create(ctx, key, value)
	}
	return kv.Update(ctx, key, value, revision)
}

// checkedPolicy returns the JSON to store for key, or why not.
func checkedPolicy(key string, data []byte) ([]byte, error) {
	if err := policy.ValidateKey(key); err != nil {
		return nil, err
	}
	v, err := policy.Parse(key, data)
	if err != nil {
		return nil, err
	}
	return v.JSON, nil
}
