package console

import (
	"crypto/tls"
	"fmt"
)

// WithTLSConfig makes [Console.ListenAndServe] serve HTTPS with c, which must hold the
// server's certificate (Certificates or GetCertificate). The session cookie is then
// marked Secure, so a browser never sends it over plain HTTP. [LoadTLS] builds c from
// PEM files; the command's -tls-cert and -tls-key do the same.
func WithTLSConfig(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// LoadTLS returns the configuration of an HTTPS console from the PEM files of its
// certificate (the chain, leaf first) and private key: TLS 1.2 at least.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("console: the certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, nil
}
