package agentkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// readDeclaration returns cfg's declaration, read and validated, or nil
// when it has none; New calls it, so a bad one stops the agent at once.
func readDeclaration(cfg Config) (*declare.Declaration, error) {
	d := cfg.Declaration
	switch {
	case d != nil && cfg.DeclarationFile != "":
		return nil, errors.New("agentkit: give Config.Declaration or Config.DeclarationFile, not both")
	case cfg.DeclarationFile != "":
		b, err := os.ReadFile(cfg.DeclarationFile)
		if err != nil {
			return nil, fmt.Errorf("agentkit: declaration: %w", err)
		}
		if d, err = declare.ParseDeclaration(b); err != nil {
			return nil, fmt.Errorf("agentkit: declaration %s: %w", cfg.DeclarationFile, err)
		}
	case d == nil:
		return nil, nil
	default:
		c := *d
		d = &c
	}
	if d.Type == "" {
		d.Type = cfg.Type
	}
	if d.Type != cfg.Type {
		return nil, fmt.Errorf("agentkit: declaration: %w: type: %q, but the agent's type is %q", declare.ErrInvalidDeclaration, d.Type, cfg.Type)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("agentkit: declaration: %w", err)
	}
	return d, nil
}

// declare writes declaration d of handlers to REACH_CAPS, unless the bucket
// holds it already (every instance of a type writes the same one; an
// unchanged value is left alone, so dispatchers' caches stay warm).
func (a *Agent) declare(ctx context.Context, js jetstream.JetStream, d *declare.Declaration, handlers map[string]Handler) error {
	if d == nil {
		return nil
	}
	for i, c := range d.Capabilities {
		if _, ok := handlers[c.Name]; !ok {
			return fmt.Errorf("agentkit: declaration: %w: capabilities[%d].name: %q has no handler (have %v)",
				declare.ErrInvalidDeclaration, i, c.Name, slices.Sorted(maps.Keys(handlers)))
		}
	}
	kv, err := js.KeyValue(ctx, streams.BucketCaps)
	if err != nil {
		return streams.OpenError("agentkit", streams.BucketCaps, err)
	}
	want, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if have, err := kv.Get(ctx, d.Type); err == nil && bytes.Equal(have.Value(), want) {
		return nil
	}
	if _, err := registry.PutDeclaration(ctx, kv, d); err != nil {
		return fmt.Errorf("agentkit: write declaration of %s: %w", d.Type, err)
	}
	a.log.Info().Str("type", d.Type).Int("capabilities", len(d.Capabilities)).Msg("declaration written")
	return nil
}
