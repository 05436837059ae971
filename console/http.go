package console

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// request is what the console knows of a request once it is let in.
type request struct {
	s    *session
	user string
}

type requestKey struct{}

func requestOf(r *http.Request) request {
	rq, _ := r.Context().Value(requestKey{}).(request)
	return rq
}

// routes builds the mux and the chain in front of it: security headers, the
// loopback rule, cross-origin protection, the session, the login, the CSRF check.
func (c *Console) routes() {
	mux := http.NewServeMux()
	c.mux = mux
	static, _ := fs.Sub(assets, "assets/static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.Handle("GET /static/", cacheFor(time.Hour, files))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/static/favicon.svg"
		files.ServeHTTP(w, r2)
	})

	mux.HandleFunc("GET /{$}", c.page(c.overviewPage))
	mux.HandleFunc("GET /dlq", c.page(c.dlqPage))
	mux.HandleFunc("GET /message", c.page(c.messagePage))
	mux.HandleFunc("GET /tail", c.page(c.tailPage))
	mux.HandleFunc("GET /search", c.page(c.searchPage))
	mux.HandleFunc("GET /login", c.page(c.loginPage))
	mux.HandleFunc("POST /login", c.page(c.loginPost))
	mux.HandleFunc("POST /logout", c.page(c.logoutPost))

	mux.HandleFunc("GET /api/overview", c.api(func(w http.ResponseWriter, r *http.Request) error {
		return writeJSON(w, http.StatusOK, map[string]any{"brokers": c.overview(), "interval_ms": c.o.sample.Milliseconds()})
	}))
	mux.HandleFunc("GET /api/dlq", c.api(c.dlqAPI))
	mux.HandleFunc("GET /api/message", c.api(c.messageAPI))
	mux.HandleFunc("GET /api/search", c.api(c.searchAPI))
	mux.HandleFunc("GET /api/tail", c.api(c.tailAPI))
	mux.HandleFunc("POST /api/redrive", c.api(func(w http.ResponseWriter, r *http.Request) error {
		if c.o.readOnly {
			return &requestError{status: http.StatusForbidden, msg: "this console is read-only"}
		}
		rq := requestOf(r)
		return c.redrive(w, r, rq.s, rq.user)
	}))
	mux.HandleFunc("POST /api/delete", c.action(c.deleteMessages))
	mux.HandleFunc("POST /api/export", c.action(c.exportMessages))
	mux.HandleFunc("GET /api/jobs/{id}", c.api(func(w http.ResponseWriter, r *http.Request) error {
		jb, ok := c.jobs.get(r.PathValue("id"))
		if !ok {
			return &requestError{status: http.StatusNotFound, msg: "no such job"}
		}
		return writeJSON(w, http.StatusOK, jb)
	}))

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.o.log.Warn("console: cross-origin request refused", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	c.handler = cop.Handler(http.HandlerFunc(c.serve))
}

func cacheFor(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, max-age="+strconv.Itoa(int(d.Seconds())))
		h.ServeHTTP(w, r)
	})
}

// contentSecurityPolicy lets the pages load their own script, style and images
// only: no inline script, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; manifest-src 'self'"

func (c *Console) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !c.auth.enabled() && (!loopbackRemote(r) || !loopbackHost(r)) {
		http.Error(w, "this console has no login, so it answers loopback requests to a loopback address only", http.StatusForbidden)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/static/") || r.URL.Path == "/favicon.ico" {
		c.mux.ServeHTTP(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	s := c.auth.session(w, r)
	user, ok := c.auth.user(r, s)
	api := strings.HasPrefix(r.URL.Path, "/api/")
	if !ok {
		switch {
		case c.o.basicUser != "":
			h.Set("WWW-Authenticate", `Basic realm="babelqueue console", charset="UTF-8"`)
			http.Error(w, "login required", http.StatusUnauthorized)
			return
		case r.URL.Path == "/login":
		case api || r.Method != http.MethodGet:
			writeError(w, r, &requestError{status: http.StatusUnauthorized, msg: "login required"})
			return
		default:
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !csrfOK(r, s) {
		c.o.log.Warn("console: request without its CSRF token refused", "method", r.Method, "path", r.URL.Path, "user", user, "remote", r.RemoteAddr)
		writeError(w, r, &requestError{status: http.StatusForbidden, msg: "missing or wrong CSRF token: reload the page"})
		return
	}
	c.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestKey{}, request{s: s, user: user})))
}

// api adapts a JSON handler: its error is answered as {"error": …} with the
// error's status (502 for a broker's).
func (c *Console) api(f func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := f(w, r); err != nil {
			writeError(w, r, err)
		}
	}
}

func statusOf(err error) int {
	var re *requestError
	switch {
	case errors.As(err, &re):
		return re.status
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	default:
		return http.StatusBadGateway
	}
}

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if strings.HasPrefix(r.URL.Path, "/api/") || r.Method != http.MethodGet {
		_ = writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	http.Error(w, err.Error(), status)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // fails only when the client went away
	return nil
}
