package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/registry/taxonomy"
	"github.com/agent-reach/agentreach/streams"
)

// Catalog is the answer of GET /v1/console/catalog: the capabilities by
// first-level type (registry/taxonomy), each with its declared schemas and
// who serves it, the declarations as stored, and the governance's
// warnings.
type Catalog struct {
	// Taxonomy is the taxonomy in REACH_POLICY; nil without one.
	Taxonomy      *taxonomy.Taxonomy `json:"taxonomy"`
	TaxonomyError string             `json:"taxonomy_error,omitempty"`
	Types         []CatalogType      `json:"types"`
	Declarations  []CatalogEntry     `json:"declarations"`
	// Warnings are the first maxWarnings of WarningsTotal.
	Warnings      []taxonomy.Warning `json:"warnings"`
	WarningsTotal int                `json:"warnings_total"`
	// Write says whether the requester may change declarations, and if
	// not why.
	Write   bool   `json:"write"`
	Refusal string `json:"refusal,omitempty"`
}

// CatalogType is one first-level type and its capabilities.
type CatalogType struct {
	Type string `json:"type"`
	// Official: in the taxonomy (every type is without one).
	Official     bool                `json:"official"`
	Description  string              `json:"description,omitempty"`
	Capabilities []CatalogCapability `json:"capabilities"`
}

// CatalogCapability is one capability: its declarations (one per agent
// type declaring it) and the instances serving it now.
type CatalogCapability struct {
	Name     string             `json:"name"`
	Declared []DeclaredBy       `json:"declared"`
	ServedBy []string           `json:"served_by"`
	Warnings []taxonomy.Warning `json:"warnings,omitempty"`
}

// DeclaredBy is a capability as one agent type declares it.
type DeclaredBy struct {
	AgentType string `json:"agent_type"`
	declare.DeclaredCapability
}

// CatalogEntry is one REACH_CAPS key as stored.
type CatalogEntry struct {
	Type        string               `json:"type"`
	Revision    uint64               `json:"revision"`
	Updated     time.Time            `json:"updated"`
	Declaration *declare.Declaration `json:"declaration,omitempty"`
	Error       string               `json:"error,omitempty"`
	Raw         string               `json:"raw,omitempty"`
}

// maxWarnings bounds the warnings a catalog lists (each capability keeps
// its own).
const maxWarnings = 100

// servedBy bounds the instances listed per capability.
const servedBy = 50

func (c *Console) catalog(w http.ResponseWriter, r *http.Request) {
	id, e := c.who(r)
	if e != nil {
		writeError(w, r, e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	decls, err := c.declarations(ctx)
	if err != nil {
		writeError(w, r, streams.NewError(streams.CodeInternal, "list %s: %v", streams.BucketCaps, err))
		return
	}
	out := Catalog{Types: []CatalogType{}, Declarations: []CatalogEntry{}, Warnings: []taxonomy.Warning{}}
	out.Write, out.Refusal = c.mayWrite(id)
	out.Taxonomy, out.TaxonomyError = c.taxonomy(ctx)

	caps := map[string]*CatalogCapability{}
	get := func(name string) *CatalogCapability {
		if cc, ok := caps[name]; ok {
			return cc
		}
		cc := &CatalogCapability{Name: name, Declared: []DeclaredBy{}, ServedBy: []string{}}
		caps[name] = cc
		return cc
	}
	for _, d := range decls {
		entry := CatalogEntry{Type: d.Type, Revision: d.Revision, Updated: d.Updated.UTC(), Declaration: d.Declaration}
		if d.Err != nil {
			entry.Error, entry.Raw = d.Err.Error(), string(d.Raw)
		}
		out.Declarations = append(out.Declarations, entry)
		if d.Declaration == nil {
			continue
		}
		for _, dc := range d.Declaration.Capabilities {
			cc := get(dc.Name)
			cc.Declared = append(cc.Declared, DeclaredBy{AgentType: d.Type, DeclaredCapability: dc})
		}
	}
	if c.cfg.Instances != nil {
		for _, in := range c.cfg.Instances() {
			for _, name := range in.Capabilities {
				if cc := get(name); len(cc.ServedBy) < servedBy {
					cc.ServedBy = append(cc.ServedBy, in.ID)
				}
			}
		}
	}
	names := make([]string, 0, len(caps))
	for name := range caps {
		names = append(names, name)
	}
	sort.Strings(names)
	out.Warnings = taxonomy.Check(out.Taxonomy, names, nil)
	if out.Warnings == nil {
		out.Warnings = []taxonomy.Warning{}
	}
	for _, w := range out.Warnings {
		caps[w.Capability].Warnings = append(caps[w.Capability].Warnings, w)
	}
	out.WarningsTotal = len(out.Warnings)
	if len(out.Warnings) > maxWarnings {
		out.Warnings = out.Warnings[:maxWarnings]
	}
	byType := map[string]*CatalogType{}
	var types []string
	for _, name := range names {
		typ := taxonomy.TypeOf(name)
		ct, ok := byType[typ]
		if !ok {
			ct = &CatalogType{Type: typ, Official: out.Taxonomy.Has(typ), Capabilities: []CatalogCapability{}}
			byType[typ] = ct
			types = append(types, typ)
		}
		slices.Sort(caps[name].ServedBy)
		ct.Capabilities = append(ct.Capabilities, *caps[name])
	}
	if out.Taxonomy != nil {
		for _, ty := range out.Taxonomy.Types {
			if ct, ok := byType[ty.Name]; ok {
				ct.Description = ty.Description
			} else {
				// An official type nothing offers yet: listed empty.
				byType[ty.Name] = &CatalogType{Type: ty.Name, Official: true, Description: ty.Description, Capabilities: []CatalogCapability{}}
				types = append(types, ty.Name)
			}
		}
	}
	sort.Strings(types)
	for _, typ := range types {
		out.Types = append(out.Types, *byType[typ])
	}
	writeJSON(w, http.StatusOK, out)
}

// declarations lists REACH_CAPS.
func (c *Console) declarations(ctx context.Context) ([]registry.DeclarationEntry, error) {
	kv, err := c.cfg.JS.KeyValue(ctx, streams.BucketCaps)
	if err != nil {
		return nil, err
	}
	return registry.ListDeclarations(ctx, kv)
}

// taxonomy returns the taxonomy in force, or why the stored one is not.
func (c *Console) taxonomy(ctx context.Context) (*taxonomy.Taxonomy, string) {
	kv, err := c.cfg.JS.KeyValue(ctx, streams.BucketPolicy)
	var e registry.PolicyEntry
	if err == nil {
		e, err = registry.GetPolicy(ctx, kv, taxonomy.PolicyKey)
	}
	switch {
	case errors.Is(err, registry.ErrNoPolicy):
		return nil, ""
	case err != nil:
		return nil, fmt.Sprintf("not read: %v", err)
	case e.Err != nil:
		return nil, fmt.Sprintf("the stored taxonomy does not validate, so nothing is checked against it: %v", e.Err)
	}
	tx, _ := e.Value.Decoded.(*taxonomy.Taxonomy)
	return tx, ""
}

// catalogNames returns the capability names declared in REACH_CAPS, but
// for agentType's ("" none), and served by an instance now.
func (c *Console) catalogNames(ctx context.Context, agentType string) ([]string, error) {
	seen := map[string]bool{}
	decls, err := c.declarations(ctx)
	for _, d := range decls {
		if d.Declaration == nil || d.Type == agentType {
			continue
		}
		for _, dc := range d.Declaration.Capabilities {
			seen[dc.Name] = true
		}
	}
	if c.cfg.Instances != nil {
		for _, in := range c.cfg.Instances() {
			if in.Type == agentType {
				continue
			}
			for _, name := range in.Capabilities {
				seen[name] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, err
}

func (c *Console) capsPut(w http.ResponseWriter, r *http.Request) {
	agentType := r.PathValue("type")
	id, edit, validateOnly, ok := c.begin(w, r)
	if !ok {
		return
	}
	if err := streams.ValidateCapability(agentType); err != nil {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "type %q: %v", clip(agentType), err))
		return
	}
	d, err := declare.ParseDeclaration([]byte(edit.Value))
	if err != nil {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "%v", err))
		return
	}
	if d.Type != agentType {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "%v: type: %q, but this is the declaration of %q", declare.ErrInvalidDeclaration, d.Type, agentType))
		return
	}
	b, err := json.Marshal(d)
	if err == nil && len(b) > declare.MaxDeclarationSize {
		err = fmt.Errorf("%w: %d bytes as JSON, more than the %d allowed", declare.ErrInvalidDeclaration, len(b), declare.MaxDeclarationSize)
	}
	if err != nil {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "%v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	tx, _ := c.taxonomy(ctx)
	others, _ := c.catalogNames(ctx, agentType)
	names := make([]string, len(d.Capabilities))
	for i, dc := range d.Capabilities {
		names[i] = dc.Name
	}
	out := WriteResult{Valid: true, Key: agentType, Warnings: taxonomy.Check(tx, names, others)}
	if out.Warnings == nil {
		out.Warnings = []taxonomy.Warning{}
	}
	if validateOnly {
		writeJSON(w, http.StatusOK, out)
		return
	}
	kv, err := c.cfg.JS.KeyValue(ctx, streams.BucketCaps)
	var rev uint64
	switch {
	case err != nil:
	case edit.Revision == nil:
		rev, err = kv.Put(ctx, agentType, b)
	case *edit.Revision == 0:
		rev, err = kv.Create(ctx, agentType, b)
	default:
		rev, err = kv.Update(ctx, agentType, b, *edit.Revision)
	}
	if err != nil {
		writeError(w, r, writeFailure(streams.BucketCaps, agentType, edit.Revision, err))
		return
	}
	a := Action{Time: time.Now().UTC(), By: by(id), Stream: StreamCaps, Action: ActionPut, Key: agentType, Revision: rev}
	c.record(a)
	out.Action = &a
	writeJSON(w, http.StatusOK, out)
}
