package console

import (
	"bytes"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/transport"
)

//go:embed assets
var assets embed.FS

var templates = parseTemplates()

func parseTemplates() map[string]*template.Template {
	funcs := template.FuncMap{
		"count": func(n int64) string {
			if n == transport.UnknownCount {
				return "—"
			}
			return group3(n)
		},
		"num":  func(n int) string { return group3(int64(n)) },
		"ago":  func(ms int64) string { return ago(ms) },
		"when": when,
		"age": func(s *float64) string {
			if s == nil {
				return "—"
			}
			return age(*s)
		},
		"rate": func(r *float64) string {
			if r == nil {
				return "—"
			}
			return fmt.Sprintf("%+.1f/s", *r)
		},
	}
	out := map[string]*template.Template{}
	for _, p := range []string{"overview", "dlq", "message", "tail", "search", "login"} {
		out[p] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+p+".html"))
	}
	return out
}

// age writes a number of seconds as the Go duration it is, to the second (to the
// millisecond below a second).
func age(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// group3 writes n with a thin space between groups of three digits.
func group3(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString(",")
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func ago(ms int64) string {
	if ms == 0 {
		return "—"
	}
	d := time.Since(time.UnixMilli(ms))
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
}

func when(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// layout is what every page shows around its content.
type layout struct {
	Page      string
	Title     string
	User      string
	CSRF      string
	ReadOnly  bool
	CanLogout bool
	Search    string
	Brokers   []navBroker
}

type navBroker struct {
	ID   int
	Name string
}

func (c *Console) layout(r *http.Request, page, title string) layout {
	rq := requestOf(r)
	l := layout{Page: page, Title: title, User: rq.user, ReadOnly: c.o.readOnly, CanLogout: c.o.token != "" && rq.s != nil && rq.s.authed}
	if rq.s != nil {
		l.CSRF = rq.s.csrf
	}
	for _, b := range c.brokers {
		l.Brokers = append(l.Brokers, navBroker{ID: b.id, Name: b.name})
	}
	return l
}

// page adapts a page handler: it renders the template it names with the data it
// returns. An error with data renders the page (which says what went wrong) with
// the error's status; an error alone is a plain error answer.
func (c *Console) page(f func(http.ResponseWriter, *http.Request) (string, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, data, err := f(w, r)
		status := http.StatusOK
		switch {
		case err != nil && data == nil:
			writeError(w, r, err)
			return
		case err != nil:
			status = statusOf(err) // the page says what went wrong
		case name == "":
			return // answered (a redirect)
		}
		var buf bytes.Buffer
		if err := templates[name].Execute(&buf, data); err != nil {
			c.o.log.Error("console: rendering a page failed", "page", name, "err", err)
			http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		_, _ = buf.WriteTo(w)
	}
}

type overviewData struct {
	layout
	Status   []brokerStatus
	Interval int64
}

func (c *Console) overviewPage(_ http.ResponseWriter, r *http.Request) (string, any, error) {
	return "overview", overviewData{layout: c.layout(r, "overview", "Brokers and queues"), Status: c.overview(), Interval: c.o.sample.Milliseconds()}, nil
}

// dlqQuery is the state of a dead-letter page: its queue, filter and page.
type dlqQuery struct {
	b    int
	q    string
	f    filter
	page int
}

func readDLQQuery(r *http.Request) dlqQuery {
	v := r.URL.Query()
	dq := dlqQuery{q: v.Get("q")}
	dq.b, _ = strconv.Atoi(v.Get("b"))
	dq.page, _ = strconv.Atoi(v.Get("page"))
	for d, p := range dimParams {
		if vals, ok := v[p]; ok && len(vals) > 0 {
			dq.f.set[d], dq.f.vals[d] = true, vals[0]
		}
	}
	return dq
}

// url renders the query with one dimension set (or removed) and the page reset.
func (dq dlqQuery) url(path string, dim int, val *string, page int) string {
	v := url.Values{}
	v.Set("b", strconv.Itoa(dq.b))
	v.Set("q", dq.q)
	for d := range numDims {
		switch {
		case d == dim && val != nil:
			v.Set(dimParams[d], *val)
		case d == dim:
		case dq.f.set[d]:
			v.Set(dimParams[d], dq.f.vals[d])
		}
	}
	if page > 1 {
		v.Set("page", strconv.Itoa(page))
	}
	return path + "?" + v.Encode()
}

type groupTable struct {
	Param string
	Title string
	Rows  []groupRow
	More  int
}

type groupRow struct {
	Key     string `json:"key"`
	Label   string `json:"label"`
	Count   int    `json:"count"`
	Total   int    `json:"-"`
	Example string `json:"example,omitempty"`
	Oldest  int64  `json:"oldest,omitempty"`
	Newest  int64  `json:"newest,omitempty"`
	URL     string `json:"url"`
	Active  bool   `json:"active,omitempty"`
}

type listRow struct {
	Ref      string `json:"ref"`
	At       string `json:"at"`
	Pos      int    `json:"pos"`
	ID       string `json:"id"`
	Trace    string `json:"trace_id,omitempty"`
	URN      string `json:"urn"`
	Lang     string `json:"lang"`
	Reason   string `json:"reason"`
	Queue    string `json:"original_queue"`
	Err      string `json:"error"`
	FailedAt int64  `json:"failed_at,omitempty"`
	Poison   bool   `json:"poison,omitempty"`
	Size     int    `json:"size"`
	URL      string `json:"url"`
}

type activeFilter struct {
	Title, Value, RemoveURL string
}

type dlqData struct {
	layout
	BrokerID   int
	Broker     string
	Queue      string
	Work       string
	Ready      bool
	Building   bool
	Read       int64
	Err        string
	Version    int64
	Built      int64
	Took       string
	Truncated  bool
	MaxIndexed int
	Depth      int64
	Filters    []activeFilter
	ClearURL   string
	FilterJSON string
	Groups     []groupTable
	Total      int
	Matching   int
	Poison     int
	Rows       []listRow
	PageN      int
	Pages      int
	PrevURL    string
	NextURL    string
	Targets    []string
}

// maxGroupRows bounds the rows a group table shows.
const maxGroupRows = 12

// dlqOf returns the broker and dead-letter queue of a request's b and q.
func (c *Console) dlqOf(r *http.Request) (*brokerState, string, queueRole, error) {
	b, q, role, err := c.queue(r)
	if err == nil && !role.dlq {
		err = &requestError{status: http.StatusNotFound, msg: fmt.Sprintf("%q is not a dead-letter queue the console knows on %s", q, b.name)}
	}
	return b, q, role, err
}

func (c *Console) dlqData(r *http.Request) (dlqData, error) {
	b, q, role, err := c.dlqOf(r)
	if err != nil {
		return dlqData{}, err
	}
	dq := readDLQQuery(r)
	d := dlqData{layout: c.layout(r, "dlq", "Dead letters of "+role.work), BrokerID: b.id, Broker: b.name, Queue: q, Work: role.work,
		MaxIndexed: c.o.maxIndexed, Depth: transport.UnknownCount}
	b.mu.Lock()
	if ss := b.samples[q].list(); len(ss) > 0 {
		d.Depth = ss[len(ss)-1].Ready
	}
	b.mu.Unlock()
	for _, wq := range b.queues {
		d.Targets = append(d.Targets, wq.Name)
	}
	fm := map[string]string{}
	for dim := range numDims {
		if dq.f.set[dim] {
			fm[dimParams[dim]] = dq.f.vals[dim]
			d.Filters = append(d.Filters, activeFilter{Title: dimTitles[dim], Value: labelOf(dim, dq.f.vals[dim]), RemoveURL: dq.url("/dlq", dim, nil, 1)})
		}
	}
	fj, _ := json.Marshal(fm)
	d.FilterJSON = string(fj)
	d.ClearURL = dlqQuery{b: dq.b, q: dq.q}.url("/dlq", -1, nil, 1)

	st := c.indexOf(b, q).current()
	d.Building, d.Read = st.building, st.read
	if st.err != nil {
		d.Err = fmt.Sprintf("reading the queue failed %s: %v", ago(st.errAt.UnixMilli()), st.err)
	}
	if st.snap == nil {
		return d, nil
	}
	s := st.snap
	d.Ready, d.Version, d.Built, d.Took, d.Truncated = true, s.version, s.built.UnixMilli(), s.took.Round(time.Millisecond).String(), s.truncated
	v := s.view(dq.f, dq.page)
	d.Total, d.Matching, d.Poison, d.PageN, d.Pages = v.total, v.matching, v.poison, v.page, v.pages
	for dim := range numDims {
		gt := groupTable{Param: dimParams[dim], Title: dimTitles[dim]}
		for i, g := range v.groups[dim] {
			if i == maxGroupRows {
				gt.More = len(v.groups[dim]) - i
				break
			}
			key := g.Key
			example := g.Example
			if example == g.Key {
				example = ""
			}
			gt.Rows = append(gt.Rows, groupRow{Key: g.Key, Label: labelOf(dim, g.Key), Count: g.Count, Total: v.matching, Example: example,
				Oldest: g.Oldest, Newest: g.Newest, URL: dq.url("/dlq", dim, &key, 1), Active: dq.f.set[dim] && dq.f.vals[dim] == g.Key})
		}
		d.Groups = append(d.Groups, gt)
	}
	for _, e := range v.entries {
		d.Rows = append(d.Rows, c.listRow(b, q, e))
	}
	if v.page > 1 {
		d.PrevURL = dq.url("/dlq", -1, nil, v.page-1)
	}
	if v.page < v.pages {
		d.NextURL = dq.url("/dlq", -1, nil, v.page+1)
	}
	return d, nil
}

func (c *Console) listRow(b *brokerState, q string, e entry) listRow {
	lr := listRow{Ref: e.ref, At: string(e.page), Pos: int(e.pos), ID: e.id, Trace: e.trace, URN: e.vals[dimURN], Lang: e.vals[dimLang],
		Reason: e.vals[dimReason], Queue: e.vals[dimQueue], Err: clip(e.errText, 160), FailedAt: e.failedAt, Poison: e.poison, Size: e.size}
	lr.URL = messageURL(b.id, q, e.ref, e.page, int(e.pos))
	return lr
}

func messageURL(b int, q, ref string, at transport.Cursor, pos int) string {
	v := url.Values{}
	v.Set("b", strconv.Itoa(b))
	v.Set("q", q)
	v.Set("ref", ref)
	if at != "" {
		v.Set("at", string(at))
	}
	v.Set("pos", strconv.Itoa(pos))
	return "/message?" + v.Encode()
}

// labelOf names an empty group.
func labelOf(dim int, key string) string {
	if key != "" {
		return key
	}
	switch dim {
	case dimReason:
		return "(no dead_letter block)"
	case dimURN, dimLang:
		return "(poison: not an envelope)"
	case dimFingerprint:
		return "(no error text)"
	default:
		return "(not said)"
	}
}

func (c *Console) dlqPage(_ http.ResponseWriter, r *http.Request) (string, any, error) {
	d, err := c.dlqData(r)
	return "dlq", d, err
}

// dlqAPI is the dead-letter page as JSON; with wait=1 it waits for the first read
// of the queue, with refresh=1 it reads the queue again and waits for that read,
// with status=1 it says only how the read of the queue stands.
func (c *Console) dlqAPI(w http.ResponseWriter, r *http.Request) error {
	if r.URL.Query().Get("status") == "1" {
		b, q, _, err := c.dlqOf(r)
		if err != nil {
			return err
		}
		st := c.indexOf(b, q).current()
		out := map[string]any{"ready": st.snap != nil, "building": st.building, "read": st.read}
		if st.snap != nil {
			out["version"], out["total"] = st.snap.version, len(st.snap.entries)
		}
		if st.err != nil {
			out["error"] = st.err.Error()
		}
		return writeJSON(w, http.StatusOK, out)
	}
	if v := r.URL.Query(); v.Get("wait") == "1" || v.Get("refresh") == "1" {
		b, q, _, err := c.dlqOf(r)
		if err != nil {
			return err
		}
		ctx, cancel := contextTimeout(r, 2*time.Minute)
		defer cancel()
		ix := c.indexOf(b, q)
		if v.Get("refresh") == "1" {
			asked := time.Now()
			if err := ix.waitFor(ctx, ix.refresh()); err != nil {
				return err
			}
			if st := ix.current(); st.err != nil && st.errAt.After(asked) {
				return st.err // the read asked for failed: the index is the one before
			}
		}
		if _, err := ix.ready(ctx); err != nil {
			return err
		}
	}
	d, err := c.dlqData(r)
	if err != nil {
		return err
	}
	groups := map[string]any{}
	for _, g := range d.Groups {
		groups[g.Param] = map[string]any{"rows": g.Rows, "more": g.More}
	}
	rows := d.Rows
	if rows == nil {
		rows = []listRow{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"broker": d.Broker, "queue": d.Queue, "ready": d.Ready, "building": d.Building, "read": d.Read, "error": d.Err,
		"version": d.Version, "built": d.Built, "took": d.Took, "truncated": d.Truncated, "depth": d.Depth,
		"total": d.Total, "matching": d.Matching, "poison": d.Poison, "groups": groups, "rows": rows,
		"page": d.PageN, "pages": d.Pages,
	})
}

// messageView is one message, taken apart.
type messageView struct {
	Ref            string            `json:"ref"`
	ID             string            `json:"id,omitempty"`
	URN            string            `json:"urn,omitempty"`
	Trace          string            `json:"trace_id,omitempty"`
	Lang           string            `json:"lang,omitempty"`
	Reason         string            `json:"reason,omitempty"`
	Error          string            `json:"error,omitempty"`
	Fingerprint    string            `json:"fingerprint,omitempty"`
	OriginalQueue  string            `json:"original_queue,omitempty"`
	FailedAt       int64             `json:"failed_at,omitempty"`
	Attempts       int               `json:"attempts"`
	Poison         bool              `json:"poison"`
	Wrapped        bool              `json:"wrapped"`
	Envelope       string            `json:"envelope,omitempty"`
	DeadLetter     string            `json:"dead_letter,omitempty"`
	Raw            string            `json:"raw"`
	RawIsText      bool              `json:"raw_is_text"`
	Size           int               `json:"size"`
	Original       string            `json:"original,omitempty"`
	KeyNil         bool              `json:"key_nil"`
	Key            string            `json:"key"`
	KeyIsText      bool              `json:"key_is_text"`
	Headers        map[string]string `json:"headers"`
	HeaderNames    []string          `json:"-"`
	Redeliveries   int               `json:"redeliveries"`
	AttemptsHeader *int              `json:"attempts_header,omitempty"`
}

func viewMessage(d *transport.Delivery) messageView {
	e := dlq.Read(d)
	m := messageView{Ref: ref(d), ID: e.ID(), URN: e.URN(), Trace: e.TraceID(), Lang: e.Lang(), Reason: e.Reason(), Error: e.Error(),
		Fingerprint: e.Fingerprint(), OriginalQueue: e.OriginalQueue(), Poison: e.Poison, Wrapped: e.Wrapped, Size: len(d.Body),
		Headers: d.Headers, Redeliveries: d.Redeliveries, KeyNil: d.Key == nil}
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	for k := range m.Headers {
		m.HeaderNames = append(m.HeaderNames, k)
	}
	sort.Strings(m.HeaderNames)
	if at := e.FailedAt(); !at.IsZero() {
		m.FailedAt = at.UnixMilli()
	}
	if e.Envelope != nil {
		m.Attempts = e.Envelope.Attempts
	}
	if d.HasAttemptsHeader {
		n := d.AttemptsHeader
		m.AttemptsHeader = &n
	}
	m.Raw, m.RawIsText = showBytes(d.Body)
	var pretty bytes.Buffer
	if json.Indent(&pretty, d.Body, "", "  ") == nil {
		m.Envelope = pretty.String()
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(d.Body, &obj) == nil && obj["dead_letter"] != nil {
		pretty.Reset()
		if json.Indent(&pretty, obj["dead_letter"], "", "  ") == nil {
			m.DeadLetter = pretty.String()
		}
	}
	if e.Original != nil && !bytes.Equal(e.Original, d.Body) && e.Poison {
		m.Original, _ = showBytes(e.Original)
	}
	m.Key, m.KeyIsText = showBytes(d.Key)
	return m
}

// showBytes returns b as text when it is printable UTF-8, else as a hex dump.
func showBytes(b []byte) (string, bool) {
	if utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\r' && r != '\t' }) {
		return string(b), true
	}
	return hex.Dump(b), false
}

type messageData struct {
	layout
	BrokerID int
	Broker   string
	Queue    string
	IsDLQ    bool
	Work     string
	Targets  []string
	Err      string
	Msg      *messageView
}

func (c *Console) message(r *http.Request) (*brokerState, string, queueRole, messageView, error) {
	b, q, role, err := c.queue(r)
	if err != nil {
		return nil, "", role, messageView{}, err
	}
	if !role.dlq && b.leavesMarks() {
		return nil, "", role, messageView{}, &requestError{status: http.StatusForbidden, msg: b.marksWarning()}
	}
	v := r.URL.Query()
	id := v.Get("ref")
	if id == "" {
		return nil, "", role, messageView{}, &requestError{status: http.StatusBadRequest, msg: "which message? (ref)"}
	}
	pos, err := strconv.Atoi(v.Get("pos"))
	if err != nil {
		pos = -1
	}
	ctx, cancel := contextTimeout(r, time.Minute)
	defer cancel()
	d, err := c.locate(ctx, b, q, id, transport.Cursor(v.Get("at")), pos)
	if err != nil {
		if err == errNotFound {
			return b, q, role, messageView{}, &requestError{status: http.StatusNotFound, msg: err.Error()}
		}
		return b, q, role, messageView{}, err
	}
	return b, q, role, viewMessage(d), nil
}

func (c *Console) messagePage(_ http.ResponseWriter, r *http.Request) (string, any, error) {
	b, q, role, m, err := c.message(r)
	if b == nil {
		return "", nil, err
	}
	d := messageData{layout: c.layout(r, "message", "Message on "+q), BrokerID: b.id, Broker: b.name, Queue: q, IsDLQ: role.dlq, Work: role.work}
	for _, wq := range b.queues {
		d.Targets = append(d.Targets, wq.Name)
	}
	if err != nil {
		d.Err = err.Error()
		return "message", d, err
	}
	d.Msg = &m
	if m.ID != "" {
		d.Title = m.ID
	}
	return "message", d, nil
}

func (c *Console) messageAPI(w http.ResponseWriter, r *http.Request) error {
	_, _, _, m, err := c.message(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, m)
}

type tailData struct {
	layout
	BrokerID int
	Broker   string
	Queue    string
	IsDLQ    bool
}

func (c *Console) tailPage(_ http.ResponseWriter, r *http.Request) (string, any, error) {
	b, q, role, err := c.queue(r)
	if err != nil {
		return "", nil, err
	}
	if !role.dlq && b.leavesMarks() {
		return "", nil, &requestError{status: http.StatusForbidden, msg: b.marksWarning() + "; tail its dead-letter queue instead"}
	}
	return "tail", tailData{layout: c.layout(r, "tail", "Live tail of "+q), BrokerID: b.id, Broker: b.name, Queue: q, IsDLQ: role.dlq}, nil
}

type loginData struct {
	layout
	Next  string
	Error string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) (string, any, error) {
	if c.o.token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return "", nil, nil
	}
	return "login", loginData{layout: c.layout(r, "login", "Log in"), Next: safeNext(r.URL.Query().Get("next"))}, nil
}

func (c *Console) loginPost(w http.ResponseWriter, r *http.Request) (string, any, error) {
	if c.o.token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return "", nil, nil
	}
	rq := requestOf(r)
	user := strings.TrimSpace(r.PostFormValue("user"))
	next := safeNext(r.PostFormValue("next"))
	if user == "" || len(user) > 64 {
		return "login", loginData{layout: c.layout(r, "login", "Log in"), Next: next, Error: "Say who you are (up to 64 characters): the audit log records it."}, nil
	}
	if _, ok := c.auth.login(w, r, rq.s, user, r.PostFormValue("token")); !ok {
		c.o.log.Warn("console: login refused", "user", user, "remote", r.RemoteAddr)
		time.Sleep(500 * time.Millisecond) // a guess costs time
		return "login", loginData{layout: c.layout(r, "login", "Log in"), Next: next, Error: "Wrong token."}, nil
	}
	c.o.log.Info("console: login", "user", user, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
	return "", nil, nil
}

func (c *Console) logoutPost(w http.ResponseWriter, r *http.Request) (string, any, error) {
	rq := requestOf(r)
	c.auth.logout(w, r, rq.s)
	c.o.log.Info("console: logout", "user", rq.user, "remote", r.RemoteAddr)
	target := "/login"
	if c.o.token == "" {
		target = "/"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
	return "", nil, nil
}

// safeNext keeps a redirect after login on the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}
