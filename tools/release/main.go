// Command release makes BabelQueue's releases and checks that they install.
//
//	go run . release [-dry-run=true] [-v] vX.Y.Z   (scripts/release.sh vX.Y.Z)
//	go run . check [-v] [-version vX.Y.Z]          (make test, through scripts/test.sh)
//
// release builds the release state of every published module of go.work from the
// checked-out commit in a scratch clone (siblings required at the version, no replace
// directive, the root's Version constant set), checks it (API against the last
// release, install from a local module proxy, README), commits it there and tags each
// module in dependency order ("v0.3.0", "transport/redis/v0.3.0", ...). A dry run,
// the default, prints all that and tags nothing; -dry-run=false pushes the tags into
// the repository. It refuses a dirty work tree, a version without a CHANGELOG.md
// section, and a version that is not a semantic version above the last tag.
//
// check does the same build and checks from the work tree, at the version the
// CHANGELOG names next (or the patch after the last tag), and tags nothing.
//
// Run it with GOWORK=off: this module is not in go.work (its dependencies must not
// enter the workspace's build list).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const usage = `usage:
  release release [-dry-run=true] [-v] [-repo DIR] vX.Y.Z
  release check [-v] [-repo DIR] [-version vX.Y.Z]
`

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	repo := fs.String("repo", ".", "a directory inside the repository")
	verbose := fs.Bool("v", false, "print every go command and its duration")
	scratch := fs.String("scratch", "", "work in this directory and keep it (default: a temporary one, removed)")
	publicProxy := fs.String("public-proxy", "", "public module proxies for third-party modules (default: those of go env GOPROXY; \"off\" for the module cache only)")
	opts := func(version string) release.Options {
		return release.Options{Repo: *repo, Version: version, Scratch: *scratch, PublicProxy: *publicProxy, Log: os.Stdout, Verbose: *verbose}
	}
	switch cmd {
	case "release":
		dryRun := fs.Bool("dry-run", true, "print what would be tagged; -dry-run=false tags")
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return fmt.Errorf("release: one version expected (vX.Y.Z), got %q\n%s", pos, usage)
		}
		v := pos[0]
		if !strings.HasPrefix(v, "v") {
			v = "v" + v
		}
		return release.Release(ctx, release.ReleaseOptions{Options: opts(v), Push: !*dryRun})
	case "check":
		version := fs.String("version", "", "version to build (default: the CHANGELOG's next, or the patch after the last tag)")
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 0 {
			return fmt.Errorf("check: unexpected arguments %q\n%s", pos, usage)
		}
		return release.Check(ctx, opts(*version))
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// parse parses flags placed before or after the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
