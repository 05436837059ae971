// Command reliability renders the fault suite's results (the JSON that TestFaults
// writes to BQ_FAULTS_OUT) as the tables of docs/reliability.md, between the document's
// generated-table markers. make faults runs it after the full form.
//
//	go run ./faults/cmd/reliability -in docs/reliability.json -doc docs/reliability.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
)

func main() {
	in := flag.String("in", "docs/reliability.json", "the results TestFaults wrote (BQ_FAULTS_OUT)")
	doc := flag.String("doc", "docs/reliability.md", "the document whose generated tables to replace")
	flag.Parse()
	if err := run(*in, *doc); err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
}

func run(in, doc string) error {
	results, err := faultsuite.ReadResults(in)
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("%s holds no results", in)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	out, err := faultsuite.UpdateDoc(string(b), faultsuite.Markdown(results))
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	return os.WriteFile(doc, []byte(out), 0o644)
}
