// Package readme reads what the install check verifies in README.md: the quick start
// (the first Go block under "## Quick start"), and two tables of the "## Modules"
// section, each module's go line and the module counts of a program that imports
// the root package and one broker.
package readme

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/workspace"
)

// Section returns the body of the "## title" section of markdown (up to the next
// "## " heading), or "" when there is none.
func Section(md []byte, title string) string {
	lines := strings.Split(string(md), "\n")
	var out []string
	in, fence := false, false
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(l, "## ") {
			if in {
				break
			}
			in = strings.TrimSpace(strings.TrimPrefix(l, "## ")) == title
			continue
		}
		if in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// QuickStart returns the first ```go block of the "Quick start" section.
func QuickStart(md []byte) ([]byte, error) {
	body := Section(md, "Quick start")
	_, after, ok := strings.Cut(body, "```go\n")
	if !ok {
		return nil, errors.New("README.md: no ```go block under \"## Quick start\"")
	}
	code, _, ok := strings.Cut(after, "\n```")
	if !ok {
		return nil, errors.New("README.md: the quick start's ```go block is not closed")
	}
	return []byte(code + "\n"), nil
}

// table is a markdown table: its header cells and rows of cells.
type table struct {
	header []string
	rows   [][]string
}

func tables(section string) []table {
	var out []table
	var cur *table
	for _, l := range strings.Split(section, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			cur = nil
			continue
		}
		cells := splitRow(l)
		switch {
		case cur == nil:
			out = append(out, table{header: cells})
			cur = &out[len(out)-1]
		case isRule(cells):
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return out
}

func splitRow(l string) []string {
	l = strings.TrimSuffix(strings.TrimPrefix(l, "|"), "|")
	cells := strings.Split(l, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

func isRule(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}

func column(t table, contains string) int {
	return slices.IndexFunc(t.header, func(h string) bool { return strings.Contains(h, contains) })
}

var backticked = regexp.MustCompile("`([^`]+)`")

// GoLines reads the Modules section's table with a "`go` line" column: module path
// (a leading "…/" stands for the root module's path and a slash) to the go line.
func GoLines(md []byte, rootPath string) (map[string]string, error) {
	for _, t := range tables(Section(md, "Modules")) {
		col := column(t, "`go` line")
		if col < 0 {
			continue
		}
		out := map[string]string{}
		for _, r := range t.rows {
			m := backticked.FindStringSubmatch(r[0])
			if m == nil || col >= len(r) {
				return nil, fmt.Errorf("README.md, Modules: row %q names no module", strings.Join(r, " | "))
			}
			p := m[1]
			if rest, ok := strings.CutPrefix(p, "…/"); ok {
				p = rootPath + "/" + rest
			}
			out[p] = r[col]
		}
		return out, nil
	}
	return nil, errors.New("README.md, Modules: no table with a \"`go` line\" column")
}

// Counts reads the Modules section's table with a "`go list -m all`" column: broker
// name (the base name of a backticked transport/<name> in the first cell; "none" when
// the row names no broker) to the count.
func Counts(md []byte) (map[string]int, error) {
	for _, t := range tables(Section(md, "Modules")) {
		col := column(t, "`go list -m all`")
		if col < 0 {
			continue
		}
		out := map[string]int{}
		for _, r := range t.rows {
			name := "none"
			if m := regexp.MustCompile("`transport/([a-z0-9]+)`").FindStringSubmatch(r[0]); m != nil {
				name = m[1]
			}
			if col >= len(r) {
				return nil, fmt.Errorf("README.md, Modules: row %q has no count", strings.Join(r, " | "))
			}
			n, err := strconv.Atoi(strings.Trim(r[col], "* "))
			if err != nil {
				return nil, fmt.Errorf("README.md, Modules: row %q: count %q: %w", strings.Join(r, " | "), r[col], err)
			}
			out[name] = n
		}
		return out, nil
	}
	return nil, errors.New("README.md, Modules: no table with a \"`go list -m all`\" column")
}

// GoLine is how the README writes a go directive: "1.26.0" and "1.26" are "1.26".
func GoLine(goDirective string) string {
	if mm := semver.MajorMinor("v" + goDirective); mm != "" {
		return strings.TrimPrefix(mm, "v")
	}
	return goDirective
}

// Check compares the README's Modules tables with the workspace's go.mod files and
// with measured counts (nil skips that table). Every mismatch is one error, and the
// error for the counts ends with the table as measured, to paste.
func Check(md []byte, ws *workspace.Workspace, counts map[string]int) error {
	var errs []error
	root := ws.RootModule().Path
	lines, err := GoLines(md, root)
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range ws.Modules {
		if err != nil {
			break
		}
		got, ok := lines[m.Path]
		switch {
		case !ok && m.Published:
			errs = append(errs, fmt.Errorf("README.md, Modules: the published module %s (%s) has no row", m.Path, m.Dir))
		case ok && got != GoLine(m.Go):
			errs = append(errs, fmt.Errorf("README.md, Modules: %s: go line %s, but its go.mod says go %s", m.Path, got, m.Go))
		}
	}
	for p := range lines {
		if ws.Module(p) == nil {
			errs = append(errs, fmt.Errorf("README.md, Modules: %s has a row but is not a module of go.work", p))
		}
	}
	if counts != nil {
		readme, err := Counts(md)
		if err != nil {
			errs = append(errs, err)
		} else {
			var bad []string
			for name, n := range counts {
				if r, ok := readme[name]; !ok {
					bad = append(bad, fmt.Sprintf("%s: no row, measured %d", name, n))
				} else if r != n {
					bad = append(bad, fmt.Sprintf("%s: README %d, measured %d", name, r, n))
				}
			}
			for name := range readme {
				if _, ok := counts[name]; !ok {
					bad = append(bad, fmt.Sprintf("%s: a row, but no such broker module", name))
				}
			}
			if len(bad) > 0 {
				slices.Sort(bad)
				errs = append(errs, fmt.Errorf("README.md, Modules: the module counts differ from what a user gets: %s", strings.Join(bad, "; ")))
			}
		}
	}
	return errors.Join(errs...)
}
