package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/admin"
	"github.com/ankusa/ankusa/internal/app/apptest"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/sources"
	"github.com/ankusa/ankusa/internal/sources/sourcestest"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	srcSecret      = "It's a Secret to Everybody"
	srcOtherSecret = "another secret entirely"
)

// srcAPI is the operator API's source routes over one sourcestest.Env.
type srcAPI struct {
	e *sourcestest.Env
	h http.Handler
}

func newSrcAPI(t *testing.T, o sourcestest.Options) *srcAPI {
	t.Helper()
	e := apptest.SourcesEnv(t, o)
	a := &srcAPI{e: e}
	a.mount(t)
	return a
}

// mount routes to the Env's current Manager (call again after a restart).
func (a *srcAPI) mount(t *testing.T) {
	mux := http.NewServeMux()
	admin.SourceRoutes(mux, a.e.Manager, testutil.Logger(t))
	a.h = mux
}

func (a *srcAPI) call(t *testing.T, method, path, body string) response {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	a.h.ServeHTTP(rec, req)
	res := response{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	if err := json.Unmarshal(rec.Body.Bytes(), &res.body); err != nil {
		t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, res.raw, err)
	}
	return res
}

func (a *srcAPI) want(t *testing.T, r response, status int, code string) {
	t.Helper()
	wantJSON(t, r, status)
	if code != "" {
		wantField(t, r.body, "error", code)
	}
}

// githubSource is a github-verified source with one log sink.
func githubSource(name, secret string) string {
	return `{"name":"` + name + `","verify":{"type":"github","secret":["` + secret + `"]},` +
		`"dedupe":{"preset":"github"},"sinks":[{"id":"log","type":"log"}]}`
}

func (a *srcAPI) hook(t *testing.T, path, secret, body string) sourcestest.Reply {
	t.Helper()
	return a.e.Post(t, path, []byte(body), map[string]string{
		"X-Hub-Signature-256": sourcestest.GitHubSignature(secret, []byte(body)),
	})
}

func TestSources_CreateAnswersNextRequestAndDelivers(t *testing.T) {
	a := newSrcAPI(t, sourcestest.Options{Dispatch: true})

	if r := a.hook(t, "/webhooks/acme.orders", srcSecret, `{}`); r.Status != http.StatusNotFound {
		t.Fatalf("before create: status %d, want 404", r.Status)
	}

	r := a.call(t, "POST", "/v1/tenants/acme/sources", githubSource("orders", srcSecret))
	a.want(t, r, http.StatusCreated, "")
	wantField(t, r.body, "id", "acme.orders")
	wantField(t, r.body, "tenant", "acme")
	wantField(t, r.body, "name", "orders")
	wantField(t, r.body, "catch_url", "/webhooks/acme.orders")
	wantField(t, r.body, "config.tenant", "acme")
	wantField(t, r.body, "config.verify.type", "github")
	wantField(t, r.body, "config.dedupe.ttl_seconds", float64(259_200)) // defaulted
	if got := field(t, r.body, "config.verify.secret").([]any); len(got) != 1 || got[0] != "[REDACTED]" {
		t.Errorf("config.verify.secret = %v, want [[REDACTED]]", got)
	}
	if strings.Contains(r.raw, srcSecret) {
		t.Errorf("the create answer shows the secret: %s", r.raw)
	}
	if loc := r.header.Get("Location"); loc != "/v1/tenants/acme/sources/orders" {
		t.Errorf("Location = %q", loc)
	}

	// No restart: the very next request is answered, and delivered.
	body := `{"action":"opened"}`
	h := a.e.Post(t, "/webhooks/acme.orders", []byte(body), map[string]string{
		"X-Hub-Signature-256": sourcestest.GitHubSignature(srcSecret, []byte(body)),
		"X-GitHub-Delivery":   "delivery-1",
	})
	if h.Status != http.StatusCreated {
		t.Fatalf("hook: status %d (%s), want 201", h.Status, h.Raw)
	}
	d := a.e.Sinks.Delivered(t)
	if d.SinkID != "log" || d.Msg.Source != "acme.orders" || d.Msg.Tenant != "acme" || string(d.Msg.Body) != body {
		t.Errorf("delivered %q to %s as %s/%s, want the hook to log as acme/acme.orders", d.Msg.Body, d.SinkID, d.Msg.Tenant, d.Msg.Source)
	}
	if d.Msg.DedupeKey != "delivery-1" {
		t.Errorf("dedupe key = %q, want the github preset's delivery-1", d.Msg.DedupeKey)
	}
	if r := a.hook(t, "/webhooks/acme.orders", srcOtherSecret, body); r.Status != http.StatusUnauthorized {
		t.Errorf("wrong signature: status %d, want 401", r.Status)
	}

	// Read back: listed, secret write-only.
	l := a.call(t, "GET", "/v1/tenants/acme/sources", "")
	a.want(t, l, http.StatusOK, "")
	list := field(t, l.body, "sources").([]any)
	if len(list) != 1 {
		t.Fatalf("list = %v, want one source", list)
	}
	first := list[0].(map[string]any)
	wantField(t, first, "id", "acme.orders")
	if got := field(t, first, "config.verify.secret").([]any); got[0] != "[REDACTED]" {
		t.Errorf("listed secret = %v, want [REDACTED]", got)
	}
	if strings.Contains(l.raw, srcSecret) {
		t.Errorf("the list shows the secret: %s", l.raw)
	}
	g := a.call(t, "GET", "/v1/tenants/acme/sources/orders", "")
	a.want(t, g, http.StatusOK, "")
	wantField(t, g.body, "catch_url", "/webhooks/acme.orders")
	if other := a.call(t, "GET", "/v1/tenants/other/sources", ""); len(field(t, other.body, "sources").([]any)) != 0 {
		t.Errorf("another tenant lists %s", other.raw)
	}

	// Same name again.
	a.want(t, a.call(t, "POST", "/v1/tenants/acme/sources", githubSource("orders", srcOtherSecret)), http.StatusConflict, "source_exists")
	// The same name under another tenant is another source.
	a.want(t, a.call(t, "POST", "/v1/tenants/globex/sources", githubSource("orders", srcOtherSecret)), http.StatusCreated, "")
	if r := a.hook(t, "/webhooks/globex.orders", srcOtherSecret, `{}`); r.Status != http.StatusCreated {
		t.Errorf("globex.orders: status %d, want 201", r.Status)
	}
}

func TestSources_Invalid(t *testing.T) {
	a := newSrcAPI(t, sourcestest.Options{})
	cases := []struct {
		name, path, body string
		wantMsg          string
	}{
		{"bad whsec sink secret", "/v1/tenants/acme/sources",
			`{"name":"bad","sinks":[{"type":"http","http":{"url":"https://example.com/in","secret":"whsec_not*base64"}}]}`,
			"sources.acme.bad.sinks[0].http.secret: must be whsec_ followed by standard base64"},
		{"bad whsec verify secret", "/v1/tenants/acme/sources",
			`{"name":"bad","verify":{"type":"standard_webhooks","secret":["whsec_%%%"]},"sinks":[{"type":"log"}]}`,
			"sources.acme.bad.verify.secret[0]"},
		{"no sinks", "/v1/tenants/acme/sources", `{"name":"bad"}`,
			"sources.acme.bad.sinks: at least one sink is required"},
		{"unknown key", "/v1/tenants/acme/sources", `{"name":"bad","sinks":[{"type":"log"}],"colour":"red"}`,
			`unknown field "colour"`},
		{"unknown nested key", "/v1/tenants/acme/sources", `{"name":"bad","verify":{"type":"none","secrets":["x"]},"sinks":[{"type":"log"}]}`,
			`unknown field "secrets"`},
		{"trailing data", "/v1/tenants/acme/sources", `{"name":"bad","sinks":[{"type":"log"}]} {}`,
			"unexpected data"},
		{"no name", "/v1/tenants/acme/sources", `{"sinks":[{"type":"log"}]}`, "name: required"},
		{"bad name", "/v1/tenants/acme/sources", `{"name":"a.b","sinks":[{"type":"log"}]}`, "name must match"},
		{"bad tenant", "/v1/tenants/ac%20me/sources", `{"name":"ok","sinks":[{"type":"log"}]}`, "tenant must match"},
		{"other tenant in body", "/v1/tenants/acme/sources", `{"name":"ok","tenant":"globex","sinks":[{"type":"log"}]}`,
			`sources.acme.ok.tenant: must be empty or "acme"`},
		{"redacted value", "/v1/tenants/acme/sources", `{"name":"ok","verify":{"type":"github","secret":["[REDACTED]"]},"sinks":[{"type":"log"}]}`,
			`sources.acme.ok.verify.secret[0]: "[REDACTED]" is how a secret is shown`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.call(t, "POST", c.path, c.body)
			a.want(t, r, http.StatusBadRequest, "invalid_source")
			if msg, _ := r.body["message"].(string); !strings.Contains(msg, c.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", msg, c.wantMsg)
			}
		})
	}
	if n := a.e.Count(t, store.PrefixSource); n != 0 {
		t.Errorf("%d sources stored after refusals, want 0", n)
	}
	if a.e.Sinks.Built() != 0 {
		t.Errorf("%d sinks built for refused sources", a.e.Sinks.Built())
	}

	a.want(t, a.call(t, "GET", "/v1/tenants/acme/sources/nope", ""), http.StatusNotFound, "source_not_found")
	a.want(t, a.call(t, "PUT", "/v1/tenants/acme/sources/nope", `{"sinks":[{"type":"log"}]}`), http.StatusNotFound, "source_not_found")
	a.want(t, a.call(t, "DELETE", "/v1/tenants/acme/sources/nope", ""), http.StatusNotFound, "source_not_found")
	a.want(t, a.call(t, "DELETE", "/v1/tenants/acme/sources/nope?deliveries=drop", ""), http.StatusBadRequest, "invalid_deliveries")

	// A sink the builder refuses is a 400 too, and leaves nothing behind.
	a.e.Sinks.FailBuild(errBuild)
	r := a.call(t, "POST", "/v1/tenants/acme/sources", githubSource("orders", srcSecret))
	a.want(t, r, http.StatusBadRequest, "invalid_source")
	if msg, _ := r.body["message"].(string); !strings.Contains(msg, "sink log: "+errBuild.Error()) {
		t.Errorf("message = %q", msg)
	}
	a.e.Sinks.FailBuild(nil)
	if n := a.e.Count(t, store.PrefixSource); n != 0 {
		t.Errorf("%d sources stored after a failed build, want 0", n)
	}
	if r := a.hook(t, "/webhooks/acme.orders", srcSecret, `{}`); r.Status != http.StatusNotFound {
		t.Errorf("catch URL after a failed build: status %d, want 404", r.Status)
	}
}

var errBuild = &buildError{}

type buildError struct{}

func (*buildError) Error() string { return "cannot reach the broker" }

func TestSources_UpdateWithoutSecretKeepsIt(t *testing.T) {
	a := newSrcAPI(t, sourcestest.Options{})
	a.want(t, a.call(t, "POST", "/v1/tenants/acme/sources", githubSource("orders", srcSecret)), http.StatusCreated, "")

	// No secret: the stored one stays, and a second sink is added.
	r := a.call(t, "PUT", "/v1/tenants/acme/sources/orders",
		`{"verify":{"type":"github"},"sinks":[{"type":"log"},{"id":"copy","type":"log"}]}`)
	a.want(t, r, http.StatusOK, "")
	if got := field(t, r.body, "config.verify.secret").([]any); len(got) != 1 || got[0] != "[REDACTED]" {
		t.Errorf("config.verify.secret = %v, want the kept secret, redacted", got)
	}
	if _, ok := r.body["config"].(map[string]any)["dedupe"]; ok {
		t.Errorf("dedupe still set after a PUT without it: %s", r.raw)
	}
	if h := a.hook(t, "/webhooks/acme.orders", srcSecret, `{"n":1}`); h.Status != http.StatusCreated {
		t.Fatalf("signed with the original secret after PUT: status %d (%s), want 201", h.Status, h.Raw)
	}
	// The hook has one delivery row per sink of the updated source.
	if n := a.e.Count(t, store.PrefixDelivery); n != 2 {
		t.Errorf("%d delivery rows, want 2 (log and copy)", n)
	}
	if h := a.hook(t, "/webhooks/acme.orders", srcOtherSecret, `{"n":2}`); h.Status != http.StatusUnauthorized {
		t.Errorf("wrong secret: status %d, want 401", h.Status)
	}

	// A view sent back as is keeps the secret too.
	g := a.call(t, "GET", "/v1/tenants/acme/sources/orders", "")
	back, _ := json.Marshal(g.body["config"])
	a.want(t, a.call(t, "PUT", "/v1/tenants/acme/sources/orders", string(back)), http.StatusOK, "")
	if h := a.hook(t, "/webhooks/acme.orders", srcSecret, `{"n":3}`); h.Status != http.StatusCreated {
		t.Errorf("after a GET/PUT round trip: status %d, want 201", h.Status)
	}

	// A new secret replaces it.
	a.want(t, a.call(t, "PUT", "/v1/tenants/acme/sources/orders",
		`{"name":"orders","verify":{"type":"github","secret":["`+srcOtherSecret+`"]},"sinks":[{"type":"log"}]}`), http.StatusOK, "")
	if h := a.hook(t, "/webhooks/acme.orders", srcSecret, `{"n":4}`); h.Status != http.StatusUnauthorized {
		t.Errorf("old secret after rotation: status %d, want 401", h.Status)
	}
	if h := a.hook(t, "/webhooks/acme.orders", srcOtherSecret, `{"n":5}`); h.Status != http.StatusCreated {
		t.Errorf("new secret: status %d, want 201", h.Status)
	}

	// Validation applies to updates: a rename and a broken block are refused
	// and change nothing.
	a.want(t, a.call(t, "PUT", "/v1/tenants/acme/sources/orders", `{"name":"other","sinks":[{"type":"log"}]}`), http.StatusBadRequest, "invalid_source")
	bad := a.call(t, "PUT", "/v1/tenants/acme/sources/orders", `{"verify":{"type":"github"},"sinks":[{"type":"smoke"}]}`)
	a.want(t, bad, http.StatusBadRequest, "invalid_source")
	if msg, _ := bad.body["message"].(string); !strings.Contains(msg, "sources.acme.orders.sinks[0].type") {
		t.Errorf("message = %q", msg)
	}
	if h := a.hook(t, "/webhooks/acme.orders", srcOtherSecret, `{"n":6}`); h.Status != http.StatusCreated {
		t.Errorf("after refused PUTs: status %d, want 201", h.Status)
	}
}

func TestSources_DeleteWithPendingDeliveries(t *testing.T) {
	// Dispatch is not running: committed hooks stay due.
	a := newSrcAPI(t, sourcestest.Options{})
	a.want(t, a.call(t, "POST", "/v1/tenants/acme/sources",
		`{"name":"orders","sinks":[{"type":"log"},{"id":"copy","type":"log"}]}`), http.StatusCreated, "")
	for _, b := range []string{`{"n":1}`, `{"n":2}`} {
		if h := a.e.Post(t, "/webhooks/acme.orders", []byte(b), nil); h.Status != http.StatusCreated {
			t.Fatalf("hook: status %d (%s)", h.Status, h.Raw)
		}
	}
	const rows = 4 // 2 hooks x 2 sinks

	r := a.call(t, "DELETE", "/v1/tenants/acme/sources/orders", "")
	a.want(t, r, http.StatusConflict, "source_has_deliveries")
	wantField(t, r.body, "due", float64(rows))
	wantField(t, r.body, "inflight", float64(0))
	if h := a.e.Post(t, "/webhooks/acme.orders", []byte(`{"n":3}`), nil); h.Status != http.StatusCreated {
		t.Fatalf("a refused delete must leave the source: status %d", h.Status)
	}

	r = a.call(t, "DELETE", "/v1/tenants/acme/sources/orders?deliveries=dead_letter", "")
	a.want(t, r, http.StatusOK, "")
	wantField(t, r.body, "id", "acme.orders")
	wantField(t, r.body, "dead_lettered", float64(rows+2))

	// Next request: gone.
	if h := a.e.Post(t, "/webhooks/acme.orders", []byte(`{}`), nil); h.Status != http.StatusNotFound {
		t.Errorf("catch URL after delete: status %d, want 404", h.Status)
	}
	a.want(t, a.call(t, "GET", "/v1/tenants/acme/sources/orders", ""), http.StatusNotFound, "source_not_found")

	// The rows are in the dead-letter queue, as /v1/dlq lists them.
	if n := a.e.Count(t, store.PrefixDue); n != 0 {
		t.Errorf("%d due rows left, want 0", n)
	}
	total, entries, err := a.e.Dispatch.DLQ(dispatch.DLQFilter{SourceID: "acme.orders", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if total != rows+2 {
		t.Fatalf("DLQ total = %d, want %d", total, rows+2)
	}
	for _, en := range entries {
		if en.Reason != sources.DeadLetterReason || en.TenantID != "acme" {
			t.Errorf("dead entry %+v, want reason %q for tenant acme", en, sources.DeadLetterReason)
		}
	}
	dead := 0
	err = a.e.Store.Scan([]byte{store.PrefixDelivery}, []byte{store.PrefixDelivery + 1}, func(_, v []byte) bool {
		if dl, err := store.DecodeDelivery(v); err == nil && dl.State == store.StateDead && dl.LastError == sources.DeadLetterReason {
			dead++
		}
		return true
	})
	if err != nil || dead != rows+2 {
		t.Errorf("%d delivery rows marked dead (%v), want %d", dead, err, rows+2)
	}
	if n := a.e.Count(t, store.PrefixSource); n != 0 {
		t.Errorf("%d stored sources after delete, want 0", n)
	}
	if a.e.Sinks.Closed() != 2 {
		t.Errorf("%d sinks closed, want 2", a.e.Sinks.Closed())
	}

	// A deleted name can be created again.
	a.want(t, a.call(t, "POST", "/v1/tenants/acme/sources", `{"name":"orders","sinks":[{"type":"log"}]}`), http.StatusCreated, "")
	if h := a.e.Post(t, "/webhooks/acme.orders", []byte(`{}`), nil); h.Status != http.StatusCreated {
		t.Errorf("re-created source: status %d, want 201", h.Status)
	}
}

func TestSources_DeleteWithoutDeliveries(t *testing.T) {
	a := newSrcAPI(t, sourcestest.Options{})
	a.want(t, a.call(t, "POST", "/v1/tenants/acme/sources", `{"name":"orders","sinks":[{"type":"log"}]}`), http.StatusCreated, "")
	r := a.call(t, "DELETE", "/v1/tenants/acme/sources/orders", "")
	a.want(t, r, http.StatusOK, "")
	wantField(t, r.body, "dead_lettered", float64(0))
	if h := a.e.Post(t, "/webhooks/acme.orders", []byte(`{}`), nil); h.Status != http.StatusNotFound {
		t.Errorf("catch URL after delete: status %d, want 404", h.Status)
	}
	a.want(t, a.call(t, "DELETE", "/v1/tenants/acme/sources/orders", ""), http.StatusNotFound, "source_not_found")
}

func TestSources_DeleteRefusedWhileInflight(t *testing.T) {
	a := newSrcAPI(t, sourcestest.Options{Dispatch: true})
	a.want(t, a.call(t, "POST", "/v1/tenants/acme/sources", `{"name":"orders","sinks":[{"type":"log"}]}`), http.StatusCreated, "")
	a.e.Sinks.Block()
	h := a.e.Post(t, "/webhooks/acme.orders", []byte(`{}`), nil)
	if h.Status != http.StatusCreated {
		t.Fatalf("hook: status %d", h.Status)
	}
	a.e.Sinks.Started(t) // claimed: the delivery is inflight

	// The hook's view says so (the claim is the dispatcher's, in memory:
	// the row is due in the store).
	ops := &srcAPI{e: a.e, h: admin.New(admin.Deps{Config: &config.Config{}, Store: a.e.Store, Queue: a.e.Queue,
		Dispatch: a.e.Dispatch, Logger: testutil.Logger(t)})}
	g := ops.call(t, "GET", fmt.Sprintf("/v1/hooks/%v", h.Body["id"]), "")
	a.want(t, g, http.StatusOK, "")
	if ds, _ := g.body["deliveries"].([]any); len(ds) != 1 || ds[0].(map[string]any)["state"] != "inflight" {
		t.Errorf("deliveries while the attempt runs: %s, want one inflight", g.raw)
	}
	r := a.call(t, "DELETE", "/v1/tenants/acme/sources/orders?deliveries=dead_letter", "")
	a.want(t, r, http.StatusConflict, "source_has_deliveries")
	wantField(t, r.body, "inflight", float64(1))
	wantField(t, r.body, "due", float64(0)) // in flight, not also due
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After on a refusal that a retry resolves")
	}
	if h := a.e.Post(t, "/webhooks/acme.orders", []byte(`{}`), nil); h.Status != http.StatusCreated {
		t.Errorf("after the refused delete: status %d, want 201", h.Status)
	}
	a.e.Sinks.Unblock()
	a.e.Sinks.Delivered(t)
}

func TestSources_RestartRestores(t *testing.T) {
	a := newSrcAPI(t, sourcestest.Options{Dispatch: true})
	a.want(t, a.call(t, "POST", "/v1/tenants/acme/sources", githubSource("orders", srcSecret)), http.StatusCreated, "")
	a.want(t, a.call(t, "POST", "/v1/tenants/globex/sources", `{"name":"billing","sinks":[{"type":"log"}]}`), http.StatusCreated, "")
	a.want(t, a.call(t, "POST", "/v1/tenants/globex/sources", `{"name":"gone","sinks":[{"type":"log"}]}`), http.StatusCreated, "")
	a.want(t, a.call(t, "DELETE", "/v1/tenants/globex/sources/gone", ""), http.StatusOK, "")

	a.e.Restart(t)
	a.mount(t)

	l := a.call(t, "GET", "/v1/tenants/globex/sources", "")
	if list := field(t, l.body, "sources").([]any); len(list) != 1 || list[0].(map[string]any)["id"] != "globex.billing" {
		t.Errorf("globex after restart: %s", l.raw)
	}
	body := `{"after":"restart"}`
	if h := a.hook(t, "/webhooks/acme.orders", srcSecret, body); h.Status != http.StatusCreated {
		t.Fatalf("restored source: status %d (%s), want 201", h.Status, h.Raw)
	}
	if d := a.e.Sinks.Delivered(t); string(d.Msg.Body) != body || d.Msg.Source != "acme.orders" {
		t.Errorf("delivered %q from %s", d.Msg.Body, d.Msg.Source)
	}
	if h := a.hook(t, "/webhooks/acme.orders", srcOtherSecret, body); h.Status != http.StatusUnauthorized {
		t.Errorf("restored verifier accepts a wrong signature: %d", h.Status)
	}
	if h := a.e.Post(t, "/webhooks/globex.gone", []byte(`{}`), nil); h.Status != http.StatusNotFound {
		t.Errorf("deleted source after restart: status %d, want 404", h.Status)
	}
}

func TestSources_TenantPathRouting(t *testing.T) {
	a := newSrcAPI(t, sourcestest.Options{Routing: "tenant_path"})
	r := a.call(t, "POST", "/v1/tenants/acme/sources", `{"name":"orders","sinks":[{"type":"log"}]}`)
	a.want(t, r, http.StatusCreated, "")
	wantField(t, r.body, "catch_url", "/webhooks/acme/acme.orders")
	if h := a.e.Post(t, "/webhooks/acme/acme.orders", []byte(`{}`), nil); h.Status != http.StatusCreated {
		t.Errorf("own tenant: status %d, want 201", h.Status)
	}
	if h := a.e.Post(t, "/webhooks/globex/acme.orders", []byte(`{}`), nil); h.Status != http.StatusNotFound {
		t.Errorf("another tenant's URL: status %d, want 404", h.Status)
	}
}
