package console_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestConsoleOverHTTPSInChromium serves the console over HTTPS with the test PKI's
// server certificate (scripts/certs.sh) and drives it in headless Chromium that trusts
// the test CA (in a private NSS database, as a machine whose administrator installed
// the company CA): the login page loads as a secure context with no certificate
// error, the login works, and the session cookie is Secure and HttpOnly. A Chromium
// that does not trust the CA refuses the page.
func TestConsoleOverHTTPSInChromium(t *testing.T) {
	crt, key, ca := transporttest.TLSFile(t, "server.crt"), transporttest.TLSFile(t, "server.key"), transporttest.TLSFile(t, "ca.crt")
	home := trustingHome(t, ca)
	cfg, err := console.LoadTLS(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.New([]console.Broker{{URL: "memory://", Transport: memory.New(), Queues: []console.Queue{{Name: "orders"}}}},
		console.WithToken("s3cret-token"), console.WithTLSConfig(cfg), console.WithoutPrewarm())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- c.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { addr <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenAndServe: %v", err)
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "https://localhost:" + strings.TrimPrefix(a.String(), "127.0.0.1:")
	case err := <-done:
		t.Fatalf("ListenAndServe: %v", err)
	}

	b := newBrowser(t, chromedp.Env("HOME="+home))
	b.run("login page over HTTPS", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`form.login`)))
	if proto, secure := eval[string](b, `location.protocol`), eval[bool](b, `window.isSecureContext`); proto != "https:" || !secure {
		t.Errorf("the page is %s, secure context %v; want https: and true", proto, secure)
	}
	b.run("log in", chromedp.SendKeys(chromedp.CSS(`#user`), "ada"), chromedp.SendKeys(chromedp.CSS(`#token`), "s3cret-token"),
		chromedp.Submit(chromedp.CSS(`form.login`)), chromedp.WaitVisible(chromedp.CSS(`#overview`)))
	cctx, ccancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer ccancel()
	cookies, err := chromedp.Call(cctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, ck := range cookies.Cookies {
		if ck.Name == "bq_console" {
			session = ck
		}
	}
	if session == nil || !session.Secure || !session.HTTPOnly {
		t.Errorf("session cookie %+v: want it Secure and HttpOnly", session)
	}
	b.noErrors("console over HTTPS")

	// Without the CA, the same page is refused.
	plain := newBrowser(t, chromedp.Env("HOME="+t.TempDir()))
	nctx, ncancel := context.WithTimeout(plain.ctx, 30*time.Second)
	defer ncancel()
	err = chromedp.Do(nctx, chromedp.Navigate(base+"/"))
	if err == nil || !strings.Contains(err.Error(), "ERR_CERT_AUTHORITY_INVALID") {
		t.Errorf("a browser without the test CA: %v; want ERR_CERT_AUTHORITY_INVALID", err)
	}
}

// trustingHome returns a home directory whose NSS database (where Chromium on Linux
// reads the certificate authorities a user added) trusts ca for web sites.
func trustingHome(t *testing.T, ca string) string {
	t.Helper()
	certutil, err := exec.LookPath("certutil")
	if err != nil {
		msg := "certutil not found (libnss3-tools; `bash scripts/prometheus.sh` installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: this test never skips)")
		}
		t.Skip(msg)
	}
	home := t.TempDir()
	db := filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(db, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-N", "-d", "sql:" + db, "--empty-password"},
		{"-A", "-d", "sql:" + db, "-n", "babelqueue-test-ca", "-t", "C,,", "-i", ca},
	} {
		if out, err := exec.Command(certutil, args...).CombinedOutput(); err != nil {
			t.Fatalf("certutil %v: %v\n%s", args, err, out)
		}
	}
	return home
}
