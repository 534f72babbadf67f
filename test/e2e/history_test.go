package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	e2eReadToken    = "e2e-read-0123456789"
	e2eOperateToken = "e2e-operate-0123456789"
)

// authed calls the operator API with a bearer token and decodes the JSON
// answer into a map.
func (in *instance) authed(method, path, token, body string) (int, map[string]any) {
	in.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, in.admin+path, rd)
	if err != nil {
		in.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		in.t.Fatalf("%s %s = %d: not JSON: %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// A user's walk through history: a hook delivered after one failure stays
// readable with its attempts, is listed and found by state, and one resend
// (operate token only) reaches the receiver again tagged as a resend and
// lands in the audit trail.
func TestHistory_DeliveredHookStaysListedAndCanBeResent(t *testing.T) {
	rc := newReceiver(t, byAttempt(status(503), status(200)))
	in := startInstance(t, rc, func(c *config.Config) {
		c.Retention.Delivered = "1h"
		c.Admin.Tokens = []config.AdminToken{
			{Name: "viewer", Token: e2eReadToken, Role: config.AdminRoleRead},
			{Name: "alice", Token: e2eOperateToken, Role: config.AdminRoleOperate},
		}
	})
	id := in.post(`{"order":1}`, "application/json")
	rc.next(t, id)
	rc.next(t, id)

	var hook map[string]any
	testutil.Eventually(t, waitFor, "the hook delivered and still readable", func() bool {
		code, h := in.authed("GET", "/v1/hooks/"+id, e2eReadToken, "")
		if code != http.StatusOK {
			t.Fatalf("GET /v1/hooks/%s = %d %v (retained hooks must not 404)", id, code, h)
		}
		hook = h
		return h["deliveries"].([]any)[0].(map[string]any)["state"] == "delivered"
	})
	log := hook["attempts_log"].([]any)
	if len(log) != 2 || log[0].(map[string]any)["result"] != "retry" || log[1].(map[string]any)["result"] != "delivered" {
		t.Fatalf("attempts_log = %v, want retry then delivered", log)
	}
	code, list := in.authed("GET", "/v1/hooks?state=delivered&source="+sourceID, e2eReadToken, "")
	if code != http.StatusOK || len(list["hooks"].([]any)) != 1 || list["hooks"].([]any)[0].(map[string]any)["id"] != id {
		t.Fatalf("GET /v1/hooks?state=delivered = %d %v", code, list)
	}
	if code, _ := in.authed("GET", "/v1/hooks?state=bogus", e2eReadToken, ""); code != http.StatusBadRequest {
		t.Fatalf("bad state = %d, want 400", code)
	}
	if m := in.metrics(); m["ankusa_history_hooks"] != 1 || m["ankusa_history_bytes"] != float64(len(`{"order":1}`)) {
		t.Fatalf("history gauges: hooks %v bytes %v", m["ankusa_history_hooks"], m["ankusa_history_bytes"])
	}

	if code, r := in.authed("POST", "/v1/hooks/"+id+"/resend", e2eReadToken, ""); code != http.StatusForbidden {
		t.Fatalf("resend with a read token = %d %v, want 403", code, r)
	}
	code, res := in.authed("POST", "/v1/hooks/"+id+"/resend", e2eOperateToken, `{"sink":"`+sinkID+`"}`)
	if code != http.StatusAccepted {
		t.Fatalf("resend = %d %v", code, res)
	}
	again := rc.next(t, id)
	if again.ReplayID != res["resend_id"] || string(again.Body) != `{"order":1}` {
		t.Fatalf("resent call: replay id %q (want %v), body %s", again.ReplayID, res["resend_id"], again.Body)
	}
	_, audit := in.authed("GET", "/v1/audit", e2eReadToken, "")
	row := audit["entries"].([]any)[0].(map[string]any)
	if row["actor"] != "alice" || row["action"] != "POST /v1/hooks/{id}/resend" || row["path"] != "/v1/hooks/"+id+"/resend" {
		t.Fatalf("audit row = %v", row)
	}
}
