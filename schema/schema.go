// Package schema validates the data block of BabelQueue messages against a JSON Schema
// per URN, as every SDK of the family does (SPEC.md §8.3), with a complete validator.
//
// A [Schema] is one compiled JSON Schema for the data of one URN. A [Provider] answers
// which schema, if any, a URN has: a [Registry] built from schemas given in code
// ([Compile], [NewRegistry]) or read from a babelqueue-registry directory
// ([LoadRegistry]). A URN without a schema is never validated.
//
// Two middlewares put the check on both sides of the broker:
//
//	app.UsePublish(schema.PublishCheck(reg)) // Publish returns a *ValidationError, nothing is sent
//	app.Use(schema.Middleware(reg))          // invalid data is dead-lettered on its first delivery
//
// Invalid data does not become valid by retrying, so the consumer side answers
// [babelqueue.NoRetry]: the delivery goes to the dead-letter queue at once with reason
// "failed" and the violation as dead_letter.error (or is dropped and logged with
// dead-lettering off).
//
// # Validator
//
// Validation is github.com/santhosh-tekuri/jsonschema/v6, which passes the official
// JSON-Schema-Test-Suite for draft-04, -06, -07, 2019-09 and 2020-12: every keyword,
// $ref within and across files, format (asserted in draft-07; in 2019-09 and 2020-12
// only with [WithFormatAssertion], as those drafts say) and pattern (Go's RE2 syntax; a
// pattern RE2 cannot compile, such as a lookahead, fails at load time). A schema without
// "$schema" is read as draft-07, the family's dialect, unless [WithDefaultDraft] says
// otherwise. The family's other SDKs implement a subset (type, required, properties,
// additionalProperties, items, enum, const, minLength, minimum) and ignore every other
// keyword; data they let through may be rejected here.
//
// # Sensitive fields
//
// The same schemas carry the family's x-gdpr-sensitive marks (SPEC.md §8.6):
// [Schema.SensitivePaths] lists them for package fieldcrypt, which encrypts those fields
// on publish and decrypts them before the handler. Run the schema check on cleartext:
// before protection on the producer, after unprotection on the consumer. A violation at
// or under a sensitive path never shows the value in its message.
package schema

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Draft is a JSON Schema dialect, for schemas that do not name one with "$schema".
type Draft int

const (
	// Draft7 is JSON Schema draft-07, the family's dialect and the default.
	Draft7 Draft = iota
	// Draft2019 is JSON Schema 2019-09.
	Draft2019
	// Draft2020 is JSON Schema 2020-12.
	Draft2020
)

// String names the draft as its specification does.
func (d Draft) String() string {
	switch d {
	case Draft7:
		return "draft-07"
	case Draft2019:
		return "2019-09"
	case Draft2020:
		return "2020-12"
	default:
		return fmt.Sprintf("Draft(%d)", int(d))
	}
}

func (d Draft) lib() (*jsonschema.Draft, error) {
	switch d {
	case Draft7:
		return jsonschema.Draft7, nil
	case Draft2019:
		return jsonschema.Draft2019, nil
	case Draft2020:
		return jsonschema.Draft2020, nil
	default:
		return nil, fmt.Errorf("schema: unknown %v", d)
	}
}

// Option tunes how schemas are compiled.
type Option func(*config)

type config struct {
	draft        Draft
	assertFormat bool
}

// WithDefaultDraft reads schemas without "$schema" as draft d. The default is
// [Draft7], the family's dialect. A schema's own "$schema" always wins.
func WithDefaultDraft(d Draft) Option { return func(c *config) { c.draft = d } }

// WithFormatAssertion makes "format" a validation rule in 2019-09 and 2020-12 schemas
// too, where the specification makes it an annotation by default. Draft-07 schemas
// always assert it (email, date-time, uuid, ipv4, uri, ...; an unknown format passes).
func WithFormatAssertion() Option { return func(c *config) { c.assertFormat = true } }

func newCompiler(opts []Option) (*jsonschema.Compiler, config, error) {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	d, err := cfg.draft.lib()
	if err != nil {
		return nil, cfg, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(d)
	if cfg.assertFormat {
		c.AssertFormat()
	}
	return c, cfg, nil
}

// Schema is the compiled JSON Schema of one URN's data. It is safe for concurrent use.
type Schema struct {
	urn            string
	doc            any // the schema document, as JSON decodes it (numbers as json.Number)
	compiled       *jsonschema.Schema
	formatAsserted bool
	marks          []SensitivePath
	marksErr       error
	markIssues     []Divergence // marks the Python SDK does not read as Go does
}

// Compile compiles schemaJSON, a JSON Schema document, as the schema of urn's data. A
// "$ref" can point inside the document or to an absolute file: URL, never over the
// network; use [LoadRegistry] for schemas that refer to each other's files by relative
// path.
func Compile(urn string, schemaJSON []byte, opts ...Option) (*Schema, error) {
	if strings.TrimSpace(urn) == "" {
		return nil, errors.New("schema: Compile with an empty URN")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, fmt.Errorf("schema: %s: the schema is not JSON: %w", urn, err)
	}
	c, cfg, err := newCompiler(opts)
	if err != nil {
		return nil, err
	}
	loc := "mem:///" + url.PathEscape(urn)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("schema: %s: %w", urn, err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("schema: %s: %w", urn, err)
	}
	return newSchema(urn, doc, compiled, cfg.assertFormat), nil
}

func newSchema(urn string, doc any, compiled *jsonschema.Schema, assertFormat bool) *Schema {
	s := &Schema{urn: urn, doc: doc, compiled: compiled, formatAsserted: assertFormat || compiled.DraftVersion < 2019}
	s.marks, s.markIssues, s.marksErr = sensitivePaths(urn, doc)
	return s
}

// URN returns the URN whose data the schema describes.
func (s *Schema) URN() string { return s.urn }

// Validate checks data, the raw JSON of an envelope's data block, and returns nil or a
// *[ValidationError] naming the first violation (the one at the smallest JSON pointer,
// so the answer does not depend on map order).
func (s *Schema) Validate(data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return &ValidationError{URN: s.urn, Message: "not JSON: " + err.Error()}
	}
	return s.ValidateValue(inst)
}

// ValidateValue checks data already decoded from JSON (maps, slices, strings, bools,
// nil and json.Number or float64 numbers), as [Schema.Validate] does.
func (s *Schema) ValidateValue(data any) error {
	err := s.compiled.Validate(data)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ValidationError{URN: s.urn, Message: err.Error()}
	}
	return s.violation(ve)
}

// ErrInvalid matches every *[ValidationError] (errors.Is).
var ErrInvalid = errors.New("schema: data does not match its URN's schema")

// ValidationError is data that does not match the schema of its URN. It names the
// first violation: where in data, which rule, and what is wrong.
type ValidationError struct {
	// URN is the message URN whose schema was applied.
	URN string
	// Pointer is the RFC 6901 JSON pointer of the offending value inside data: "" is
	// data itself, "/items/0/sku" a field of the first item. For "required" it is the
	// object that misses the property.
	Pointer string
	// Keyword is the rule that failed: "required", "minimum", "pattern", "format",
	// "oneOf", "additionalProperties", ... ("" when data is not JSON at all).
	Keyword string
	// SchemaLocation is the JSON pointer of the failing keyword in its schema
	// document, such as "/properties/order_id/minimum" (in the referenced document
	// when the rule was reached through a "$ref" to another file).
	SchemaLocation string
	// Message says what is wrong, as the validator puts it, with every number written
	// as JSON writes it: "got 9007199254740993, want 1000000", never a rounded float or
	// a locale's digit grouping. It never shows a value at or under an x-gdpr-sensitive
	// path.
	Message string
}

// Error names the URN, the pointer, the rule and the message.
func (e *ValidationError) Error() string {
	where := "data"
	if e.Pointer != "" {
		where = "data at " + e.Pointer
	}
	if e.Keyword == "" {
		return fmt.Sprintf("schema: %s: %s: %s", e.URN, where, e.Message)
	}
	return fmt.Sprintf("schema: %s: %s violates %q: %s", e.URN, where, e.Keyword, e.Message)
}

// Is reports whether target is [ErrInvalid].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// printer renders the validator's messages; it holds no state between calls.
var printer = message.NewPrinter(language.English)

func (s *Schema) violation(top *jsonschema.ValidationError) *ValidationError {
	leaves := collectLeaves(top, nil)
	if len(leaves) == 0 {
		leaves = []*jsonschema.ValidationError{top}
	}
	first := slices.MinFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		if c := slices.Compare(a.InstanceLocation, b.InstanceLocation); c != 0 {
			return c
		}
		return strings.Compare(keywordLocation(a), keywordLocation(b))
	})
	keyword := keywordOf(first)
	msg, ok := numberMessage(first.ErrorKind)
	if !ok {
		msg = first.ErrorKind.LocalizedString(printer)
		msg = strings.TrimPrefix(msg, keyword+": ")
	}
	if s.sensitiveAt(first.InstanceLocation) {
		msg = "the value does not satisfy " + keyword + " (not shown: the field is x-gdpr-sensitive)"
	}
	return &ValidationError{
		URN:            s.urn,
		Pointer:        pointer(first.InstanceLocation),
		Keyword:        keyword,
		SchemaLocation: keywordLocation(first),
		Message:        msg,
	}
}

// collectLeaves gathers the innermost failures. A failed oneOf, anyOf or contains is
// reported as itself: which branch or element came closest is a guess.
func collectLeaves(e *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	switch e.ErrorKind.(type) {
	case *kind.OneOf, *kind.AnyOf, *kind.Contains:
		return append(out, e)
	}
	if len(e.Causes) == 0 {
		if _, wrapper := e.ErrorKind.(*kind.Schema); wrapper {
			return out
		}
		return append(out, e)
	}
	for _, c := range e.Causes {
		out = collectLeaves(c, out)
	}
	return out
}

// keywordOf names the rule that failed. A false schema (items: false,
// unevaluatedProperties: false, ...) is named by the keyword that holds it.
func keywordOf(e *jsonschema.ValidationError) string {
	if kp := e.ErrorKind.KeywordPath(); len(kp) > 0 {
		return kp[0]
	}
	if _, ok := e.ErrorKind.(*kind.Not); ok {
		return "not"
	}
	_, frag, _ := strings.Cut(e.SchemaURL, "#")
	segs := strings.Split(strings.TrimPrefix(frag, "/"), "/")
	for i := len(segs) - 1; i >= 0; i-- {
		if i > 0 && slices.Contains(schemaMapKeywords, segs[i-1]) {
			return segs[i-1] // "properties" for properties: {"b": false}
		}
		if _, err := strconv.Atoi(segs[i]); err != nil && segs[i] != "" {
			return strings.ReplaceAll(strings.ReplaceAll(segs[i], "~1", "/"), "~0", "~")
		}
	}
	return "false"
}

func keywordLocation(e *jsonschema.ValidationError) string {
	frag := ""
	if _, f, ok := strings.Cut(e.SchemaURL, "#"); ok {
		frag = f
	}
	return frag + pointer(e.ErrorKind.KeywordPath())
}

// pointer renders path segments as an RFC 6901 JSON pointer.
func pointer(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		s = strings.ReplaceAll(s, "~", "~0")
		b.WriteString(strings.ReplaceAll(s, "/", "~1"))
	}
	return b.String()
}
