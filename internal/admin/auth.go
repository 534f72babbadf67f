package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/store"
)

// role is what a caller may do; a higher role includes the lower ones.
type role int

const (
	roleOpen    role = iota // no token needed (admin.open)
	roleRead                // config.AdminRoleRead
	roleOperate             // config.AdminRoleOperate
)

// routeRoles is the role each route of New needs; docs/operations.md
// carries the same table. A route missing here needs operate (see
// required): a route added later is closed until someone decides.
// TestEveryRouteHasARole keeps the two in step with the mux.
func routeRoles() map[string]role {
	return map[string]role{
		"GET /health":  roleRead,
		"GET /ready":   roleRead,
		"GET /metrics": roleRead,
		"GET /v1/wal":  roleRead,
		// Secrets are redacted, so read.
		"GET /v1/config": roleRead,
		// ?body=1 needs operate (required): bodies are the providers' data.
		"GET /v1/hooks/{id}":                     roleRead,
		"GET /v1/hooks":                          roleRead,
		"POST /v1/hooks/{id}/resend":             roleOperate,
		"GET /v1/audit":                          roleRead,
		"GET /v1/dlq":                            roleRead,
		"GET /v1/replays":                        roleRead,
		"GET /v1/replays/{id}":                   roleRead,
		"POST /v1/replays":                       roleOperate,
		"PATCH /v1/replays/{id}":                 roleOperate,
		"GET /v1/quarantine":                     roleRead, // ids, sizes and reasons; no bodies
		"DELETE /v1/quarantine":                  roleOperate,
		"GET /v1/rate-limits":                    roleRead,
		"GET /v1/tenants/{tenant}/rate-limit":    roleRead,
		"PUT /v1/tenants/{tenant}/rate-limit":    roleOperate,
		"DELETE /v1/tenants/{tenant}/rate-limit": roleOperate,
		// Source blocks are shown with secrets redacted.
		"GET /v1/tenants/{tenant}/sources":           roleRead,
		"GET /v1/tenants/{tenant}/sources/{name}":    roleRead,
		"POST /v1/tenants/{tenant}/sources":          roleOperate,
		"PUT /v1/tenants/{tenant}/sources/{name}":    roleOperate,
		"DELETE /v1/tenants/{tenant}/sources/{name}": roleOperate,
		// The console's charts; its page and login are consoleOpenRoutes.
		"GET /v1/console/summary": roleRead,
	}
}

// openNames maps admin.open names to their routes.
func openNames() map[string]string {
	return map[string]string{"health": "GET /health", "ready": "GET /ready", "metrics": "GET /metrics"}
}

// Error codes of authentication.
const (
	errUnauthorized = "unauthorized"
	errForbidden    = "forbidden"
	// errCSRF: a change carried by a console session cookie without the
	// session's X-CSRF-Token.
	errCSRF = "csrf_token"
)

// anonymous is the actor of every call when no tokens are configured
// (allowed only on a loopback admin.ip: config refuses the rest).
const anonymous = "anonymous"

type credential struct {
	name   string
	digest [sha256.Size]byte
	role   role
}

// access decides who a request is and whether it may run, and writes the
// audit row of every call that may change state.
type access struct {
	creds []credential
	open  map[string]bool // route patterns served without a token
	roles map[string]role
	st    *store.Store
	now   func() time.Time
	api   *api
	// sess holds the console's logins (session.go); a request without an
	// Authorization header may authenticate with its cookie.
	sess *sessions
}

func newAccess(a *api) *access {
	c := a.d.Config.Admin
	ac := &access{open: map[string]bool{}, roles: routeRoles(), st: a.d.Store, now: a.d.Now, api: a, sess: newSessions(a.d.Now)}
	names := openNames()
	for _, o := range c.Open {
		ac.open[names[o]] = true
	}
	for _, t := range c.Tokens {
		cr := credential{name: t.Name, role: roleRead}
		if t.Role == config.AdminRoleOperate {
			cr.role = roleOperate
		}
		if t.Token != "" {
			cr.digest = sha256.Sum256([]byte(t.Token))
		} else {
			// Validated: 64 hex digits.
			b, _ := hex.DecodeString(t.TokenSHA256)
			copy(cr.digest[:], b)
		}
		ac.creds = append(ac.creds, cr)
	}
	return ac
}

// required is the role r needs. Unmatched requests (the mux answers 404 or
// 405) need read, so the route list is not disclosed to strangers.
func (ac *access) required(pattern string, r *http.Request) role {
	if pattern == "" {
		return roleRead
	}
	if ac.open[pattern] || consoleOpenRoutes()[pattern] {
		return roleOpen
	}
	need, ok := ac.roles[pattern]
	if !ok {
		return roleOperate
	}
	if pattern == "GET /v1/hooks/{id}" && wantsBody(r) {
		return roleOperate
	}
	return need
}

func wantsBody(r *http.Request) bool {
	q := r.URL.Query().Get("body")
	return q == "1" || q == "true"
}

// authenticate returns the credential the request's bearer token matches.
// Every configured digest is compared, in constant time, whatever matched
// earlier: the time taken tells nothing about which token, or how much of
// one, was right. Hashing first gives both sides a fixed length, so the
// token's length does not leak either.
func (ac *access) authenticate(r *http.Request) (credential, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return credential{}, false
	}
	return ac.check(tok)
}

// check returns the credential tok is (see authenticate for the timing).
func (ac *access) check(tok string) (credential, bool) {
	d := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := -1
	for i := range ac.creds {
		if subtle.ConstantTimeCompare(d[:], ac.creds[i].digest[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return credential{}, false
	}
	return ac.creds[match], true
}

type actorKey struct{}

// wrap authenticates, authorises and audits every request before next.
func (ac *access) wrap(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		need := ac.required(pattern, r)
		if need == roleOpen {
			next.ServeHTTP(w, r)
			return
		}
		// A browser says where a request came from. A change another site
		// made this browser send is refused whoever it would act as: with
		// no tokens (loopback) nothing else stops a page on the web from
		// posting a replay or a source to 127.0.0.1 (a text/plain POST
		// needs no CORS preflight). Scripts send no Sec-Fetch-Site.
		if mutating(r.Method) {
			if s := r.Header.Get("Sec-Fetch-Site"); s == "cross-site" || s == "same-site" {
				writeJSON(w, http.StatusForbidden, errorBody(errCSRF))
				return
			}
		}
		actor := anonymous
		if len(ac.creds) > 0 {
			cr, ok := ac.authenticate(r)
			if !ok && r.Header.Get("Authorization") == "" {
				// The console: a session cookie instead of a bearer token,
				// and for a change the session's CSRF token as well.
				if sess, found := ac.sess.lookup(r); found {
					if mutating(r.Method) && !sess.csrfOK(r) {
						writeJSON(w, http.StatusForbidden, errorBody(errCSRF))
						return
					}
					cr, ok = sess.cred, true
				}
			}
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ankusa"`)
				writeJSON(w, http.StatusUnauthorized, errorBody(errUnauthorized))
				return
			}
			if cr.role < need {
				writeJSON(w, http.StatusForbidden, errorBody(errForbidden))
				return
			}
			actor = cr.name
		}
		r = r.WithContext(context.WithValue(r.Context(), actorKey{}, actor))
		if pattern == "" || !mutating(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		ac.audited(w, r, pattern, actor, next)
	})
}

func mutating(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// audited writes the audit row of a mutating call, durably, before the
// call runs: if the row cannot be written the call is refused (503), so
// nothing changes without a trace. The answer's status is added after.
func (ac *access) audited(w http.ResponseWriter, r *http.Request, pattern, actor string, next http.Handler) {
	e := &store.AuditEntry{
		At: ac.now(), Actor: actor, Action: pattern, Method: r.Method,
		Path: r.URL.Path, Remote: r.RemoteAddr,
	}
	if q := r.URL.Query(); len(q) > 0 {
		// The filters of a purge or a delete are part of what was done.
		// Query values are operator input, not secrets; "token" (the
		// console's login) is dropped all the same.
		qs := map[string]any{}
		for k, v := range q {
			if k != "token" {
				qs[k] = slices.Clone(v)
			}
		}
		e.Detail = map[string]any{"query": qs}
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		if e.Detail == nil {
			e.Detail = map[string]any{}
		}
		e.Detail["client_cert"] = r.TLS.PeerCertificates[0].Subject.String()
	}
	if err := ac.st.AppendAudit(e); err != nil {
		ac.api.unavailable(w, err)
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	next.ServeHTTP(sw, r)
	e.Status = sw.status
	if err := ac.st.FinishAudit(e); err != nil {
		ac.api.log.Warn("audit: recording the outcome failed; the row keeps status 0", "action", e.Action, "err", err)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(p)
}
