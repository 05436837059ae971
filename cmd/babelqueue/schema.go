package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/schema"
)

const schemaUsage = `Usage:
  babelqueue schema check -registry DIR [-urn URN] [-notes] [-strict] [FILE...]

Loads the babelqueue-registry in DIR (DIR/registry.json and every schema it lists; an
error in any of them fails the command) and validates each FILE: an envelope is checked
against the schema of its URN, any other JSON file is the data of -urn. A URN without a
schema is reported as not validated. With no FILE it only checks the registry.

It warns where another SDK of the family (the Python SDK 1.24.0, verified) treats a
schema or a FILE's data differently, before it hurts a mixed fleet (schema/PARITY.md):

  warning  a construct Python rejects valid data with (an integer-valued number in
           const or enum, a true subschema or patternProperties beside
           additionalProperties: false), a number in data beyond the float64 range, or
           an x-gdpr-sensitive mark Python's field encryption does not read where Go
           does (fieldcrypt.WithPortablePathsOnly refuses those)
  note     (with -notes) a keyword Python does not check, so data a Python producer
           publishes may be dead-lettered by a Go consumer

Exit status: 0 all valid, 1 a file is invalid (or, with -strict, a warning), 2 a usage,
registry or read error.

Flags:
`

// schemaCmd runs "babelqueue schema check".
func schemaCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, schemaUsage)
		return usageError{"schema: the only subcommand is check"}
	}
	fs := flag.NewFlagSet("schema check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, schemaUsage); fs.PrintDefaults() }
	dir := fs.String("registry", "", "the babelqueue-registry directory (or its registry.json)")
	urn := fs.String("urn", "", "the URN whose schema validates FILEs that are data, not envelopes")
	draft2020 := fs.Bool("2020-12", false, "read schemas without $schema as JSON Schema 2020-12 (default draft-07)")
	format := fs.Bool("assert-format", false, "make format a rule in 2019-09 and 2020-12 schemas too")
	notes := fs.Bool("notes", false, "also list the keywords the Python SDK does not check")
	strict := fs.Bool("strict", false, "exit 1 when there is a warning")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		fs.Usage()
		return usageError{"schema check: -registry is required"}
	}
	var opts []schema.Option
	if *draft2020 {
		opts = append(opts, schema.WithDefaultDraft(schema.Draft2020))
	}
	if *format {
		opts = append(opts, schema.WithFormatAssertion())
	}
	reg, err := schema.LoadRegistry(*dir, opts...)
	if err != nil {
		return usageError{err.Error()}
	}
	warnings := 0
	for _, u := range reg.URNs() {
		for _, d := range reg.Schema(u).Divergences() {
			switch {
			case d.Harm != schema.AcceptsInvalid:
				fmt.Fprintf(stdout, "warning  %s %s: %s\n", u, d.Location, d.Detail)
				warnings++
			case *notes:
				fmt.Fprintf(stdout, "note     %s %s: %s\n", u, d.Location, d.Detail)
			}
		}
	}
	strictErr := func() error {
		if *strict && warnings > 0 {
			return fmt.Errorf("%d warning(s) with -strict", warnings)
		}
		return nil
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stdout, "%s: %d schema(s) load and compile; %d warning(s)\n", *dir, len(reg.URNs()), warnings)
		return strictErr()
	}
	var invalid, unreadable int
	for _, file := range fs.Args() {
		u, data, err := checkTarget(file, *urn)
		if err != nil {
			fmt.Fprintf(stdout, "error    %s: %v\n", file, err)
			unreadable++
			continue
		}
		s := reg.Schema(u)
		if s == nil {
			fmt.Fprintf(stdout, "skipped  %s: %s has no schema in the registry (not validated)\n", file, u)
			continue
		}
		for _, d := range schema.DataDivergences(data) {
			fmt.Fprintf(stdout, "warning  %s data at %s: %s\n", file, d.Location, d.Detail)
			warnings++
		}
		if err := s.Validate(data); err != nil {
			fmt.Fprintf(stdout, "invalid  %s: %v\n", file, err)
			invalid++
			continue
		}
		fmt.Fprintf(stdout, "ok       %s: %s\n", file, u)
	}
	switch {
	case unreadable > 0:
		return usageError{fmt.Sprintf("schema check: %d of %d file(s) could not be checked", unreadable, fs.NArg())}
	case invalid > 0:
		return fmt.Errorf("%d of %d file(s) invalid", invalid, fs.NArg())
	}
	return strictErr()
}

// checkTarget reads file and returns the URN and the data to validate: an envelope's
// own, or the whole file as the data of urn.
func checkTarget(file, urn string) (string, []byte, error) {
	body, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
	}
	env, decodeErr := envelope.Decode(body)
	if decodeErr == nil && env.Job != "" && len(env.Data) > 0 {
		return env.Job, env.Data, nil
	}
	if urn == "" {
		if decodeErr != nil {
			return "", nil, fmt.Errorf("not an envelope (%v); give -urn to check it as data", decodeErr)
		}
		return "", nil, errors.New("not an envelope; give -urn to check it as data")
	}
	return urn, body, nil
}
