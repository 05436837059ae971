package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
)

// The TLS parameters of a broker URL: the same names on every scheme that speaks TLS
// (rediss://, amqps://, kafka://…?tls=1, pulsar+ssl://, artemis+ssl://). Each is
// read by driverkit.Query.TLS; docs/security.md has the table.
const (
	// ParamTLSCA names a PEM file of the certificate authorities that verify the
	// broker's certificate, in place of the system's roots.
	ParamTLSCA = "tls_ca"
	// ParamTLSCert names the PEM file of the client certificate (mutual TLS); it goes
	// with [ParamTLSKey].
	ParamTLSCert = "tls_cert"
	// ParamTLSKey names the PEM file of the client certificate's private key.
	ParamTLSKey = "tls_key"
	// ParamTLSServerName is the name the broker's certificate must be valid for, when
	// it is not the host of the URL (a broker reached through a tunnel or by address).
	ParamTLSServerName = "tls_server_name"
	// ParamTLSInsecure turns certificate verification off (tls_insecure=1): anyone on
	// the path can then read and change the traffic. Opening such a URL logs a
	// warning.
	ParamTLSInsecure = "tls_insecure"
)

// TLSParams lists the TLS parameters, for [CheckParams].
var TLSParams = []string{ParamTLSCA, ParamTLSCert, ParamTLSKey, ParamTLSServerName, ParamTLSInsecure}

// TLSOptions is a TLS client configuration in the terms of the URL parameters. Build
// the *tls.Config of a client you construct yourself (for a driver's New) with
// [TLSOptions.Config]: it is the configuration a URL with the same parameters gets.
type TLSOptions struct {
	CAFile     string // tls_ca: PEM certificate authorities; empty is the system's roots
	CertFile   string // tls_cert: PEM client certificate (mutual TLS)
	KeyFile    string // tls_key: PEM private key of CertFile
	ServerName string // tls_server_name: the name to verify; empty is the host dialled
	Insecure   bool   // tls_insecure: no verification at all (logged at Open)
}

// Config reads the files TLSOptions names and returns the client configuration:
// TLS 1.2 at least, the given roots (or the system's), the client certificate, the
// server name. An unreadable or malformed file is an error naming its parameter.
func (o TLSOptions) Config() (*tls.Config, error) {
	bad := func(param, reason string) error {
		return &BadURLError{Scheme: "tls", Param: param, Reason: reason}
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.Insecure {
		if o.CAFile != "" || o.ServerName != "" {
			other := ParamTLSCA
			if o.CAFile == "" {
				other = ParamTLSServerName
			}
			return nil, bad(ParamTLSInsecure, "turns verification off: it cannot go with "+other)
		}
		c.InsecureSkipVerify = true
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, bad(ParamTLSCA, fileReason(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, bad(ParamTLSCA, fmt.Sprintf("%s holds no PEM certificate", o.CAFile))
		}
		c.RootCAs = pool
	}
	switch {
	case o.CertFile != "" && o.KeyFile == "":
		return nil, bad(ParamTLSCert, "a client certificate needs its private key (tls_key)")
	case o.CertFile == "" && o.KeyFile != "":
		return nil, bad(ParamTLSKey, "a private key needs its client certificate (tls_cert)")
	case o.CertFile != "":
		for param, f := range map[string]string{ParamTLSCert: o.CertFile, ParamTLSKey: o.KeyFile} {
			if _, err := os.Stat(f); err != nil {
				return nil, bad(param, fileReason(err))
			}
		}
		pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			// crypto/tls names what is wrong with the PEM; it never prints key bytes.
			return nil, bad(ParamTLSCert, "cannot load the client certificate and key: "+err.Error())
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

func fileReason(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("cannot read %s: %v", pe.Path, pe.Err)
	}
	return err.Error()
}

// WarnInsecureTLS logs, at Warn, that a transport opened on addr (a redacted address)
// does not verify its broker's certificate, when c turns verification off. Every driver
// calls it when it opens, whether c came from tls_insecure=1 or from code.
func WarnInsecureTLS(l *slog.Logger, broker, addr string, c *tls.Config) {
	if c == nil || !c.InsecureSkipVerify || c.VerifyPeerCertificate != nil || c.VerifyConnection != nil {
		return
	}
	if l == nil {
		l = slog.Default()
	}
	l.Warn(broker+": TLS certificate verification is off (tls_insecure): anyone on the path can read and change this connection",
		"broker", broker, "addr", addr)
}

// ErrTLS matches an [OpenError] whose cause is the TLS handshake: a certificate the
// client refused (unknown authority, wrong host name, expired) or an alert from the
// broker (no client certificate, one it does not trust).
var ErrTLS = errors.New("transport: TLS handshake failed")

// ErrAuth matches an [OpenError] whose cause is the broker refusing the credentials
// or the permissions of the connection's user.
var ErrAuth = errors.New("transport: refused by the broker's authentication or authorisation")

// OpenError is the one error a driver returns when it cannot open, or first use, a
// connection to its broker: the broker, the address with any password redacted, and the
// cause. It matches [ErrTLS] when the cause is a TLS handshake failure and [ErrAuth]
// when the driver marked the cause with [AuthFailure].
type OpenError struct {
	Broker string // "redis", "amqp", "kafka", …
	Addr   string // the redacted URL or address
	Err    error  // the cause
}

// Error names the broker, the address and the cause, with a short reading of a TLS
// failure first.
func (e *OpenError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: cannot connect to %s: ", e.Broker, e.Addr)
	if why := tlsReason(e.Err); why != "" {
		b.WriteString(why)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the cause.
func (e *OpenError) Unwrap() error { return e.Err }

// Is matches ErrTLS by the cause ([ErrAuth] is matched by the cause itself, marked
// with [AuthFailure]).
func (e *OpenError) Is(target error) bool {
	return target == ErrTLS && tlsReason(e.Err) != ""
}

// OpenFailed returns the [OpenError] of broker on addr (already redacted) for err.
func OpenFailed(broker, addr string, err error) error {
	return &OpenError{Broker: broker, Addr: addr, Err: err}
}

type authError struct{ err error }

func (a *authError) Error() string        { return a.err.Error() }
func (a *authError) Unwrap() error        { return a.err }
func (a *authError) Is(target error) bool { return target == ErrAuth }

// AuthFailure marks err, a broker's refusal of the credentials or permissions, so it
// (and an [OpenError] or any error that wraps it) matches [ErrAuth].
func AuthFailure(err error) error {
	if err == nil {
		return nil
	}
	return &authError{err: err}
}

// ClientCertWatch records whether a broker asked for a client certificate in the TLS
// handshakes of one configuration ([WatchClientCert]). Under TLS 1.3 the client's
// handshake ends before the broker has checked the client's certificate; a broker that
// refuses it sends an alert and closes, and a client that writes first often sees only
// the connection reset. The watch lets a driver name that cause.
type ClientCertWatch struct {
	asked atomic.Bool
}

// WatchClientCert returns a copy of c that reports to the returned watch when a broker
// asks for a client certificate; it offers the first certificate of c.Certificates the
// broker accepts, as crypto/tls does by default. A nil c gives nil and a nil watch.
func WatchClientCert(c *tls.Config) (*tls.Config, *ClientCertWatch) {
	if c == nil || c.GetClientCertificate != nil {
		return c, nil
	}
	w := &ClientCertWatch{}
	c = c.Clone()
	certs := c.Certificates
	c.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		w.asked.Store(true)
		for i := range certs {
			if cri.SupportsCertificate(&certs[i]) == nil {
				return &certs[i], nil
			}
		}
		return &tls.Certificate{}, nil // none: the broker decides
	}
	return c, w
}

// Explain returns err marked as a TLS failure when the broker asked for a client
// certificate and then closed the connection (a reset, a broken pipe or an EOF) before
// any other answer; otherwise err unchanged. A client whose reader got the broker's
// alert may close the connection under its own writer first, which then reports only
// "use of closed network connection" (amqp091-go with TLS 1.3): that counts too.
func (w *ClientCertWatch) Explain(err error) error {
	if w == nil || err == nil || !w.asked.Load() || tlsReason(err) != "" {
		return err
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "use of closed network connection") {
		return &certRefused{err: err}
	}
	return err
}

type certRefused struct{ err error }

func (c *certRefused) Error() string { return c.err.Error() }
func (c *certRefused) Unwrap() error { return c.err }

// IsTLSError reports whether err comes from a TLS handshake that failed: a certificate
// the client refused, an alert from the broker, a broker that does not speak TLS.
func IsTLSError(err error) bool { return err != nil && tlsReason(err) != "" }

// tlsReason reads a TLS failure in err's chain in a few words, or "" when there is none.
func tlsReason(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	var op *net.OpError
	var refused *certRefused
	switch {
	case errors.As(err, &refused):
		return "TLS: the broker closed the connection after asking for a client certificate (missing, expired or not trusted?)"
	case errors.As(err, &unknown):
		return "TLS: the broker's certificate is signed by an unknown authority (tls_ca)"
	case errors.As(err, &host):
		return "TLS: the broker's certificate is not valid for the host name (tls_server_name)"
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return "TLS: the broker's certificate has expired or is not yet valid"
		}
		return "TLS: the broker's certificate is invalid"
	case errors.As(err, &verify):
		return "TLS: the broker's certificate was refused"
	case errors.As(err, &rec):
		return "TLS: the broker did not answer in TLS (a plain port?)"
	case errors.As(err, &op) && op.Op == "remote error":
		return "TLS: the broker refused the handshake (client certificate missing, expired or not trusted?)"
	case strings.Contains(err.Error(), "remote error: tls:"):
		// Clients that flatten the chain to text keep the alert's words.
		return "TLS: the broker refused the handshake (client certificate missing, expired or not trusted?)"
	case strings.Contains(err.Error(), "x509: "), strings.Contains(err.Error(), "tls: "):
		return "TLS: the handshake failed"
	}
	return ""
}
