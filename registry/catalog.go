package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// Catalog is the watched view of REACH_CAPS: the last good compiled
// declaration of every agent type. A value put by hand that does not decode
// or validate is ignored with one logged error (per key revision) and the
// type's previous good declaration stays in force; a delete removes it.
// Like a Table, it re-creates its watcher after reconnects and reconciles
// with a full listing every reconcile interval.
//
// Lookup and Version read an immutable snapshot without locks. All methods
// are safe for concurrent use; Close is idempotent.
type Catalog struct {
	f    *follower[*declare.CompiledDeclaration]
	snap atomic.Pointer[catalogSnapshot]
}

type catalogSnapshot struct {
	version uint64
	byType  map[string]*declare.CompiledDeclaration
}

// NewCatalog binds to REACH_CAPS, which streams.Provision creates; call
// Start to fill it.
func NewCatalog(ctx context.Context, js jetstream.JetStream, opts ...WatchOption) (*Catalog, error) {
	kv, err := js.KeyValue(ctx, streams.BucketCaps)
	if err != nil {
		return nil, streams.OpenError("registry", streams.BucketCaps, err)
	}
	c := &Catalog{}
	c.snap.Store(&catalogSnapshot{byType: map[string]*declare.CompiledDeclaration{}})
	c.f = newFollower(js, kv, opts, compileEntry, func(values map[string]*declare.CompiledDeclaration, _ uint64) {
		c.snap.Store(&catalogSnapshot{version: c.snap.Load().version + 1, byType: maps.Clone(values)})
	})
	return c, nil
}

// compileEntry compiles a stored declaration (declare.CompileStored).
func compileEntry(kve jetstream.KeyValueEntry) (*declare.CompiledDeclaration, error) {
	return declare.CompileStored(kve.Key(), kve.Value(), kve.Revision())
}

// Start loads the full listing, returning once the catalog holds it (or
// ctx ends), and keeps it current until Close.
func (c *Catalog) Start(ctx context.Context) error { return c.f.start(ctx) }

// Close stops watching and waits for the catalog's goroutine.
func (c *Catalog) Close() { c.f.close() }

// Lookup returns the declaration in force for agentType. It takes no lock
// and does not allocate.
func (c *Catalog) Lookup(agentType string) (*declare.CompiledDeclaration, bool) {
	d, ok := c.snap.Load().byType[agentType]
	return d, ok
}

// Version counts the catalog's changes: it grows whenever a declaration is
// taken or removed, so a cache of matching results can be dropped when it
// moves.
func (c *Catalog) Version() uint64 { return c.snap.Load().version }

// Changed returns a channel closed at the catalog's next change.
func (c *Catalog) Changed() <-chan struct{} { return c.f.changes() }

// DeclarationEntry is one REACH_CAPS key as stored.
type DeclarationEntry struct {
	// Type is the key.
	Type string
	// Raw is the stored value.
	Raw []byte
	// Declaration is Raw decoded; nil when Err is set.
	Declaration *declare.Declaration
	// Err says why Raw is not a valid declaration of Type: dispatchers
	// ignore such a value and keep the last good one.
	Err      error
	Revision uint64
	Updated  time.Time
}

func declarationEntry(kve jetstream.KeyValueEntry) DeclarationEntry {
	e := DeclarationEntry{Type: kve.Key(), Raw: kve.Value(), Revision: kve.Revision(), Updated: kve.Created()}
	if c, err := compileEntry(kve); err != nil {
		e.Err = err
	} else {
		e.Declaration = c.Declaration()
	}
	return e
}

// PutDeclaration validates d and stores it under its type in kv
// (REACH_CAPS), returning the new revision. An invalid declaration is
// refused, with the field named, and nothing is written.
func PutDeclaration(ctx context.Context, kv jetstream.KeyValue, d *declare.Declaration) (uint64, error) {
	if err := d.Validate(); err != nil {
		return 0, err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", declare.ErrInvalidDeclaration, err)
	}
	if len(b) > declare.MaxDeclarationSize {
		return 0, fmt.Errorf("%w: %d bytes as JSON, more than the %d allowed", declare.ErrInvalidDeclaration, len(b), declare.MaxDeclarationSize)
	}
	return kv.Put(ctx, d.Type, b)
}

// GetDeclaration returns what kv holds for agentType, or an error wrapping
// ErrNoDeclaration. A stored value that does not validate is returned with
// Err set, not as an error.
func GetDeclaration(ctx context.Context, kv jetstream.KeyValue, agentType string) (DeclarationEntry, error) {
	if err := declare.ValidateName(agentType); err != nil {
		return DeclarationEntry{}, fmt.Errorf("%w: type: %v", declare.ErrInvalidDeclaration, err)
	}
	kve, err := kv.Get(ctx, agentType)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return DeclarationEntry{}, fmt.Errorf("%w for type %q", ErrNoDeclaration, agentType)
	}
	if err != nil {
		return DeclarationEntry{}, err
	}
	return declarationEntry(kve), nil
}

// ListDeclarations returns every stored declaration, sorted by type,
// invalid ones with Err set.
func ListDeclarations(ctx context.Context, kv jetstream.KeyValue) ([]DeclarationEntry, error) {
	kves, err := listBucket(ctx, kv)
	if err != nil {
		return nil, err
	}
	out := make([]DeclarationEntry, len(kves))
	for i, kve := range kves {
		out[i] = declarationEntry(kve)
	}
	return out, nil
}

// DeleteDeclaration removes agentType's declaration from kv; deleting one
// that does not exist is not an error.
func DeleteDeclaration(ctx context.Context, kv jetstream.KeyValue, agentType string) error {
	if err := declare.ValidateName(agentType); err != nil {
		return fmt.Errorf("%w: type: %v", declare.ErrInvalidDeclaration, err)
	}
	return kv.Delete(ctx, agentType)
}
