package faultsuite

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// WriteResults writes results to path as JSON, sorted by broker and scenario.
func WriteResults(path string, results []*Result) error {
	sortResults(results)
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// MergeResults returns old with the rows of newer in place of the rows of the same
// deployment and scenario (Title and Row), and newer's other rows added: a run of a
// few brokers or scenarios updates their rows and keeps the rest.
func MergeResults(old, newer []*Result) []*Result {
	key := func(r *Result) string { return r.Title() + "\x00" + r.Row() }
	replaced := map[string]bool{}
	for _, r := range newer {
		replaced[key(r)] = true
	}
	out := slices.DeleteFunc(slices.Clone(old), func(r *Result) bool { return replaced[key(r)] })
	out = append(out, newer...)
	sortResults(out)
	return out
}

// ReadResults reads what WriteResults wrote.
func ReadResults(path string) ([]*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var results []*Result
	if err := json.Unmarshal(b, &results); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return results, nil
}

func sortResults(results []*Result) {
	order := func(s Scenario) int { return slices.Index(Scenarios, s) }
	slices.SortStableFunc(results, func(a, b *Result) int {
		if c := strings.Compare(a.Broker, b.Broker); c != 0 {
			return c
		}
		if c := strings.Compare(a.Setup, b.Setup); c != 0 {
			return c
		}
		return order(a.Scenario) - order(b.Scenario)
	})
}

// Title names the deployment a result is of in the report: the broker, and its setup
// when it is not the suite's single broker ("Redis (Sentinel, wait=1)").
func (res *Result) Title() string {
	if res.Setup == "" {
		return res.Broker
	}
	return res.Broker + " (" + res.Setup + ")"
}

// Row names the result's row in its deployment's table: its Case, else its scenario.
func (res *Result) Row() string {
	if res.Case != "" {
		return res.Case
	}
	return string(res.Scenario)
}

// Slack is how far past its bounds a result of the form may go: twice in the short form
// (it runs beside the rest of make test, under the race detector), none in the full.
func (res *Result) Slack() float64 {
	if res.Form == "short" {
		return 2
	}
	return 1
}

// OverBound returns one line per failure of every result, each naming its row
// ("Kafka, connection cut: 1300 duplicates, past …"), within each result's slack.
func OverBound(results []*Result) []string {
	results = slices.Clone(results)
	sortResults(results)
	var out []string
	for _, r := range results {
		for _, f := range r.verdict() {
			out = append(out, r.Title()+", "+r.Row()+": "+f)
		}
	}
	return out
}

// verdict is what puts res over its bounds: its Failures within its form's slack, or,
// for a run its test judged, that test's verdict.
func (res *Result) verdict() []string {
	switch {
	case !res.Judged:
		return res.Failures(res.Slack())
	case res.Failed:
		return []string{"failed by its test, on bounds of its own (its log says which)"}
	}
	return nil
}

// Markdown renders results as the tables of docs/reliability.md: one table per broker
// (per deployment: a cluster's rows apart) with each run's account against its
// bounds (duplicates, recovery, dead connections found, publish errors through the
// cut) and its verdict, then how each fault was made, what each duplicate bound is
// made of, and the settings that bound duplicates and recovery.
func Markdown(results []*Result) string {
	results = slices.Clone(results)
	sortResults(results)
	var b strings.Builder
	title := ""
	for _, r := range results {
		if r.Title() != title {
			title = r.Title()
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "**%s**\n\n", title)
			b.WriteString("| Scenario | Published | Handled | Dead-lettered | Missing | Duplicates (bound) | Recovery (bound) | Fault lasted | " +
				"Dead connections found (bound) | Publish errors through the cut | Verdict |\n")
			b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
		}
		dead := fmt.Sprint(r.DeadLettered)
		if r.Destroyed > 0 {
			dead += fmt.Sprintf(" (+%d destroyed by the fault)", r.Destroyed)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %d | %s | %s | %s | %s | %s | %s |\n", cell(r.Row()), r.Published, r.Handled,
			dead, r.Missing, duplicatesCell(r), recoveryCell(r), seconds(r.Down), detectionCell(r), publishCell(r), verdictCell(r))
	}
	b.WriteString("\n| Broker | Scenario | How the fault was made | What the recovery time measures | Longest pause in settlements during the fault | What the duplicate bound is made of |\n|---|---|---|---|---:|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", cell(r.Title()), cell(r.Row()), cell(r.Method), cell(r.RecoveryOf),
			seconds(r.Pause), cell(r.DuplicateBoundOf))
	}
	if slices.ContainsFunc(results, func(r *Result) bool { return r.DetectBound > 0 }) {
		b.WriteString("\n| Broker | Scenario | Dead connections found (bound) | What was seen |\n|---|---|---:|---|\n")
		for _, r := range results {
			if r.DetectBound > 0 {
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(r.Title()), cell(r.Row()), detectionCell(r), cell(r.DetectionOf))
			}
		}
	}
	var brokers []string
	settings := map[string]string{}
	for _, r := range results {
		if _, seen := settings[r.Title()]; !seen {
			brokers = append(brokers, r.Title())
			settings[r.Title()] = ""
		}
		if r.Settings != "" {
			settings[r.Title()] = r.Settings
		}
	}
	b.WriteString("\n| Broker | Settings of the run that bound duplicates and recovery |\n|---|---|\n")
	for _, name := range brokers {
		fmt.Fprintf(&b, "| %s | %s |\n", cell(name), cell(settings[name]))
	}
	return b.String()
}

func duplicatesCell(r *Result) string {
	if r.DuplicateBound <= 0 {
		return fmt.Sprintf("%d (no bound)", r.Duplicates)
	}
	return fmt.Sprintf("%d (≤ %d)", r.Duplicates, r.DuplicateBound)
}

// publishCell is what the run's publisher met through a cut: the errors of its
// publishes, how many it made while cut and its longest call.
func publishCell(r *Result) string {
	switch {
	case r.Scenario != Cut, !r.PublisherCut && r.PublisherUncut == "":
		return "–" // not a cut, or a run from before the publisher was cut
	case !r.PublisherCut:
		return "not cut: " + cell(r.PublisherUncut)
	}
	return fmt.Sprintf("%d (%d publishes in the cut, %d returned nil; longest %s)", r.PublishErrors, r.PublishesInFault,
		r.PublishesInFaultOK, seconds(r.LongestPublish))
}

// verdictCell is "ok", or what puts the run over its bounds.
func verdictCell(r *Result) string {
	f := r.verdict()
	if len(f) == 0 {
		return "ok"
	}
	for i := range f {
		f[i] = firstLine(f[i], 200)
	}
	return "**fails**: " + cell(strings.Join(f, "; "))
}

func recoveryCell(r *Result) string {
	switch {
	case r.Stalled:
		return "**stalled**"
	case r.Recovery == 0 && r.RecoveryOf != "" && !strings.HasPrefix(r.RecoveryOf, "from"):
		return "n/a (" + r.RecoveryOf + ")"
	}
	return fmt.Sprintf("%s (≤ %s)", seconds(r.Recovery), seconds(r.Bound))
}

func detectionCell(r *Result) string {
	switch {
	case r.DetectBound <= 0:
		return "–"
	case r.Undetected:
		return "**never**"
	case r.Detection == 0:
		return "– (≤ " + seconds(r.DetectBound) + ")"
	}
	return fmt.Sprintf("%s (≤ %s)", seconds(r.Detection), seconds(r.DetectBound))
}

func seconds(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 s"
	case d < 10*time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func cell(s string) string {
	if s == "" {
		return "–"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// The markers between which UpdateDoc writes the tables.
const (
	BeginMarker = "<!-- faults:begin (generated by make faults; do not edit) -->"
	EndMarker   = "<!-- faults:end -->"
)

// ErrNoMarkers is returned by UpdateDoc for a document without both markers.
var ErrNoMarkers = errors.New("faultsuite: the document lacks the generated-table markers")

// UpdateDoc returns doc with what lies between [BeginMarker] and [EndMarker] replaced
// by table.
func UpdateDoc(doc, table string) (string, error) {
	i := strings.Index(doc, BeginMarker)
	j := strings.Index(doc, EndMarker)
	if i < 0 || j < i {
		return "", ErrNoMarkers
	}
	return doc[:i+len(BeginMarker)] + "\n" + table + doc[j:], nil
}
