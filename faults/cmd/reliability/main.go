// Command reliability renders the fault suite's results (the JSON that TestFaults
// writes to BQ_FAULTS_OUT) as the tables of docs/reliability.md, between the document's
// generated-table markers, one table per broker. make faults runs it after the full
// form. It then lists every row over one of its bounds (duplicates, recovery, dead
// connections found, publish errors through the cut, anything lost), naming the row,
// and exits with status 1 when there is one.
//
//	go run ./faults/cmd/reliability -in docs/reliability.json -doc docs/reliability.md
//	go run ./faults/cmd/reliability -in new.json -merge docs/reliability.json -doc docs/reliability.md
//
// With -merge the results of -in replace the rows of the same broker and scenario in
// the file it names (a run of a few brokers or scenarios keeps the others' rows), which
// is written back and rendered.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"

	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
)

func main() {
	in := flag.String("in", "docs/reliability.json", "the results TestFaults wrote (BQ_FAULTS_OUT)")
	doc := flag.String("doc", "docs/reliability.md", "the document whose generated tables to replace")
	merge := flag.String("merge", "", "results to merge -in into (written back), and render")
	flag.Parse()
	if err := run(*in, *merge, *doc); err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
}

func run(in, merge, doc string) error {
	results, err := faultsuite.ReadResults(in)
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("%s holds no results", in)
	}
	if merge != "" {
		old, err := faultsuite.ReadResults(merge)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		results = faultsuite.MergeResults(old, results)
		if err := faultsuite.WriteResults(merge, results); err != nil {
			return err
		}
		in = merge
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	out, err := faultsuite.UpdateDoc(string(b), faultsuite.Markdown(results))
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
		return err
	}
	over := faultsuite.OverBound(results)
	for _, line := range over {
		fmt.Fprintln(os.Stderr, "over its bound:", line)
	}
	if len(over) > 0 {
		return fmt.Errorf("%d rows of %s over their bounds (listed above)", len(over), in)
	}
	return nil
}
