package e2e_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

const githubSecret = "It's a Secret to Everybody"

func githubSig(secret, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// send posts body to path with headers and returns status, Retry-After and
// the JSON answer.
func (in *instance) send(path, body string, hdr map[string]string) (int, string, map[string]any) {
	t := in.t
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+in.IngestAddr()+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, resp.Header.Get("Retry-After"), m
}

func withGitHub(policy string) func(*config.Config) {
	return func(c *config.Config) {
		s := c.Sources[sourceID]
		s.Verify = config.VerifyConfig{Type: "github", Secret: config.StringList{githubSecret}}
		s.OnVerifyFailure = policy
		c.Sources[sourceID] = s
	}
}

func TestEdge_VerificationRejectsForgeriesAndAcceptsSigned(t *testing.T) {
	rc := newReceiver(t, status(200))
	in := startInstance(t, rc, withGitHub("reject"))
	body := "Hello, World!"
	code, _, m := in.send("/webhooks/"+sourceID, body, map[string]string{"X-Hub-Signature-256": githubSig(githubSecret, body)})
	if code != 201 {
		t.Fatalf("signed hook: %d %v", code, m)
	}
	rc.next(t, m["id"].(string))
	for _, tc := range []struct {
		name, sig, reason string
	}{
		{"wrong secret", githubSig("not the secret", body), "no_match"},
		{"missing header", "", "missing_signature"},
		{"malformed header", "sha256=zz", "malformed_signature"},
	} {
		hdr := map[string]string{}
		if tc.sig != "" {
			hdr["X-Hub-Signature-256"] = tc.sig
		}
		code, _, m := in.send("/webhooks/"+sourceID, body, hdr)
		if code != 401 || m["error"] != "verification_failed" || m["reason"] != tc.reason {
			t.Fatalf("%s: %d %v, want 401 verification_failed/%s", tc.name, code, m, tc.reason)
		}
	}
	var w struct {
		WAL struct {
			NextSeq uint64 `json:"next_seq"`
		} `json:"wal"`
	}
	in.api("GET", "/v1/wal", nil, &w)
	if w.WAL.NextSeq != 2 {
		t.Fatalf("next_seq = %d: a rejected forgery was stored", w.WAL.NextSeq)
	}
}

func TestEdge_AcceptFlagCommitsFlaggedWithoutDedupe(t *testing.T) {
	rc := newReceiver(t, status(200))
	in := startInstance(t, rc, func(c *config.Config) {
		withGitHub("accept_flag")(c)
		s := c.Sources[sourceID]
		s.Dedupe = &config.SourceDedupe{Header: "X-Event-Id", TTLSeconds: 3600}
		c.Sources[sourceID] = s
	})
	hdr := map[string]string{"X-Hub-Signature-256": githubSig("forged", "x"), "X-Event-Id": "evt-1"}
	code, _, a := in.send("/webhooks/"+sourceID, "x", hdr)
	if code != 201 {
		t.Fatalf("flag-accepted: %d %v", code, a)
	}
	c := rc.next(t, a["id"].(string))
	if c.Header.Get("X-Ankusa-Flagged") != "true" {
		t.Fatal("a flagged hook was delivered without x-ankusa-flagged")
	}
	// A forged request never claims a dedupe key: the same key again is a
	// new hook, not a duplicate of the forgery.
	code, _, b := in.send("/webhooks/"+sourceID, "x", hdr)
	if code != 201 || b["duplicate"] == true || b["id"] == a["id"] {
		t.Fatalf("second flagged: %d %v", code, b)
	}
}

func TestEdge_TenantRouting(t *testing.T) {
	rc := newReceiver(t, status(200))
	in := startInstance(t, rc, func(c *config.Config) {
		c.HTTP.Routing = "tenant_path"
		s := c.Sources[sourceID]
		s.Tenant = "acme"
		c.Sources[sourceID] = s
	})
	if code, _, m := in.send("/webhooks/acme/"+sourceID, "{}", nil); code != 201 {
		t.Fatalf("own tenant: %d %v", code, m)
	}
	for _, p := range []string{"/webhooks/other/" + sourceID, "/webhooks/" + sourceID, "/webhooks/bad.tenant/" + sourceID} {
		if code, _, m := in.send(p, "{}", nil); code != 404 || m["error"] != "unknown_source" {
			t.Fatalf("%s: %d %v, want 404 unknown_source", p, code, m)
		}
	}
}

func TestEdge_RateLimitsPerTenantWithRuntimeOverride(t *testing.T) {
	rc := newReceiver(t, status(200))
	in := startInstance(t, rc, func(c *config.Config) {
		c.RateLimits.Default = &config.RateLimit{Rate: 0.01, Burst: 2}
	})
	path := "/webhooks/" + sourceID
	for i := range 2 {
		if code, _, m := in.send(path, "{}", nil); code != 201 {
			t.Fatalf("hook %d within the burst: %d %v", i, code, m)
		}
	}
	code, ra, m := in.send(path, "{}", nil)
	if code != 429 || m["error"] != "rate_limited" || ra == "" || ra == "0" {
		t.Fatalf("over the burst: %d Retry-After=%q %v, want 429 rate_limited with Retry-After", code, ra, m)
	}
	// A runtime override for the tenant takes effect on the next request
	// and survives in the store.
	var v map[string]any
	if st := in.api("PUT", "/v1/tenants/default/rate-limit", map[string]any{"rate": 1000, "burst": 100}, &v); st != 200 || v["source"] != "override" {
		t.Fatalf("PUT override: %d %v", st, v)
	}
	if code, _, m := in.send(path, "{}", nil); code != 201 {
		t.Fatalf("after override: %d %v", code, m)
	}
	if st := in.api("GET", "/v1/tenants/default/rate-limit", nil, &v); st != 200 || v["rate"] != 1000.0 {
		t.Fatalf("GET override: %d %v", st, v)
	}
	if st := in.api("PUT", "/v1/tenants/default/rate-limit", map[string]any{"rate": -1}, nil); st != 400 {
		t.Fatalf("invalid override: %d, want 400", st)
	}
	if st := in.api("DELETE", "/v1/tenants/default/rate-limit", nil, &v); st != 200 || v["source"] != "default" {
		t.Fatalf("DELETE override: %d %v", st, v)
	}
	if st := in.api("DELETE", "/v1/tenants/default/rate-limit", nil, nil); st != 404 {
		t.Fatalf("DELETE again: %d, want 404", st)
	}
}
