// Package gitx runs the few git commands the release tooling needs: the commit and
// tags of the repository, whether its tree is clean, and scratch copies of it.
package gitx

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Git runs git with args in dir and returns its standard output. A failure carries
// git's standard error.
func Git(dir string, args ...string) (string, error) {
	// A scratch commit or tag is never signed (no key there) nor run through hooks.
	cmd := exec.Command("git", append([]string{"-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "core.hooksPath=/dev/null"}, args...)...)
	cmd.Dir = dir
	// A commit made in a scratch clone must not depend on the user's git identity.
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=babelqueue release", "GIT_AUTHOR_EMAIL=release@babelqueue.invalid",
		"GIT_COMMITTER_NAME=babelqueue release", "GIT_COMMITTER_EMAIL=release@babelqueue.invalid")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s (in %s): %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Head returns the commit checked out in repo and its committer time.
func Head(repo string) (string, time.Time, error) {
	out, err := Git(repo, "log", "-1", "--format=%H %ct", "HEAD")
	if err != nil {
		return "", time.Time{}, err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return "", time.Time{}, fmt.Errorf("git log: unexpected output %q", out)
	}
	sec, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return "", time.Time{}, err
	}
	return f[0], time.Unix(sec, 0).UTC(), nil
}

// Dirty returns the lines of "git status --porcelain" for repo: changed, staged and
// untracked files that are not ignored. None means the tree is clean.
func Dirty(repo string) ([]string, error) {
	out, err := Git(repo, "status", "--porcelain")
	if err != nil {
		return nil, err
	}
	return strings.FieldsFunc(out, func(r rune) bool { return r == '\n' }), nil
}

// Tags lists the repository's tags.
func Tags(repo string) ([]string, error) {
	out, err := Git(repo, "tag", "--list")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// Clone clones repo into dst and checks out commit, detached.
func Clone(repo, dst, commit string) error {
	if _, err := Git(filepath.Dir(dst), "clone", "--quiet", "--no-checkout", repo, dst); err != nil {
		return err
	}
	_, err := Git(dst, "checkout", "--quiet", "--detach", commit)
	return err
}

// CopyWorkTree copies the files of repo's work tree that git would commit (tracked
// files as they are on disk, and untracked files that are not ignored) into dst, and
// makes dst a git repository with that content as its one commit. Ignored files
// (caches, build output) stay behind.
func CopyWorkTree(repo, dst string) error {
	out, err := Git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return err
	}
	for _, name := range strings.Split(out, "\x00") {
		if name == "" {
			continue
		}
		if err := copyFile(filepath.Join(repo, name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	for _, args := range [][]string{
		{"init", "--quiet"},
		{"add", "--all"},
		{"commit", "--quiet", "--no-verify", "--allow-empty", "-m", "work tree of " + repo},
	} {
		if _, err := Git(dst, args...); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	fi, err := os.Lstat(src)
	if os.IsNotExist(err) {
		return nil // deleted in the work tree, not yet in the index
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		return nil // a nested repository (submodule): not part of any module zip
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
