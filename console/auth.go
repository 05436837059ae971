package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// cookieName is the console's session cookie.
const cookieName = "bq_console"

// csrfHeader carries the session's CSRF token on the requests the pages' script
// makes; forms carry it in the csrf field.
const csrfHeader = "X-CSRF-Token"

// sessionIdle is how long a session lives without a request.
const sessionIdle = 12 * time.Hour

// maxSessions bounds the sessions kept; the least recently used go first.
const maxSessions = 10_000

// session is one browser's: its CSRF token and, once logged in, who it is.
type session struct {
	id     string
	csrf   string
	user   string // set at login (token mode)
	authed bool
	seen   time.Time
}

type authenticator struct {
	o        *options
	mu       sync.Mutex
	sessions map[string]*session
}

func newAuthenticator(o *options) *authenticator {
	return &authenticator{o: o, sessions: map[string]*session{}}
}

// enabled reports whether a login is required.
func (a *authenticator) enabled() bool { return a.o.token != "" || a.o.basicUser != "" }

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return short)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// session returns the request's session, making a new one (and setting its cookie)
// when it has none that is alive.
func (a *authenticator) session(w http.ResponseWriter, r *http.Request) *session {
	now := time.Now()
	if ck, err := r.Cookie(cookieName); err == nil {
		a.mu.Lock()
		s := a.sessions[ck.Value]
		if s != nil && now.Sub(s.seen) < sessionIdle {
			s.seen = now
			a.mu.Unlock()
			return s
		}
		delete(a.sessions, ck.Value)
		a.mu.Unlock()
	}
	return a.newSession(w, r)
}

func (a *authenticator) newSession(w http.ResponseWriter, r *http.Request) *session {
	s := &session{id: randomToken(), csrf: randomToken(), seen: time.Now()}
	a.mu.Lock()
	if len(a.sessions) >= maxSessions {
		a.evictLocked()
	}
	a.sessions[s.id] = s
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: s.id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	return s
}

// evictLocked drops the sessions that expired and, if that is not enough, the
// least recently used tenth.
func (a *authenticator) evictLocked() {
	now := time.Now()
	for id, s := range a.sessions {
		if now.Sub(s.seen) >= sessionIdle {
			delete(a.sessions, id)
		}
	}
	if len(a.sessions) < maxSessions {
		return
	}
	all := make([]*session, 0, len(a.sessions))
	for _, s := range a.sessions {
		all = append(all, s)
	}
	oldest := now
	for _, s := range all {
		if s.seen.Before(oldest) {
			oldest = s.seen
		}
	}
	cut := oldest.Add(now.Sub(oldest) / 10)
	for _, s := range all {
		if !s.seen.After(cut) {
			delete(a.sessions, s.id)
		}
	}
}

// login checks a token login and, when it holds, replaces the session by a new,
// logged-in one (a session id known before the login is worth nothing after it).
func (a *authenticator) login(w http.ResponseWriter, r *http.Request, old *session, user, token string) (*session, bool) {
	if a.o.token == "" || !equal(token, a.o.token) {
		return nil, false
	}
	a.mu.Lock()
	delete(a.sessions, old.id)
	a.mu.Unlock()
	s := a.newSession(w, r)
	a.mu.Lock()
	s.user, s.authed = user, true
	a.mu.Unlock()
	return s, true
}

func (a *authenticator) logout(w http.ResponseWriter, r *http.Request, s *session) {
	a.mu.Lock()
	delete(a.sessions, s.id)
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// user returns who makes the request, and whether they may see the console.
func (a *authenticator) user(r *http.Request, s *session) (string, bool) {
	switch {
	case a.o.basicUser != "":
		u, p, ok := r.BasicAuth()
		if !ok || !equal(u, a.o.basicUser) || !equal(p, a.o.basicPass) {
			return "", false
		}
		return u, true
	case a.o.token != "":
		a.mu.Lock()
		defer a.mu.Unlock()
		return s.user, s.authed
	default:
		return "local", true
	}
}

// equal compares two secrets in constant time (their hashes, so that the length
// of the secret does not show either).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// csrfOK reports whether a state-changing request carries the session's token.
func csrfOK(r *http.Request, s *session) bool {
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostFormValue("csrf")
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}

// loopbackRemote reports whether the request comes from a loopback address.
func loopbackRemote(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether the request is addressed to a loopback name: a
// console without a login answers no other, so that a page of another site cannot
// reach it through a name of its own that it points at 127.0.0.1.
func loopbackHost(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
