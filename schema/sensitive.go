package schema

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// SensitiveKeyword is the schema keyword that marks a value as personal data: true, or
// a non-empty category string such as "email" (SPEC.md §8.6). It never changes a
// validation verdict.
const SensitiveKeyword = "x-gdpr-sensitive"

// SensitivePath is a place in data that a schema marked x-gdpr-sensitive.
type SensitivePath struct {
	// Path is the family's spelling of the place: "email", "profile.full_name",
	// "addresses[].line" ("[]" descends into every element of an array).
	Path string
	// Category is the mark's category string; "" when the mark is true.
	Category string
	// Steps is the same place as properties to descend, for code that walks data.
	Steps []Step
}

// Step is one property on a [SensitivePath].
type Step struct {
	// Property is the property's name.
	Property string
	// Items is how many array levels follow the property: 0 for "profile", 1 for
	// "addresses[]" (every element), 2 for an array of arrays.
	Items int
}

// ErrMarkNotProtectable matches the error of a schema whose x-gdpr-sensitive mark is at
// a place no SDK of the family encrypts: the root of data, or a subschema that is not
// reached through "properties" and "items" alone (under "$defs", "definitions",
// "oneOf", "additionalProperties", ...). Encrypting with such a schema would leave the
// field in clear, so package fieldcrypt refuses it.
var ErrMarkNotProtectable = errors.New("schema: x-gdpr-sensitive mark that no SDK of the family protects")

// SensitivePaths returns the places the schema marked x-gdpr-sensitive, in path order.
// A mark under a marked object or array is left out: the whole container is encrypted
// as one value. The error matches [ErrMarkNotProtectable] when a mark sits where it
// cannot be honoured; the paths are still returned.
func (s *Schema) SensitivePaths() ([]SensitivePath, error) {
	return s.marks, s.marksErr
}

// sensitiveAt reports whether the instance location is at or under a sensitive path.
func (s *Schema) sensitiveAt(loc []string) bool {
	for _, p := range s.marks {
		if covers(p.Steps, loc) {
			return true
		}
	}
	return false
}

func covers(steps []Step, loc []string) bool {
	for _, st := range steps {
		if len(loc) == 0 || loc[0] != st.Property {
			return false
		}
		loc = loc[1:]
		for range st.Items {
			if len(loc) == 0 {
				return true // the array itself holds the marked elements
			}
			if _, err := strconv.Atoi(loc[0]); err != nil {
				return false
			}
			loc = loc[1:]
		}
	}
	return true
}

func markOf(node map[string]any) (string, bool) {
	switch v := node[SensitiveKeyword].(type) {
	case bool:
		return "", v
	case string:
		return v, v != ""
	}
	return "", false
}

// sensitivePaths finds the marks the family honours (reached through properties and
// object-valued items, as every SDK walks them) and every other mark in the document,
// and the honoured marks the Python SDK does not read as Go does ([Schema.PortableMarks]).
func sensitivePaths(urn string, doc any) ([]SensitivePath, []Divergence, error) {
	honoured := map[string]bool{}
	var paths []SensitivePath
	var issues []Divergence
	var walk func(node any, loc string, steps []Step, covered string)
	walk = func(node any, loc string, steps []Step, covered string) {
		obj, ok := node.(map[string]any)
		if !ok {
			return
		}
		if cat, marked := markOf(obj); marked {
			honoured[loc] = true
			switch {
			case covered != "":
				issues = append(issues, markIssue(loc, fmt.Sprintf("a mark under the marked %q: the Python SDK 1.24.0 encrypts the outer value, then fails to decrypt "+
					"the inner mark's (DecryptError), on its own messages too; drop the inner mark", covered)))
			case len(steps) > 0:
				p := SensitivePath{Path: familyPath(steps), Category: cat, Steps: steps}
				paths = append(paths, p)
				if why := unportable(p); why != "" {
					issues = append(issues, markIssue(loc, why))
				}
			}
			if covered == "" && len(steps) > 0 {
				covered = familyPath(steps)
			}
		}
		if props, ok := obj["properties"].(map[string]any); ok {
			for name, sub := range props {
				next := append(append([]Step{}, steps...), Step{Property: name})
				walk(sub, loc+"/properties/"+escape(name), next, covered)
			}
		}
		if items, ok := obj["items"].(map[string]any); ok && len(steps) > 0 {
			next := append([]Step{}, steps...)
			next[len(next)-1].Items++
			walk(items, loc+"/items", next, covered)
		}
	}
	walk(doc, "", nil, "")
	sort.Slice(paths, func(i, j int) bool { return paths[i].Path < paths[j].Path })
	sort.Slice(issues, func(i, j int) bool { return issues[i].Location < issues[j].Location })

	var lost []string
	allMarks(doc, "", func(loc string) {
		if loc == "" || !honoured[loc] {
			lost = append(lost, "#"+loc)
		}
	})
	if len(lost) > 0 {
		sort.Strings(lost)
		return paths, issues, fmt.Errorf("%w: %s marks %s (only properties and items below the root of data are encrypted)",
			ErrMarkNotProtectable, urn, strings.Join(lost, ", "))
	}
	return paths, issues, nil
}

func markIssue(loc, detail string) Divergence {
	return Divergence{Location: "#" + loc, Keyword: SensitiveKeyword, Harm: MarkMisread, Detail: detail}
}

// unportable says why the Python SDK 1.24.0 does not read p where Go does, or "". It
// finds a mark by splitting the family path at "." and reading a trailing "[]" as one
// array level, and it takes the path "" for the root of data.
func unportable(p SensitivePath) string {
	const clear = ": its producer leaves the value in clear (or encrypts another field), its consumer hands a Go producer's ciphertext to its handler"
	if p.Steps[0].Property == "" {
		return `a mark on the property "" of data, whose path the Python SDK 1.24.0 reads as the root and skips` + clear
	}
	for _, st := range p.Steps {
		switch {
		case strings.Contains(st.Property, "."):
			return fmt.Sprintf("the property name %q holds a \".\", where the Python SDK 1.24.0 splits the path %q", st.Property, p.Path) + clear
		case strings.HasSuffix(st.Property, "[]"):
			return fmt.Sprintf("the property name %q ends in \"[]\", which the Python SDK 1.24.0 reads as an array to descend into", st.Property) + clear
		case st.Items > 1:
			return fmt.Sprintf("an array of arrays (%q), which the Python SDK 1.24.0 does not descend into", p.Path) + clear
		}
	}
	return ""
}

func familyPath(steps []Step) string {
	var b strings.Builder
	for i, st := range steps {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(st.Property)
		for range st.Items {
			b.WriteString("[]")
		}
	}
	return b.String()
}

// Keywords whose value is a schema, a map of schemas or a list of schemas (draft-07
// through 2020-12). Values of other keywords (enum, const, default, examples) are data
// and are not searched for marks.
var (
	schemaKeywords = []string{"items", "additionalItems", "additionalProperties", "not", "if", "then", "else",
		"contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
	schemaMapKeywords  = []string{"properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies"}
	schemaListKeywords = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
)

// allMarks calls found with the location of every marked subschema in doc.
func allMarks(node any, loc string, found func(loc string)) {
	obj, ok := node.(map[string]any)
	if !ok {
		return
	}
	if _, marked := markOf(obj); marked {
		found(loc)
	}
	for _, k := range schemaKeywords {
		allMarks(obj[k], loc+"/"+escape(k), found)
	}
	for _, k := range schemaMapKeywords {
		if m, ok := obj[k].(map[string]any); ok {
			for name, sub := range m {
				allMarks(sub, loc+"/"+escape(k)+"/"+escape(name), found)
			}
		}
	}
	for _, k := range schemaListKeywords {
		if l, ok := obj[k].([]any); ok {
			for i, sub := range l {
				allMarks(sub, loc+"/"+escape(k)+"/"+strconv.Itoa(i), found)
			}
		}
	}
}

func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
