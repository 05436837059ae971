package transport_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// pki is a CA, and what it signs, written as PEM files in a test's temporary directory.
type pki struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), cert: cert, key: key}
	p.write(t, name+".crt", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// leaf signs a certificate for hosts, valid from notBefore to notAfter; it returns
// the pair and the paths of its PEM files.
func (p *pki) leaf(t *testing.T, name string, hosts []string, notBefore, notAfter time.Time) (tls.Certificate, string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	cf := p.write(t, name+".crt", "CERTIFICATE", der)
	kf := p.write(t, name+".key", "PRIVATE KEY", kder)
	pair, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	return pair, cf, kf
}

func (p *pki) caFile() string { return filepath.Join(p.dir, p.cert.Subject.CommonName+".crt") }

// serve runs a TLS server on loopback with cert (and, when clients is set, client
// certificates required and verified against it) that echoes one byte; it returns the
// address.
func serve(t *testing.T, cert tls.Certificate, clients *pki) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clients != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clients.cert)
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, 1)
				if _, err := c.Read(b); err == nil {
					_, _ = c.Write(b)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip dials addr with the configuration of rawURL and exchanges one byte, as a
// broker client's first command would.
func roundTrip(t *testing.T, rawURL, addr string) error {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseTLS(u, true, nil)
	if err != nil {
		t.Fatalf("TLS: %v", err)
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{1}); err != nil {
		return err
	}
	_, err = io.ReadFull(c, make([]byte, 1))
	return err
}

func TestTLSHandshakeFailuresAreNamed(t *testing.T) {
	ca := newCA(t, "ca")
	other := newCA(t, "other")
	now := time.Now()
	good, _, _ := ca.leaf(t, "server", []string{"localhost", "127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour))
	expired, _, _ := ca.leaf(t, "expired", []string{"localhost", "127.0.0.1"}, now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	wrongHost, _, _ := ca.leaf(t, "wronghost", []string{"wrong.invalid"}, now.Add(-time.Hour), now.Add(time.Hour))
	_, clientCrt, clientKey := ca.leaf(t, "client", nil, now.Add(-time.Hour), now.Add(time.Hour))
	_, otherCrt, otherKey := other.leaf(t, "client-other", nil, now.Add(-time.Hour), now.Add(time.Hour))

	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("-ERR this is not TLS\r\n"))
			_ = c.Close()
		}
	}()

	q := url.Values{"tls_ca": {ca.caFile()}}
	withClient := url.Values{"tls_ca": {ca.caFile()}, "tls_cert": {clientCrt}, "tls_key": {clientKey}}
	cases := []struct {
		name, addr string
		query      url.Values
		says       string // "" means the exchange succeeds
	}{
		{"good", serve(t, good, nil), q, ""},
		{"mutual TLS", serve(t, good, ca), withClient, ""},
		{"unknown CA", serve(t, good, nil), url.Values{"tls_ca": {other.caFile()}}, "unknown authority"},
		{"system roots", serve(t, good, nil), url.Values{}, "unknown authority"},
		{"expired", serve(t, expired, nil), q, "has expired"},
		{"wrong host", serve(t, wrongHost, nil), q, "not valid for the host name"},
		{"no client certificate", serve(t, good, ca), q, "refused the handshake"},
		{"client certificate of another CA", serve(t, good, ca),
			url.Values{"tls_ca": {ca.caFile()}, "tls_cert": {otherCrt}, "tls_key": {otherKey}}, "refused the handshake"},
		{"plain port", plain.Addr().String(), q, "did not answer in TLS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, port, _ := net.SplitHostPort(tc.addr)
			raw := "rediss://user:s3cret@127.0.0.1:" + port + "/0?" + tc.query.Encode()
			err := roundTrip(t, raw, tc.addr)
			if tc.says == "" {
				if err != nil {
					t.Fatalf("exchange failed: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("exchange succeeded; want a TLS failure")
			}
			u, _ := url.Parse(raw)
			oe := transport.OpenFailed("redis", transport.RedactURL(u), err)
			if !errors.Is(oe, transport.ErrTLS) || errors.Is(oe, transport.ErrAuth) {
				t.Errorf("%v: ErrTLS %v, ErrAuth %v; want ErrTLS only", oe, errors.Is(oe, transport.ErrTLS), errors.Is(oe, transport.ErrAuth))
			}
			msg := oe.Error()
			if !strings.HasPrefix(msg, "redis: cannot connect to rediss://user:xxxxx@127.0.0.1:") || !strings.Contains(msg, tc.says) {
				t.Errorf("error %q: want the broker, the redacted address and %q", msg, tc.says)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error %q shows the password", msg)
			}
		})
	}
}

func TestAuthFailureMatchesErrAuth(t *testing.T) {
	err := transport.OpenFailed("amqp", "amqps://u:xxxxx@127.0.0.1:5671/", transport.AuthFailure(errors.New("Exception (403) Reason: ACCESS_REFUSED")))
	if !errors.Is(err, transport.ErrAuth) || errors.Is(err, transport.ErrTLS) {
		t.Errorf("%v: want ErrAuth only", err)
	}
	if got := err.Error(); got != "amqp: cannot connect to amqps://u:xxxxx@127.0.0.1:5671/: Exception (403) Reason: ACCESS_REFUSED" {
		t.Errorf("Error() = %q", got)
	}
	if transport.AuthFailure(nil) != nil {
		t.Error("AuthFailure(nil) is not nil")
	}
}

func TestParseTLS(t *testing.T) {
	ca := newCA(t, "ca")
	now := time.Now()
	_, crt, key := ca.leaf(t, "client", nil, now.Add(-time.Hour), now.Add(time.Hour))
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	aliases := map[string]string{"cacertfile": "tls_ca", "skip_verify": "tls_insecure"}
	bad := []struct {
		name   string
		query  string
		secure bool
		param  string
	}{
		{"a TLS parameter without TLS", "tls_ca=" + ca.caFile(), false, "tls_ca"},
		{"an alias without TLS", "cacertfile=" + ca.caFile(), false, "cacertfile"},
		{"missing CA file", "tls_ca=/nonexistent/ca.pem", true, "tls_ca"},
		{"CA file without PEM", "tls_ca=" + notPEM, true, "tls_ca"},
		{"empty CA", "tls_ca=", true, "tls_ca"},
		{"certificate without key", "tls_cert=" + crt, true, "tls_cert"},
		{"key without certificate", "tls_key=" + key, true, "tls_key"},
		{"missing key file", "tls_cert=" + crt + "&tls_key=/nonexistent/k.pem", true, "tls_key"},
		{"key and certificate swapped", "tls_cert=" + key + "&tls_key=" + crt, true, "tls_cert"},
		{"insecure with a CA", "tls_insecure=1&tls_ca=" + ca.caFile(), true, "tls_insecure"},
		{"insecure with a server name", "tls_insecure=1&tls_server_name=x", true, "tls_insecure"},
		{"insecure not a bool", "tls_insecure=maybe", true, "tls_insecure"},
		{"alias not a bool", "skip_verify=maybe", true, "skip_verify"},
		{"a name and its alias", "tls_ca=" + ca.caFile() + "&cacertfile=" + ca.caFile(), true, "cacertfile"},
		{"given twice", "tls_ca=a&tls_ca=b", true, "tls_ca"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			u, _ := url.Parse("amqps://127.0.0.1/?" + tc.query)
			cfg, err := parseTLS(u, tc.secure, aliases)
			var be *transport.BadURLError
			if !errors.As(err, &be) || be.Param != tc.param || !errors.Is(err, transport.ErrBadURL) {
				t.Fatalf("ParseTLS = %v, %v; want a BadURLError naming %q", cfg, err, tc.param)
			}
			if be.Scheme != "amqps" {
				t.Errorf("error names scheme %q, want amqps", be.Scheme)
			}
		})
	}

	parse := func(raw string, secure bool) *tls.Config {
		t.Helper()
		u, _ := url.Parse(raw)
		cfg, err := parseTLS(u, secure, aliases)
		if err != nil {
			t.Fatalf("ParseTLS(%s): %v", raw, err)
		}
		return cfg
	}
	if cfg := parse("amqp://127.0.0.1/", false); cfg != nil {
		t.Errorf("a plain URL got a TLS configuration: %+v", cfg)
	}
	cfg := parse("amqps://127.0.0.1/", true)
	if cfg == nil || cfg.MinVersion != tls.VersionTLS12 || cfg.RootCAs != nil || cfg.InsecureSkipVerify || len(cfg.Certificates) != 0 {
		t.Errorf("amqps:// with no parameter: %+v; want TLS 1.2+, the system's roots", cfg)
	}
	cfg = parse("amqps://127.0.0.1/?tls_ca="+ca.caFile()+"&tls_cert="+crt+"&tls_key="+key+"&tls_server_name=broker.example", true)
	if cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.ServerName != "broker.example" {
		t.Errorf("every parameter: %+v", cfg)
	}
	if cfg := parse("amqps://127.0.0.1/?cacertfile="+ca.caFile(), true); cfg.RootCAs == nil {
		t.Error("the alias cacertfile did not set the roots")
	}
	if cfg := parse("amqps://127.0.0.1/?skip_verify=true", true); !cfg.InsecureSkipVerify {
		t.Error("the alias skip_verify did not turn verification off")
	}
	if cfg := parse("amqps://127.0.0.1/?tls_insecure=0", true); cfg.InsecureSkipVerify {
		t.Error("tls_insecure=0 turned verification off")
	}

	// the same configuration from code
	cfg, err := transport.TLSOptions{CAFile: ca.caFile(), CertFile: crt, KeyFile: key}.Config()
	if err != nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
		t.Errorf("TLSOptions.Config: %+v, %v", cfg, err)
	}
}

func TestWarnInsecureTLS(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	transport.WarnInsecureTLS(l, "kafka", "kafka://127.0.0.1:9094", &tls.Config{})
	transport.WarnInsecureTLS(l, "kafka", "kafka://127.0.0.1:9094", nil)
	if buf.Len() != 0 {
		t.Fatalf("a verifying configuration logged: %s", buf.String())
	}
	transport.WarnInsecureTLS(l, "kafka", "kafka://127.0.0.1:9094", &tls.Config{InsecureSkipVerify: true})
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "level=WARN") ||
		!strings.Contains(got, "verification is off") || !strings.Contains(got, "addr=kafka://127.0.0.1:9094") {
		t.Errorf("warning = %q", got)
	}
}

func TestRedactKeepsKeyFilePaths(t *testing.T) {
	got := transport.Redact("kafka://u:pw@127.0.0.1:9094?tls=1&tls_key=/etc/bq/client.key&token=abc&sasl=scram-sha-512")
	if !strings.Contains(got, "tls_key=%2Fetc%2Fbq%2Fclient.key") || !strings.Contains(got, "sasl=scram-sha-512") ||
		strings.Contains(got, "pw@") || strings.Contains(got, "abc") {
		t.Errorf("Redact = %q: want the key file's path and the SASL mechanism kept, the password and token hidden", got)
	}
}

// TestClientCertWatch: a TLS 1.3 broker that asks for a client certificate and then
// drops the connection (as one refusing the certificate may, before the client reads
// its alert) is named as a certificate refusal; one that did not ask is not.
func TestClientCertWatch(t *testing.T) {
	ca := newCA(t, "ca")
	now := time.Now()
	server, _, _ := ca.leaf(t, "server", []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour))
	_, crt, key := ca.leaf(t, "client", nil, now.Add(-time.Hour), now.Add(time.Hour))
	for _, ask := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		auth := tls.NoClientCert
		if ask {
			auth = tls.RequestClientCert
		}
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{server}, ClientAuth: auth})
			_ = tc.Handshake()
			_ = c.(*net.TCPConn).SetLinger(0) // a reset, no alert
			_ = c.Close()
		}()
		cfg, err := transport.TLSOptions{CAFile: ca.caFile(), CertFile: crt, KeyFile: key, ServerName: "127.0.0.1"}.Config()
		if err != nil {
			t.Fatal(err)
		}
		cfg, watch := transport.WatchClientCert(cfg)
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			t.Fatalf("ask=%v: handshake: %v", ask, err)
		}
		time.Sleep(100 * time.Millisecond) // the server has dropped it
		_, err = c.Read(make([]byte, 1))
		_ = c.Close()
		if err == nil {
			t.Fatalf("ask=%v: read succeeded", ask)
		}
		oe := transport.OpenFailed("amqp", "amqps://127.0.0.1", watch.Explain(err))
		if got := errors.Is(oe, transport.ErrTLS); got != ask {
			t.Errorf("ask=%v: %v matches ErrTLS: %v", ask, oe, got)
		}
		if ask && !strings.Contains(oe.Error(), "after asking for a client certificate") {
			t.Errorf("error %q does not name the refused certificate", oe)
		}
		// A client that closed the connection under its own writer after the alert.
		closed := &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}
		if got := errors.Is(transport.OpenFailed("amqp", "amqps://127.0.0.1", watch.Explain(closed)), transport.ErrTLS); got != ask {
			t.Errorf("ask=%v: a write on the closed connection matches ErrTLS: %v", ask, got)
		}
	}
	if c, w := transport.WatchClientCert(nil); c != nil || w != nil || w.Explain(io.EOF) != io.EOF {
		t.Error("a nil configuration is not left alone")
	}
}

// TestTLSTestPKI: the negative server certificates of scripts/certs.sh fail as they
// should: the expired one as expired, the one for wrong.invalid on the host name.
func TestTLSTestPKI(t *testing.T) {
	for _, tc := range []struct{ name, says string }{
		{"server-expired", "has expired"},
		{"server-wronghost", "not valid for the host name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := tls.LoadX509KeyPair(transporttest.TLSFile(t, tc.name+".crt"), transporttest.TLSFile(t, tc.name+".key"))
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, pair, nil)
			_, port, _ := net.SplitHostPort(addr)
			raw := "rediss://127.0.0.1:" + port + "/0?tls_ca=" + url.QueryEscape(transporttest.TLSFile(t, "ca.crt"))
			err = roundTrip(t, raw, addr)
			if err == nil {
				t.Fatal("exchange succeeded")
			}
			if msg := transport.OpenFailed("redis", raw, err).Error(); !strings.Contains(msg, tc.says) {
				t.Errorf("error %q does not say %q", msg, tc.says)
			}
		})
	}
}

// parseTLS reads u's TLS parameters as every driver does (driverkit.Query.TLS).
func parseTLS(u *url.URL, secure bool, aliases map[string]string) (*tls.Config, error) {
	q, err := driverkit.ParseQuery(u.Scheme, u)
	if err != nil {
		return nil, err
	}
	return q.TLS(secure, aliases)
}
