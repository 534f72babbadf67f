// Package console_test drives the web console in a real browser: headless
// Debian chromium, through chromedp, against a whole instance (app.New) on
// loopback with a real receiver. scripts/test.sh installs chromium.
//
// Screenshots go to $ANKUSA_SCREENSHOTS when set (docs/img is refreshed
// with ANKUSA_SCREENSHOTS=$PWD/docs/img), else to the test's temp dir.
package console_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/app/apptest"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	operateToken = "console-operate-0123456789"
	readToken    = "console-read-0123456789"
	oldSecret    = "old-secret-0123456789"
	newSecret    = "new-secret-9876543210"
	chromiumPath = "/usr/bin/chromium"
	// step bounds one wait in the page; the whole test stays under a minute.
	step = 15 * time.Second
)

// receiver is the http sink's far end: it answers 500 while failing is
// set, and counts the requests of each hook id.
type receiver struct {
	srv     *httptest.Server
	failing atomic.Bool
	mu      sync.Mutex
	calls   map[string]int
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{calls: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rc.mu.Lock()
		rc.calls[r.Header.Get("X-Ankusa-Id")]++
		rc.mu.Unlock()
		if rc.failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) count(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.calls[id]
}

type instance struct {
	*app.Instance
	t     *testing.T
	admin string
}

func start(t *testing.T, rc *receiver) *instance {
	t.Helper()
	cfg := config.Default()
	cfg.Node.Instance = "console"
	cfg.Node.DataDir = t.TempDir()
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	cfg.Retry.BaseMs, cfg.Retry.MaxMs, cfg.Retry.MaxAttempts = 10, 20, 2
	cfg.Dispatch.PollMs = 100
	// The dead letters are made by failing on purpose; a breaker parking
	// the sink for 10 s would only slow the walk down.
	cfg.Dispatch.BreakerFailures = 1000
	cfg.Retention.Delivered = "1h"
	cfg.SourceStore.Type = "persistent"
	cfg.Admin.Tokens = []config.AdminToken{
		{Name: "alice", Token: operateToken, Role: config.AdminRoleOperate},
		{Name: "viewer", Token: readToken, Role: config.AdminRoleRead},
	}
	cfg.Sources = map[string]config.SourceConfig{
		"orders": {
			Verify: config.VerifyConfig{Type: "none"},
			Sinks: []config.SinkConfig{{ID: "receiver", Type: "http",
				HTTP: &config.HTTPSink{URL: rc.srv.URL + "/hooks", TimeoutMs: 5_000}}},
		},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config is invalid: %v", err)
	}
	in := apptest.Start(t, cfg, app.Options{})
	return &instance{Instance: in, t: t, admin: "http://" + in.AdminAddr()}
}

// post sends a hook to path on the ingest port and returns its id.
func (in *instance) post(path, body string, header ...string) string {
	in.t.Helper()
	req, _ := http.NewRequest("POST", "http://"+in.IngestAddr()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out struct {
		ID string `json:"id"`
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	if resp.StatusCode/100 != 2 {
		in.t.Fatalf("POST %s = %d %s", path, resp.StatusCode, raw)
	}
	return out.ID
}

// api calls the operator API with the operate token.
func (in *instance) api(method, path string) map[string]any {
	in.t.Helper()
	req, _ := http.NewRequest(method, in.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+operateToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		in.t.Fatalf("%s %s = %d, not JSON: %s", method, path, resp.StatusCode, raw)
	}
	return out
}

func githubSig(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// browser is one headless chromium with a fresh profile.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("%s not found: the console's browser test needs Debian's chromium (scripts/test.sh runs apt-get install -y chromium)", chromiumPath)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox, // root in a container
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 960),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	shots := os.Getenv("ANKUSA_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, ctx: ctx, shots: shots}
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// wait polls a JavaScript predicate in the page until it holds.
func (b *browser) wait(what, predicate string) {
	b.t.Helper()
	deadline := time.Now().Add(step)
	for {
		ctx, cancel := context.WithDeadline(b.ctx, deadline)
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		cancel()
		// A form's submit loads a new document under the poll: poll again
		// in the new one.
		if err != nil && (strings.Contains(err.Error(), "navigated or closed") || strings.Contains(err.Error(), "Cannot find context")) && time.Now().Before(deadline) {
			continue
		}
		if err != nil {
			b.failed(what, err)
		}
		return
	}
}

// waitText waits until the element sel contains text.
func (b *browser) waitText(sel, text string) {
	b.t.Helper()
	b.wait(fmt.Sprintf("%s to show %q", sel, text),
		fmt.Sprintf(`(document.querySelector(%q)||{textContent:""}).textContent.includes(%q)`, sel, text))
}

// failed ends the test with what the page showed: its text, its address
// and a screenshot (failed.png).
func (b *browser) failed(what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\ntoast: " + document.getElementById("toast").textContent + "\n" + document.body.innerText`))
	if png, serr := chromedp.Run(ctx, chromedp.FullScreenshot(100)); serr == nil {
		_ = os.WriteFile(filepath.Join(b.shots, "failed.png"), png, 0o644)
	}
	b.t.Fatalf("waiting for %s: %v\npage (screenshot failed.png in %s):\n%s", what, err, b.shots, text)
}

func (b *browser) eval(expr string) any {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// clickButton clicks the first button inside scope whose text is label.
func (b *browser) clickButton(scope, label string) {
	b.t.Helper()
	b.wait("button "+label, fmt.Sprintf(`[...document.querySelectorAll(%q)].some(x => x.textContent === %q && !x.disabled)`, scope+" button", label))
	b.eval(fmt.Sprintf(`[...document.querySelectorAll(%q)].find(x => x.textContent === %q).click()`, scope+" button", label))
}

func (b *browser) go_(hash string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`location.hash = %q`, hash))
	page := strings.SplitN(strings.TrimPrefix(hash, "#/"), "/", 2)[0]
	b.wait("page "+page, fmt.Sprintf(`document.body.dataset.page === %q`, page))
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()) // the window (1280x960), not the whole page
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) cookies() []*network.Cookie {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	res, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{})
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return res.Cookies
}

// An operator's walk through every page, as a user would check it: log in
// with the form; the overview counts the hooks posted; a hook appears in
// the list, its detail shows headers, body and attempts, and a resend adds
// an attempt; dead letters are listed and replayed (a slow replay paused,
// resumed and cancelled first); a source is created and its secret changed
// (write-only); a hook quarantined under the old secret is released under
// the new one, another purged; a read token sees no body and cannot resend.
func TestConsole_InABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: runs in make test, not -short")
	}
	began := time.Now()
	rc := newReceiver(t)
	in := start(t, rc)
	b := newBrowser(t)

	// Log in with the form.
	b.do("open the console", chromedp.Navigate(in.admin+"/"))
	b.wait("the login form", `!document.getElementById("login").hidden`)
	b.screenshot("login")
	b.do("log in", chromedp.SendKeys(chromedp.CSS("#token"), operateToken), chromedp.Click(chromedp.CSS("#login-submit")))
	b.wait("the overview", `document.body.dataset.page === "overview" && document.getElementById("who").textContent.includes("alice")`)
	var sess *network.Cookie
	for _, c := range b.cookies() {
		if c.Name == "ankusa_session" {
			sess = c
		}
	}
	if sess == nil || !sess.HTTPOnly || sess.SameSite != network.CookieSameSiteStrict || strings.Contains(sess.Value, operateToken) {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, not the token", sess)
	}
	if got := b.eval(`document.cookie`); got != "" {
		t.Fatalf("document.cookie = %q: the session must be invisible to scripts", got)
	}

	// Overview: traffic in two waves, so the rate charts have a slope.
	var ids []string
	for i := range 6 {
		ids = append(ids, in.post("/webhooks/orders", fmt.Sprintf(`{"order":%d,"marker":"first-wave"}`, i), "X-Demo", "console-test"))
	}
	b.wait("two samples", `Number(document.getElementById("view").dataset.samples) >= 2`)
	// A second wave paced over about 4 s (load, not synchronisation), so
	// the charts have several readings with traffic in them.
	pace := time.NewTicker(50 * time.Millisecond)
	for i := range 74 {
		<-pace.C
		ids = append(ids, in.post("/webhooks/orders", fmt.Sprintf(`{"order":%d}`, 100+i)))
	}
	pace.Stop()
	b.wait("the overview counting 80 accepted", `document.querySelector("#card-accepted .v").textContent === "80" && Number(document.getElementById("view").dataset.samples) >= 5`)
	b.waitText("#card-intake", "ready")
	testutil.Eventually(t, step, "every hook delivered", func() bool {
		for _, id := range ids {
			if rc.count(id) < 1 {
				return false
			}
		}
		return true
	})
	b.waitText("#card-delivered", "80")
	b.screenshot("overview")

	// Hooks: the list shows the first hook; its detail has the header, the
	// body and one attempt; a resend adds one.
	first := ids[0]
	b.go_("#/hooks")
	b.waitText("#hook-list", ids[len(ids)-1]) // newest first, 50 a page
	b.screenshot("hooks")
	b.clickButton("#hook-list", "Older")
	b.waitText("#hook-list", first)
	b.do("open the first hook", chromedp.Click(chromedp.CSS(`a[href="#/hooks/`+first+`"]`)))
	b.waitText("#hook-body", `"marker": "first-wave"`)
	b.waitText("#view", "console-test") // the X-Demo header
	b.wait("one attempt", `document.querySelectorAll("#attempts li").length === 1`)
	b.clickButton("#view", "Resend to every sink")
	b.wait("a second attempt after the resend", `document.querySelectorAll("#attempts li").length === 2`)
	if n := rc.count(first); n != 2 {
		t.Fatalf("the receiver got %d requests for %s after a resend, want 2", n, first)
	}
	b.screenshot("hook")

	// Dead letters: three hooks fail twice (retry.max_attempts 2).
	rc.failing.Store(true)
	var dead []string
	for i := range 3 {
		dead = append(dead, in.post("/webhooks/orders", fmt.Sprintf(`{"doomed":%d}`, i)))
	}
	testutil.Eventually(t, step, "three dead letters", func() bool { return in.api("GET", "/v1/dlq")["total"] == 3.0 })
	b.go_("#/dlq")
	b.waitText("#dlq-total", "3 dead deliveries")
	b.waitText("#dlq-list", dead[0])
	b.screenshot("dlq")
	rc.failing.Store(false)

	// A slow replay is paused, resumed and cancelled from the replays page.
	b.do("slow rate", chromedp.SetValue(chromedp.CSS(`#dlq-replay input[name="rate"]`), "0.1"))
	b.clickButton("#dlq-replay", "Replay these dead letters")
	b.wait("the replays page", `document.body.dataset.page === "replays"`)
	b.waitText("#replay-list", "running")
	b.clickButton("#replay-list", "Pause")
	b.waitText("#replay-list", "paused")
	b.clickButton("#replay-list", "Resume")
	b.waitText("#replay-list", "running")
	b.clickButton("#replay-list", "Cancel")
	b.waitText("#replay-list", "cancelled")
	// Then every dead letter is replayed at full rate.
	b.go_("#/dlq")
	b.do("full rate", chromedp.SetValue(chromedp.CSS(`#dlq-replay input[name="rate"]`), "1000"))
	b.clickButton("#dlq-replay", "Replay these dead letters")
	b.wait("the replays page", `document.body.dataset.page === "replays"`)
	b.waitText("#replay-list", "done")
	testutil.Eventually(t, step, "the dead letters delivered", func() bool {
		for _, id := range dead {
			if rc.count(id) < 3 { // two failures, then the replay
				return false
			}
		}
		return true
	})
	b.go_("#/dlq")
	b.waitText("#dlq-total", "0 dead deliveries")
	b.go_("#/replays")
	b.waitText("#replay-list", "cancelled")
	b.screenshot("replays")

	// Sources: create one with a secret; the secret is never shown back.
	b.go_("#/sources")
	b.waitText("#source-list", "No API sources")
	b.clickButton("#source-editor", "New source")
	b.do("fill the new source",
		chromedp.SendKeys(chromedp.CSS(`#source-create input[name="name"]`), "signed"),
		chromedp.SetValue(chromedp.CSS(`#source-create select[name="verify_type"]`), "github"),
		chromedp.SetValue(chromedp.CSS(`#source-create select[name="on_verify_failure"]`), "quarantine"),
		chromedp.SendKeys(chromedp.CSS(`#source-create input[name="secret"]`), oldSecret))
	b.clickButton("#source-create", "Create")
	b.waitText("#source-list", "default.signed")
	b.waitText("#file-sources", "orders")
	if html := b.eval(`document.body.innerHTML`).(string); strings.Contains(html, oldSecret) {
		t.Fatal("the sources page shows the secret it was given")
	}
	b.screenshot("sources")

	// Quarantine: a hook signed with the new secret fails the old one.
	src := in.api("GET", "/v1/tenants/default/sources/signed")
	catch, _ := src["catch_url"].(string)
	body := `{"action":"opened"}`
	held := in.post(catch, body, "X-Hub-Signature-256", githubSig(newSecret, body))
	b.go_("#/quarantine")
	b.waitText("#quarantine-total", "1 held")
	b.waitText("#quarantine-list", held)
	b.screenshot("quarantine")

	// Change the secret (write-only field), then release: the held hook now
	// verifies and is committed.
	b.go_("#/sources")
	b.clickButton("#source-list", "Edit")
	b.waitText("#source-edit", "[REDACTED]") // the stored secret, shown only as that
	b.do("new secret", chromedp.SendKeys(chromedp.CSS(`#source-edit input[name="secret"]`), newSecret))
	b.screenshot("source-edit")
	b.clickButton("#source-edit", "Save")
	b.waitText("#toast", "Saved default.signed")
	b.go_("#/quarantine")
	b.clickButton("#view", "Release (re-verify and deliver)")
	b.wait("the replays page", `document.body.dataset.page === "replays"`)
	b.waitText("#replay-list", "quarantine")
	testutil.Eventually(t, step, "the released hook committed", func() bool {
		hooks, _ := in.api("GET", "/v1/hooks?source=default.signed")["hooks"].([]any)
		return len(hooks) == 1 && in.api("GET", "/v1/quarantine")["total"] == 0.0
	})
	b.go_("#/quarantine")
	b.waitText("#quarantine-total", "0 held")

	// Purge: another bad hook, purged from its row.
	bad := in.post(catch, body, "X-Hub-Signature-256", githubSig("wrong-secret-000000", body))
	b.go_("#/replays") // leave and come back to reload the list
	b.go_("#/quarantine")
	b.waitText("#quarantine-list", bad)
	b.eval(`window.confirm = () => true`)
	b.clickButton("#quarantine-list", "Purge")
	b.waitText("#quarantine-total", "0 held")

	// A read token, given once as ?token=: no body, resend disabled, and the
	// token gone from the address bar.
	b.do("log out", chromedp.Click(chromedp.CSS(`#logout button`)))
	b.wait("the login form", `!document.getElementById("login").hidden`)
	b.do("log in as viewer", chromedp.Navigate(in.admin+"/?token="+readToken))
	b.wait("the viewer's overview", `document.getElementById("who").textContent.includes("viewer · read")`)
	if u := b.eval(`location.href`).(string); strings.Contains(u, "token") {
		t.Fatalf("the address %q still holds the token", u)
	}
	b.go_("#/hooks/" + first)
	b.waitText("#hook-body", "needs a token with role operate")
	if d := b.eval(`[...document.querySelectorAll("#view button")].filter(x => x.textContent.startsWith("Resend")).every(x => x.disabled)`); d != true {
		t.Fatal("a read session can press Resend")
	}
	// The API refuses it anyway, CSRF token or not.
	status := b.eval(`(async () => { const s = await (await fetch("/console/session")).json();
		const r = await fetch("/v1/hooks/` + first + `/resend", {method: "POST", headers: {"X-CSRF-Token": s.csrf}}); return r.status; })()`)
	if status != 403.0 {
		t.Fatalf("a read session's resend = %v, want 403", status)
	}
	t.Logf("browser walk took %s; screenshots in %s", time.Since(began).Round(time.Millisecond), b.shots)
}
