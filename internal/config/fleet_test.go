package config_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

func TestFleetDefaults(t *testing.T) {
	c := mustLoad(t, "dedupe: {scope: fleet}\nfleet: {redis: {url: \"redis://127.0.0.1:6379\"}}\n"+minimal, noEnv)
	if c.Fleet.PendingTTLMs != 30_000 || c.Fleet.KeyPrefix != "ankusa" || c.Fleet.Redis.TimeoutMs != 500 {
		t.Fatalf("defaults: %+v", c.Fleet)
	}
}

// ADR section 3: under dual, a held claim must outlive the reconcile
// deadline, so boot refuses reconcile_deadline_ms >= fleet.pending_ttl_ms.
func TestFleetRefusesReconcileDeadlineAtOrPastPendingTTL(t *testing.T) {
	for _, tt := range []struct {
		deadline, ttl int
		bad           bool
	}{{20_000, 30_000, false}, {30_000, 30_000, true}, {40_000, 30_000, true}} {
		c := dualMemory()
		c.Dedupe.Scope, c.Fleet.Redis.URL = "fleet", "redis://127.0.0.1:6379"
		c.Intake.ReconcileDeadlineMs, c.Fleet.PendingTTLMs = tt.deadline, tt.ttl
		err := c.Validate()
		if !tt.bad {
			if err != nil {
				t.Fatalf("%d < %d refused: %v", tt.deadline, tt.ttl, err)
			}
			continue
		}
		wantViolation(t, err, "intake.reconcile_deadline_ms", "must be less than fleet.pending_ttl_ms (30000) when dedupe.scope is fleet")
	}
}

func TestFleetRedisPasswordRedacted(t *testing.T) {
	c := config.Default()
	c.Dedupe.Scope, c.Fleet.Redis.URL = "fleet", "redis://ankusa:s3cr3tpw@10.0.0.5:6379/2"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(c.Redacted())
	out := string(raw)
	if strings.Contains(out, "s3cr3tpw") {
		t.Fatalf("password shown: %s", out)
	}
	if !strings.Contains(out, "10.0.0.5:6379") {
		t.Fatalf("host hidden too (only the password is a secret): %s", out)
	}
	// A bad URL is refused without repeating the password.
	c.Fleet.Redis.URL = "http://ankusa:s3cr3tpw@10.0.0.5"
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "s3cr3tpw") {
		t.Fatalf("want a refusal that does not repeat the password, got %v", err)
	}
}
