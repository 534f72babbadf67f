package admin

import (
	"embed"
	"io/fs"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ankusa/ankusa/internal/store"
)

// The web console (GET / on the admin port): static pages embedded in the
// binary that call this same JSON API from the browser, so every change
// they make passes the same role check and lands in the same audit trail
// as a curl would. The only routes of its own are the login (a token
// traded for a session cookie, session.go) and a metrics summary for the
// overview's charts.
//
// console/vendor holds uPlot (charts), vendored from npm; see its README.

//go:embed console
var consoleFiles embed.FS

// consoleOpenRoutes are served without a token whatever admin.open says:
// the page and its assets carry no data, and the login routes are how a
// token is given. docs/operations.md lists them as "open".
func consoleOpenRoutes() map[string]bool {
	return map[string]bool{
		"GET /{$}":               true,
		"GET /console/{file...}": true,
		"GET /console/session":   true,
		"POST /console/login":    true,
		"POST /console/logout":   true,
	}
}

type consoleAPI struct {
	ac     *access
	reg    *prometheus.Registry
	files  fs.FS
	assets http.Handler
	index  []byte
}

func routeConsole(mux *http.ServeMux, ac *access, reg *prometheus.Registry) {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embed pattern names the directory: cannot happen
	}
	index, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic(err)
	}
	c := &consoleAPI{ac: ac, reg: reg, index: index, files: sub,
		assets: http.StripPrefix("/console/", http.FileServerFS(sub))}
	mux.HandleFunc("GET /{$}", c.page)
	mux.HandleFunc("GET /console/{file...}", c.asset)
	mux.HandleFunc("GET /console/session", c.session)
	mux.HandleFunc("POST /console/login", c.login)
	mux.HandleFunc("POST /console/logout", c.logout)
	if reg != nil {
		mux.HandleFunc("GET /v1/console/summary", c.summary)
	}
}

// secureHeaders keeps the console's pages to their own scripts and out of
// other sites' frames.
func secureHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" on the login form's POST, which sameOrigin refuses.
	h.Set("Referrer-Policy", "same-origin")
}

// page serves the console. GET /?token=T logs in with T and redirects to /
// without it, so the token does not stay in the address bar or history.
func (c *consoleAPI) page(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		c.startSession(w, r, r.URL.Query().Get("token"))
		return
	}
	secureHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(c.index)
}

func (c *consoleAPI) asset(w http.ResponseWriter, r *http.Request) {
	// Files only: no directory listings, and the API's JSON 404 otherwise.
	if st, err := fs.Stat(c.files, r.PathValue("file")); err != nil || st.IsDir() {
		writeJSON(w, http.StatusNotFound, errorBody(errNotFound))
		return
	}
	secureHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-cache")
	c.assets.ServeHTTP(w, r)
}

// login serves the login form's POST (field token).
func (c *consoleAPI) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		// Login CSRF: another site must not log this browser in as it.
		writeJSON(w, http.StatusForbidden, errorBody(errCSRF))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	c.startSession(w, r, r.PostFormValue("token"))
}

// startSession checks tok and, when it is a configured token, sets the
// session cookie; either way it redirects to the console. Logins are
// written to the audit trail (the token's name, never the token).
func (c *consoleAPI) startSession(w http.ResponseWriter, r *http.Request, tok string) {
	if len(c.ac.creds) == 0 {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	cr, ok := c.ac.check(tok)
	e := &store.AuditEntry{At: c.ac.now(), Actor: cr.name, Action: "console.login", Method: r.Method,
		Path: r.URL.Path, Remote: r.RemoteAddr, Status: http.StatusSeeOther}
	if !ok {
		e.Actor, e.Status = anonymous, http.StatusUnauthorized
	}
	if err := c.ac.st.AppendAudit(e); err != nil {
		c.ac.api.unavailable(w, err)
		return
	}
	if !ok {
		http.Redirect(w, r, "/?login=refused", http.StatusSeeOther)
		return
	}
	id, _ := c.ac.sess.create(cr)
	setSessionCookie(w, r, id, int(sessionTTL.Seconds()))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (c *consoleAPI) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeJSON(w, http.StatusForbidden, errorBody(errCSRF))
		return
	}
	c.ac.sess.drop(r)
	setSessionCookie(w, r, "", -1)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// sameOrigin reports whether a form POST came from this console: the
// browser's Sec-Fetch-Site must say same-origin (or none: typed by the
// user), and the Origin header, sent by browsers on every POST, must name
// this host. A request with neither (curl) is not a browser being steered.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// session tells the page who it is: whether a login is needed, the actor,
// the role (the page hides what the role may not do; the API refuses it
// anyway) and the CSRF token to send with every change.
func (c *consoleAPI) session(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"auth_required": len(c.ac.creds) > 0, "authenticated": false,
		"actor": nil, "role": nil, "csrf": ""}
	if len(c.ac.creds) == 0 {
		out["authenticated"], out["actor"], out["role"] = true, anonymous, "operate"
	} else if sess, ok := c.ac.sess.lookup(r); ok {
		role := "read"
		if sess.cred.role >= roleOperate {
			role = "operate"
		}
		out["authenticated"], out["actor"], out["role"], out["csrf"] = true, sess.cred.name, role, sess.csrf
	}
	writeJSON(w, http.StatusOK, out)
}

// summary serves GET /v1/console/summary: the counters and gauges the
// overview charts, read from the same registry /metrics serves. Counters
// are totals since start; the page turns two readings into rates.
func (c *consoleAPI) summary(w http.ResponseWriter, _ *http.Request) {
	mfs, err := c.reg.Gather()
	if err != nil && len(mfs) == 0 {
		c.ac.api.unavailable(w, err)
		return
	}
	ingest := map[string]float64{"accepted": 0, "duplicate": 0, "refused": 0, "rejected": 0}
	deliveries := map[string]float64{"delivered": 0, "retry": 0, "dead": 0}
	gauges := map[string]float64{}
	ack := map[string]any{"count": 0, "sum": 0.0, "buckets": [][2]float64{}}
	for _, mf := range mfs {
		switch name := mf.GetName(); name {
		case "ankusa_ingest_requests_total":
			sumBy(mf, "outcome", ingest)
		case "ankusa_dispatch_deliveries_total":
			sumBy(mf, "result", deliveries)
		case "ankusa_ingest_duration_seconds":
			if len(mf.GetMetric()) == 1 {
				h := mf.GetMetric()[0].GetHistogram()
				bs := [][2]float64{}
				for _, b := range h.GetBucket() {
					bs = append(bs, [2]float64{b.GetUpperBound(), float64(b.GetCumulativeCount())})
				}
				ack = map[string]any{"count": h.GetSampleCount(), "sum": h.GetSampleSum(), "buckets": bs}
			}
		case "ankusa_queue_pending", "ankusa_queue_inflight", "ankusa_queue_dead",
			"ankusa_queue_oldest_due_age_seconds", "ankusa_queue_depth", "ankusa_history_hooks",
			"ankusa_history_bytes", "ankusa_intake_ready", "ankusa_intake_pending_records":
			if len(mf.GetMetric()) == 1 {
				gauges[strings.TrimPrefix(name, "ankusa_")] = value(mf.GetMetric()[0])
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"at": c.ac.now().UTC().Format("2006-01-02T15:04:05.000Z07:00"), "ingest": ingest,
		"ack_seconds": ack, "deliveries": deliveries, "gauges": gauges,
	})
}

// sumBy adds every series of mf into out under its label's value; values
// out does not name already are left out (the label sets are closed).
func sumBy(mf *dto.MetricFamily, label string, out map[string]float64) {
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				if _, known := out[lp.GetValue()]; known {
					out[lp.GetValue()] += value(m)
				}
			}
		}
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
