package apicheck

import (
	"testing"

	"golang.org/x/exp/apidiff"
)

func TestBumpOf(t *testing.T) {
	for _, c := range []struct {
		old, new string
		want     Bump
	}{
		{"v0.3.0", "v0.3.1", Patch},
		{"v0.3.0", "v0.4.0", Minor},
		{"v0.3.0", "v0.4.0-rc.1", Minor},
		{"v0.3.2", "v1.0.0", Major},
		{"v1.2.0", "v1.2.5", Patch},
	} {
		if got := BumpOf(c.old, c.new); got != c.want {
			t.Errorf("BumpOf(%s, %s) = %v, want %v", c.old, c.new, got, c.want)
		}
	}
}

func TestNeeded(t *testing.T) {
	incompatible := apidiff.Report{Changes: []apidiff.Change{{Message: "F: removed"}}}
	compatible := apidiff.Report{Changes: []apidiff.Change{{Message: "G: added", Compatible: true}}}
	both := apidiff.Report{Changes: append(incompatible.Changes, compatible.Changes...)}
	for _, c := range []struct {
		name string
		base string
		r    apidiff.Report
		want Bump
	}{
		{"nothing, v0", "v0.3.0", apidiff.Report{}, Patch},
		{"addition, v0", "v0.3.0", compatible, Minor},
		{"removal, v0", "v0.3.0", incompatible, Minor},
		{"both, v0", "v0.3.0", both, Minor},
		{"nothing, v1", "v1.0.0", apidiff.Report{}, Patch},
		{"addition, v1", "v1.0.0", compatible, Minor},
		{"removal, v1", "v1.0.0", incompatible, Major},
		{"both, v2", "v2.1.0", both, Major},
	} {
		if got := Needed(c.base, c.r); got != c.want {
			t.Errorf("%s: Needed = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestIsInternal(t *testing.T) {
	for p, want := range map[string]bool{
		"m.test/r/internal/settle":      true,
		"m.test/r/internal":             true,
		"m.test/r/transport/internal/x": true,
		"m.test/r/transport":            false,
		"m.test/r/internalthing":        false,
		"m.test/r":                      false,
	} {
		if got := isInternal(p, "m.test/r"); got != want {
			t.Errorf("isInternal(%q) = %v", p, got)
		}
	}
}
