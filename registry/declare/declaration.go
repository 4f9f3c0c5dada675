package declare

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agent-reach/agentreach/registry/document"
	"github.com/agent-reach/agentreach/streams"
)

// Capability modes: whether a capability only reads or changes state.
const (
	ModeRead  = "read"
	ModeWrite = "write"
)

// MaxDeclarationSize bounds a declaration as stored or read from a file:
// NATS's default largest message.
const MaxDeclarationSize = 1 << 20

// Declaration is what one agent type declares it can do, stored (JSON)
// under its type in REACH_CAPS. An agent writes it at start; people write it
// in JSON or YAML with `agentreach caps put`. See docs/declarations.md.
type Declaration struct {
	// Type is the agent type, a name like "orders-reader" (dotted lowercase
	// tokens); it is the key in REACH_CAPS and the records' type.
	Type        string `json:"type"`
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
	// Capabilities are what instances of the type serve; at least one.
	Capabilities []DeclaredCapability `json:"capabilities"`
	// Labels are facts a requirement can ask for, each with one or more
	// values: {"engine": ["postgres"], "region": ["eu-west"]}.
	Labels map[string][]string `json:"labels,omitempty"`
	// Limits are the largest amounts the type handles: {"history_days": 30}.
	Limits map[string]float64 `json:"limits,omitempty"`
	// Permissions are what the type may do ("read"); Refuses what it never
	// does ("write", "delete"). No permission is in both.
	Permissions []string `json:"permissions,omitempty"`
	Refuses     []string `json:"refuses,omitempty"`
	// DependsOn names what the type needs to work ("ext.orders-db"); its
	// instances report each one's state in their records' deps.
	DependsOn []string `json:"depends_on,omitempty"`
	// Tags are free-form notes for people; they never affect routing.
	Tags []string `json:"tags,omitempty"`
}

// DeclaredCapability is one capability of a declaration.
type DeclaredCapability struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Mode is ModeRead, ModeWrite or empty (not said).
	Mode       string `json:"mode,omitempty"`
	Idempotent bool   `json:"idempotent,omitempty"`
	// InputSchema is a JSON Schema (draft 2020-12 unless its $schema says
	// otherwise) that JSON and msgpack payloads must satisfy. It must be
	// self-contained: a $ref to another document is an error.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// OutputSchema is a JSON Schema of the results, for callers to read; it
	// must compile but is not enforced.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// TimeoutMS is the longest a call takes, in milliseconds; 0 means not
	// declared.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Cost is what one call costs (in the units of Reach-Cost); nil means
	// not declared, which no max_cost requirement accepts.
	Cost *float64 `json:"cost,omitempty"`
}

// ParseDeclaration reads a declaration from JSON or YAML and validates it.
// Unknown keys, keys given twice and values of the wrong type are errors;
// every error wraps ErrInvalidDeclaration and names the field by its path.
func ParseDeclaration(data []byte) (*Declaration, error) {
	d, err := decodeDeclaration(data)
	if err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return d, nil
}

// decodeDeclaration reads a declaration strictly without validating it.
func decodeDeclaration(data []byte) (*Declaration, error) {
	if len(data) > MaxDeclarationSize {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrInvalidDeclaration, len(data), MaxDeclarationSize)
	}
	var d Declaration
	if _, err := document.Decode(data, &d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidDeclaration, err)
	}
	return &d, nil
}

// CompileStored decodes and compiles the declaration stored in REACH_CAPS
// under key at revision (Revision reports it); it must be of key's type.
func CompileStored(key string, value []byte, revision uint64) (*CompiledDeclaration, error) {
	d, err := decodeDeclaration(value)
	if err != nil {
		return nil, err
	}
	if d.Type != key {
		return nil, fmt.Errorf("%w: type: %q, but the key is %q", ErrInvalidDeclaration, d.Type, key)
	}
	c, err := Compile(d)
	if err != nil {
		return nil, err
	}
	c.revision = revision
	return c, nil
}

// Validate reports everything wrong with d in one error wrapping
// ErrInvalidDeclaration, each problem named by its path
// ("capabilities[1].input_schema: …; labels.engine[0]: …"). It compiles the
// schemas to check them.
func (d *Declaration) Validate() error {
	_, err := Compile(d)
	return err
}

// CompiledDeclaration is a validated declaration with its input schemas
// compiled and its lists indexed for matching. It is immutable and safe
// for concurrent use; a Catalog holds one per agent type and revision.
type CompiledDeclaration struct {
	decl     *Declaration
	revision uint64
	caps     map[string]*compiledCapability
	perms    map[string]bool // true: granted, false: refused
}

type compiledCapability struct {
	spec  *DeclaredCapability
	input *jsonschema.Schema // nil without an input schema
}

// Compile validates d and compiles it. The result keeps d: do not modify d
// afterwards.
func Compile(d *Declaration) (*CompiledDeclaration, error) {
	var p document.Problems
	if err := ValidateName(d.Type); err != nil {
		p.Add("type", "%v", err)
	}
	c := &CompiledDeclaration{decl: d, caps: make(map[string]*compiledCapability, len(d.Capabilities)),
		perms: make(map[string]bool, len(d.Permissions)+len(d.Refuses))}
	if len(d.Capabilities) == 0 {
		p.Add("capabilities", "at least one is required")
	}
	for i := range d.Capabilities {
		spec := &d.Capabilities[i]
		path := document.IndexPath("capabilities", i)
		if cc := compileCapability(spec, path, &p); cc != nil {
			if _, dup := c.caps[spec.Name]; dup {
				p.Add(path+".name", "%q is declared twice", spec.Name)
			}
			c.caps[spec.Name] = cc
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.Labels)) {
		path := document.JoinPath("labels", name)
		if err := ValidateName(name); err != nil {
			p.Add(path, "%v", err)
		}
		if len(d.Labels[name]) == 0 {
			p.Add(path, "at least one value is required")
		}
		for i, v := range d.Labels[name] {
			if v == "" {
				p.Add(document.IndexPath(path, i), "must not be empty")
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.Limits)) {
		path := document.JoinPath("limits", name)
		if err := ValidateName(name); err != nil {
			p.Add(path, "%v", err)
		}
		if v := d.Limits[name]; math.IsNaN(v) || math.IsInf(v, 0) {
			p.Add(path, "must be a finite number")
		}
	}
	names := func(field string, list []string, check func(string) error) {
		seen := make(map[string]bool, len(list))
		for i, v := range list {
			if err := check(v); err != nil {
				p.Add(document.IndexPath(field, i), "%v", err)
			}
			if seen[v] {
				p.Add(document.IndexPath(field, i), "%q is listed twice", v)
			}
			seen[v] = true
		}
	}
	names("permissions", d.Permissions, ValidateName)
	names("refuses", d.Refuses, ValidateName)
	names("depends_on", d.DependsOn, ValidateName)
	names("tags", d.Tags, func(s string) error {
		if strings.TrimSpace(s) == "" {
			return fmt.Errorf("must not be empty")
		}
		return nil
	})
	for _, perm := range d.Permissions {
		c.perms[perm] = true
	}
	for i, perm := range d.Refuses {
		if c.perms[perm] {
			p.Add(document.IndexPath("refuses", i), "%q is also in permissions: a permission is granted or refused, not both", perm)
		}
		c.perms[perm] = false
	}
	if err := p.Err(ErrInvalidDeclaration, ""); err != nil {
		return nil, err
	}
	return c, nil
}

// compileCapability validates one capability and compiles its input schema;
// nil when its name is unusable.
func compileCapability(spec *DeclaredCapability, path string, p *document.Problems) *compiledCapability {
	cc := &compiledCapability{spec: spec}
	if err := streams.ValidateCapability(spec.Name); err != nil {
		p.Add(path+".name", "%v", err)
		cc = nil
	}
	if spec.Mode != "" && spec.Mode != ModeRead && spec.Mode != ModeWrite {
		p.Add(path+".mode", "want %q, %q or nothing, got %q", ModeRead, ModeWrite, spec.Mode)
	}
	if spec.TimeoutMS < 0 {
		p.Add(path+".timeout_ms", "must not be negative, got %d", spec.TimeoutMS)
	}
	if spec.Cost != nil && (*spec.Cost < 0 || math.IsNaN(*spec.Cost) || math.IsInf(*spec.Cost, 0)) {
		p.Add(path+".cost", "must be a finite number, 0 or more, got %v", *spec.Cost)
	}
	if len(spec.InputSchema) > 0 {
		sch, err := compileSchema(spec.InputSchema)
		if err != nil {
			p.Add(path+".input_schema", "%v", err)
		} else if cc != nil {
			cc.input = sch
		}
	}
	if len(spec.OutputSchema) > 0 {
		if _, err := compileSchema(spec.OutputSchema); err != nil {
			p.Add(path+".output_schema", "%v", err)
		}
	}
	return cc
}

// Declaration returns the declaration. Do not modify it.
func (d *CompiledDeclaration) Declaration() *Declaration { return d.decl }

// Revision is the REACH_CAPS revision the declaration was read at; 0 when
// it was compiled by hand.
func (d *CompiledDeclaration) Revision() uint64 { return d.revision }

// Capability returns what the declaration says about capability name.
// Do not modify it.
func (d *CompiledDeclaration) Capability(name string) (*DeclaredCapability, bool) {
	cc, ok := d.caps[name]
	if !ok {
		return nil, false
	}
	return cc.spec, true
}

// ValidateInput checks a payload against capability's input_schema. A
// capability that is not declared or has no input schema accepts anything.
// JSON and msgpack payloads are both checked (msgpack decoded to the same
// values JSON would give; binary and extension values fit no schema type).
// The error wraps ErrInvalidPayload and says what is wrong in the caller's
// terms: `payload: field "sku" is required`, `payload.qty: want integer,
// got string`.
func (d *CompiledDeclaration) ValidateInput(capability, contentType string, body []byte) error {
	cc, ok := d.caps[capability]
	if !ok || cc.input == nil {
		return nil
	}
	return validatePayload(cc.input, contentType, body)
}

// ValidateName checks a name of a label, a limit, a permission, a
// dependency or an agent type: dotted lowercase tokens, like capabilities.
func ValidateName(s string) error {
	if streams.ValidateCapability(s) != nil {
		return fmt.Errorf("%q is not a valid name: want dotted lowercase tokens of [a-z0-9_-] such as \"history_days\", at most %d bytes",
			s, streams.MaxNameLength)
	}
	return nil
}
