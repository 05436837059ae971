package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Provider answers which schema validates the data of a URN. Schema returns nil for a
// URN without one: its messages are not validated. Implementations must be safe for
// concurrent use.
type Provider interface {
	Schema(urn string) *Schema
}

// Registry is a fixed set of compiled schemas keyed by URN, the [Provider] this package
// ships. It is safe for concurrent use.
type Registry struct {
	byURN   map[string]*Schema
	entries map[string]Entry
}

// Entry is one line of a babelqueue-registry manifest.
type Entry struct {
	// URN is the message URN.
	URN string `json:"urn"`
	// Schema is the schema file, relative to the manifest's directory.
	Schema string `json:"schema"`
	// Owner is the owning team, as the registry records it.
	Owner string `json:"owner,omitempty"`
	// Status is the registry's status for the URN ("active", ...). It does not change
	// validation.
	Status string `json:"status,omitempty"`
}

// ErrRegistry matches every error [LoadRegistry] and [NewRegistry] return.
var ErrRegistry = errors.New("schema: bad registry")

// NewRegistry builds a [Registry] from schemas given in code. Two schemas for one URN
// are an error.
func NewRegistry(schemas ...*Schema) (*Registry, error) {
	r := &Registry{byURN: make(map[string]*Schema, len(schemas))}
	for _, s := range schemas {
		if s == nil {
			return nil, fmt.Errorf("%w: a nil *Schema", ErrRegistry)
		}
		if _, dup := r.byURN[s.urn]; dup {
			return nil, fmt.Errorf("%w: two schemas for %s", ErrRegistry, s.urn)
		}
		r.byURN[s.urn] = s
	}
	return r, nil
}

// ManifestName is the file name of a babelqueue-registry manifest.
const ManifestName = "registry.json"

// LoadRegistry reads a babelqueue-registry: dir/registry.json (dir may also name the
// manifest file itself), whose "schemas" list maps each URN to a schema file relative
// to the manifest:
//
//	{"schemas": [{"urn": "urn:babel:orders:created", "schema": "schemas/orders-created.json",
//	              "owner": "orders", "status": "active"}]}
//
// Every schema file, and every file they "$ref", is read and compiled here, once: a
// missing or malformed manifest, an entry without urn or schema, a URN listed twice, a
// file that cannot be read, is not JSON or is not a valid schema, is an error now (it
// matches [ErrRegistry] and names the file), never at the first message.
func LoadRegistry(dir string, opts ...Option) (*Registry, error) {
	manifest := dir
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		manifest = filepath.Join(dir, ManifestName)
	}
	raw, err := os.ReadFile(manifest)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRegistry, err)
	}
	var m struct {
		Schemas *[]Entry `json:"schemas"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRegistry, manifest, err)
	}
	if m.Schemas == nil {
		return nil, fmt.Errorf("%w: %s has no \"schemas\" list", ErrRegistry, manifest)
	}
	c, cfg, err := newCompiler(opts)
	if err != nil {
		return nil, err
	}
	base, err := filepath.Abs(filepath.Dir(manifest))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRegistry, err)
	}
	r := &Registry{byURN: map[string]*Schema{}, entries: map[string]Entry{}}
	for i, e := range *m.Schemas {
		if strings.TrimSpace(e.URN) == "" || e.Schema == "" {
			return nil, fmt.Errorf("%w: %s: schemas[%d] needs both \"urn\" and \"schema\"", ErrRegistry, manifest, i)
		}
		if _, dup := r.byURN[e.URN]; dup {
			return nil, fmt.Errorf("%w: %s: %s is listed twice", ErrRegistry, manifest, e.URN)
		}
		path := filepath.FromSlash(e.Schema)
		if !filepath.IsAbs(path) {
			path = filepath.Join(base, path)
		}
		s, err := compileFile(c, e.URN, path, cfg.assertFormat)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s (%s): %w", ErrRegistry, manifest, e.URN, e.Schema, err)
		}
		r.byURN[e.URN] = s
		r.entries[e.URN] = e
	}
	return r, nil
}

func compileFile(c *jsonschema.Compiler, urn, path string, assertFormat bool) (*Schema, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	loc := (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
	// Two URNs may share a file: the compiler keeps the first copy and compiles it once.
	if err := c.AddResource(loc, doc); err != nil && !isDuplicate(err) {
		return nil, err
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, err
	}
	return newSchema(urn, doc, compiled, assertFormat), nil
}

func isDuplicate(err error) bool {
	var d *jsonschema.ResourceExistsError
	return errors.As(err, &d)
}

// Schema returns the schema of urn, or nil when the registry has none.
func (r *Registry) Schema(urn string) *Schema {
	if r == nil {
		return nil
	}
	return r.byURN[urn]
}

// URNs returns the URNs that have a schema, sorted.
func (r *Registry) URNs() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.byURN))
	for u := range r.byURN {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// Entry returns the manifest line of urn when the registry was read by
// [LoadRegistry].
func (r *Registry) Entry(urn string) (Entry, bool) {
	if r == nil {
		return Entry{}, false
	}
	e, ok := r.entries[urn]
	return e, ok
}
