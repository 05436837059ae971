package console_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium: $BQ_CHROMIUM (scripts/test.sh installs it
// with scripts/prometheus.sh and exports the path), chromium on PATH, or
// /usr/bin/chromium. Missing, the test fails under CI=true and is skipped elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("BQ_CHROMIUM"), "chromium", "/usr/bin/chromium"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	msg := "chromium not found (install it with `bash scripts/prometheus.sh`, or set BQ_CHROMIUM)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: this test never skips)")
	}
	t.Skip(msg)
	return ""
}

// browser is a headless Chromium tab that records every error the pages report:
// exceptions, console.error calls and the browser's own log entries of level error
// (failed loads, refused content-security-policy violations).
type browser struct {
	t   *testing.T
	ctx context.Context

	dirOnce sync.Once
	dir     string

	mu     sync.Mutex
	errors []string
	// allowed are substrings of errors the test provokes on purpose.
	allowed []string
}

func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	path := chromiumPath(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 900), chromedp.Flag("lang", "en-US")), extra...)...)
	ctx, cancel := chromedp.NewContext(alloc)
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.record(fmt.Sprintf("%s %s (%s)", m.String(), m.URL, m.Source))
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-done
	})
	return b
}

func (b *browser) record(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.allowed {
		if strings.Contains(s, a) {
			return
		}
	}
	b.errors = append(b.errors, s)
}

// allow makes errors holding s expected (a refusal the test provokes).
func (b *browser) allow(s string) {
	b.mu.Lock()
	b.allowed = append(b.allowed, s)
	b.mu.Unlock()
}

// noErrors fails the test if a page reported an error.
func (b *browser) noErrors(where string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		b.t.Errorf("%s: the browser reported errors:\n  %s", where, strings.Join(b.errors, "\n  "))
		b.errors = nil
	}
}

// run runs actions with a timeout.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression on the page and decodes its value.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshotDir is where the test writes a screenshot of each page: the committed
// set in testdata/screenshots with BQ_UPDATE_SCREENSHOT=1 (which also rewrites the
// README's docs/console.png), else a directory of the test's own, so that a test run
// leaves the working tree as it was.
func (b *browser) screenshotDir() string {
	b.dirOnce.Do(func() {
		b.dir = filepath.Join("testdata", "screenshots")
		if os.Getenv("BQ_UPDATE_SCREENSHOT") != "1" {
			b.dir = b.t.TempDir()
		}
	})
	return b.dir
}

// screenshot writes the viewport to name.png in the screenshot directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	b.run("settle before screenshot "+name, chromedp.Sleep(150*time.Millisecond))
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		b.t.Fatalf("screenshot %s is not a PNG", name)
	}
	dir := b.screenshotDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// viewport sets the size of the page (a phone, a laptop).
func (b *browser) viewport(w, h int64, mobile bool) {
	b.t.Helper()
	opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
	if mobile {
		opts = append(opts, chromedp.EmulateMobile)
	}
	b.run("viewport", chromedp.EmulateViewport(w, h, opts...))
}
