package driverkit

import (
	"net"
	"net/url"
	"strings"

	"github.com/babelqueue-go/babelqueue/transport"
)

// ParseURL parses raw, the URL a driver's Open takes as text, into a *url.URL; one that
// does not parse is a [*transport.BadURLError] of scheme that never echoes a secret.
func ParseURL(scheme, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, &transport.BadURLError{Scheme: scheme, Param: "url", Reason: "cannot parse (" + transport.Redact(raw) + ")"}
	}
	return u, nil
}

// CheckHTTPURL returns why raw is not an http(s) URL with a host and no credentials
// (an endpoint, an admin API), or "" when it is one.
func CheckHTTPURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return "empty"
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http:// or https:// URL"
	case u.User != nil:
		return "must not hold credentials"
	case u.Host == "":
		return "has no host"
	}
	return ""
}

// IsLoopback reports whether raw is a URL of a host on this machine (localhost, a
// *.localhost name, a loopback address).
func IsLoopback(raw string) bool {
	u, err := url.Parse(raw)
	if raw == "" || err != nil {
		return false
	}
	h := strings.ToLower(u.Hostname())
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// URLPart refuses one part of a driver's URL that its scheme does not take: Part is
// "opaque", "user", "port", "path" (any but "" and "/") or "fragment"; Param names it in
// the error and Reason says what to do instead.
type URLPart struct{ Part, Param, Reason string }

// RefuseParts returns the *[transport.BadURLError] of scheme for the first of parts that
// u has, or nil.
func RefuseParts(scheme string, u *url.URL, parts ...URLPart) error {
	for _, p := range parts {
		var has bool
		switch p.Part {
		case "opaque":
			has = u.Opaque != ""
		case "user":
			has = u.User != nil
		case "port":
			has = u.Port() != ""
		case "path":
			has = u.Path != "" && u.Path != "/"
		case "fragment":
			has = u.Fragment != ""
		}
		if has {
			return &transport.BadURLError{Scheme: scheme, Param: p.Param, Reason: p.Reason}
		}
	}
	return nil
}
