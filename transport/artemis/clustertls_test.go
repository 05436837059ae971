package artemis_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/artemis"
)

// Each node of a secure cluster URL is verified by its own host name: the first node
// (localhost) refuses, the second (127.0.0.1) has a certificate valid for 127.0.0.1
// only, so the handshake holds only if that node is checked against its own name.
func TestClusterTLSVerifiesEachNodeByItsName(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "node2"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	// Node 2: a TLS listener that completes the handshake, then closes (no AMQP).
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	handshakes := make(chan error, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handshakes <- c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	// Node 1: a port nobody listens on.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().(*net.TCPAddr).Port
	_ = closed.Close()

	raw := fmt.Sprintf("artemis+ssl://localhost:%d,%s?tls_ca=%s", refused, ln.Addr(), url.QueryEscape(ca))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = artemis.DialURL(ctx, raw)
	if err == nil {
		t.Fatal("DialURL succeeded against a listener that speaks no AMQP")
	}
	if strings.Contains(err.Error(), "x509") || strings.Contains(err.Error(), "certificate") {
		t.Fatalf("node 2 was not verified by its own name: %v", err)
	}
	select {
	case herr := <-handshakes:
		if herr != nil {
			t.Fatalf("the handshake with node 2 failed: %v", herr)
		}
	case <-ctx.Done():
		t.Fatalf("node 2 was never dialled: %v", err)
	}
}
