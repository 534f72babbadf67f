package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// consoleReq sends one request to h with the given cookie and headers.
func consoleReq(t *testing.T, h http.Handler, method, path string, body string, cookie *http.Cookie, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var req *http.Request
	if body != "" {
		req = httptest.NewRequest(method, path, strings.NewReader(body))
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func sessionCookie(t *testing.T, rec *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range rec.Result().Cookies() {
		if c.Name == "ankusa_session" {
			return c
		}
	}
	return nil
}

// The console's login: ?token= and the form trade a token for an HttpOnly,
// SameSite=Strict session cookie (not the token, not its digest); the
// cookie authenticates API calls with the token's role; a change carried by
// the cookie needs the session's CSRF token; a bad token sets nothing; a
// login form posted from another origin is refused.
func TestConsoleSession(t *testing.T) {
	e := newAuthEnv(t, true, nil)
	h := e.h

	// The page itself is open: it holds no data.
	if rec := consoleReq(t, h, "GET", "/", "", nil, nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), "Ankusa console") ||
		!strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("GET / = %d %q (CSP %q)", rec.Code, rec.Body.String(), rec.Header().Get("Content-Security-Policy"))
	}
	if rec := consoleReq(t, h, "GET", "/console/vendor/uPlot.iife.min.js", "", nil, nil); rec.Code != 200 || rec.Body.Len() < 10_000 {
		t.Fatalf("uPlot asset = %d, %d bytes", rec.Code, rec.Body.Len())
	}
	if rec := consoleReq(t, h, "GET", "/console/vendor/", "", nil, nil); rec.Code != 404 {
		t.Fatalf("directory listing = %d, want 404", rec.Code)
	}

	// A wrong token: no cookie, back to the login form.
	rec := consoleReq(t, h, "GET", "/?token=nope-nope-nope-nope", "", nil, nil)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/?login=refused" || sessionCookie(t, rec) != nil {
		t.Fatalf("bad ?token= = %d Location %q cookie %v", rec.Code, rec.Header().Get("Location"), sessionCookie(t, rec))
	}

	for _, tc := range []struct {
		name  string
		login func() *httptest.ResponseRecorder
		role  string
	}{
		{"query token, read", func() *httptest.ResponseRecorder {
			return consoleReq(t, h, "GET", "/?token="+readToken, "", nil, nil)
		}, "read"},
		{"login form, operate", func() *httptest.ResponseRecorder {
			return consoleReq(t, h, "POST", "/console/login", url.Values{"token": {operateToken}}.Encode(), nil,
				map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://example.com"})
		}, "operate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.login()
			c := sessionCookie(t, rec)
			if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/" || c == nil {
				t.Fatalf("login = %d Location %q cookie %v", rec.Code, rec.Header().Get("Location"), c)
			}
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
				t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/", c)
			}
			if strings.Contains(c.Value, readToken) || strings.Contains(c.Value, operateToken) || len(c.Value) != 64 {
				t.Errorf("cookie value %q: want a 32-byte random session id, never the token", c.Value)
			}
			rec = consoleReq(t, h, "GET", "/console/session", "", c, nil)
			var s map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
				t.Fatal(err)
			}
			if s["authenticated"] != true || s["role"] != tc.role || len(s["csrf"].(string)) != 64 {
				t.Fatalf("session = %v", s)
			}
			csrf := s["csrf"].(string)
			// The cookie reads like the token would.
			if rec := consoleReq(t, h, "GET", "/v1/quarantine", "", c, nil); rec.Code != 200 {
				t.Fatalf("GET /v1/quarantine with the cookie = %d %s", rec.Code, rec.Body.String())
			}
			// A change without the CSRF token is refused, whatever the role.
			rec = consoleReq(t, h, "DELETE", "/v1/quarantine?all=true", "", c, nil)
			if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `"csrf_token"`) {
				t.Fatalf("DELETE without X-CSRF-Token = %d %s, want 403 csrf_token", rec.Code, rec.Body.String())
			}
			rec = consoleReq(t, h, "DELETE", "/v1/quarantine?all=true", "", c, map[string]string{"X-CSRF-Token": strings.Repeat("0", 64)})
			if rec.Code != http.StatusForbidden {
				t.Fatalf("DELETE with a wrong X-CSRF-Token = %d, want 403", rec.Code)
			}
			// With it, the role decides, as for a bearer token.
			want := map[string]int{"read": http.StatusForbidden, "operate": http.StatusOK}[tc.role]
			rec = consoleReq(t, h, "DELETE", "/v1/quarantine?all=true", "", c, map[string]string{"X-CSRF-Token": csrf})
			if rec.Code != want {
				t.Fatalf("DELETE with X-CSRF-Token as %s = %d %s, want %d", tc.role, rec.Code, rec.Body.String(), want)
			}
			// Logging out ends the session server side.
			consoleReq(t, h, "POST", "/console/logout", "", c, nil)
			if rec := consoleReq(t, h, "GET", "/v1/quarantine", "", c, nil); rec.Code != http.StatusUnauthorized {
				t.Fatalf("after logout the old cookie = %d, want 401", rec.Code)
			}
		})
	}

	// Login CSRF: a form posted from another site is refused.
	rec = consoleReq(t, h, "POST", "/console/login", url.Values{"token": {operateToken}}.Encode(), nil,
		map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"})
	if rec.Code != http.StatusForbidden || sessionCookie(t, rec) != nil {
		t.Fatalf("cross-origin login = %d, cookie %v; want 403 and none", rec.Code, sessionCookie(t, rec))
	}
	// A made-up cookie is nobody.
	if rec := consoleReq(t, h, "GET", "/v1/quarantine", "", &http.Cookie{Name: "ankusa_session", Value: strings.Repeat("a", 64)}, nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("made-up cookie = %d, want 401", rec.Code)
	}
	// Logins are audited under the token's name; the token never appears.
	rec = consoleReq(t, h, "GET", "/v1/audit", "", nil, map[string]string{"Authorization": "Bearer " + operateToken})
	if !strings.Contains(rec.Body.String(), `"console.login"`) || !strings.Contains(rec.Body.String(), `"grafana"`) ||
		strings.Contains(rec.Body.String(), readToken) || strings.Contains(rec.Body.String(), operateToken) {
		t.Fatalf("audit = %s", rec.Body.String())
	}
}

// With no tokens (loopback) the console is open like the API: the session
// says operate as anonymous, and a login sets no cookie.
func TestConsoleSessionNoTokens(t *testing.T) {
	e := newAuthEnv(t, false, nil)
	rec := consoleReq(t, e.h, "GET", "/console/session", "", nil, nil)
	var s map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s["auth_required"] != false || s["authenticated"] != true || s["role"] != "operate" || s["actor"] != "anonymous" {
		t.Fatalf("session = %v", s)
	}
	if rec := consoleReq(t, e.h, "GET", "/?token=whatever", "", nil, nil); sessionCookie(t, rec) != nil {
		t.Fatal("a login without tokens configured set a cookie")
	}
	// Open is not open to other sites: a change a browser was made to send
	// from elsewhere is refused, and nothing is purged.
	for _, site := range []string{"cross-site", "same-site"} {
		rec := consoleReq(t, e.h, "DELETE", "/v1/quarantine?all=true", "", nil, map[string]string{"Sec-Fetch-Site": site})
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `"csrf_token"`) {
			t.Fatalf("DELETE with Sec-Fetch-Site %s = %d %s, want 403 csrf_token", site, rec.Code, rec.Body.String())
		}
	}
	if r := e.get(t, "/v1/quarantine"); field(t, r.body, "total") != 1.0 {
		t.Fatalf("quarantine total = %v after refused purges, want 1", field(t, r.body, "total"))
	}
	if rec := consoleReq(t, e.h, "DELETE", "/v1/quarantine?all=true", "", nil, map[string]string{"Sec-Fetch-Site": "same-origin"}); rec.Code != http.StatusOK {
		t.Fatalf("the console's own DELETE = %d %s, want 200", rec.Code, rec.Body.String())
	}
}

// The overview's summary has every series the page draws, zero before any
// traffic (the values under load are checked by the browser test,
// test/console).
func TestConsoleSummaryShape(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.get(t, "/v1/console/summary")
	wantJSON(t, r, http.StatusOK)
	for _, k := range []string{"ingest.accepted", "ingest.refused", "ingest.rejected", "deliveries.delivered",
		"deliveries.retry", "deliveries.dead", "ack_seconds.count", "gauges.queue_depth"} {
		if v, ok := field(t, r.body, k).(float64); !ok || v != 0 {
			t.Errorf("%s = %v, want 0", k, field(t, r.body, k))
		}
	}
	if b := field(t, r.body, "ack_seconds.buckets").([]any); len(b) < 5 {
		t.Errorf("ack_seconds.buckets = %v, want the histogram's buckets", b)
	}
}
