package admin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/admin"
	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/testutil/services"
)

// /ready under dedupe.scope: fleet says whether the claim store answers:
// the real Redis (ok), and one nobody listens on (down, 503).
func TestAdmin_ReadyReportsTheFleetClaimStore(t *testing.T) {
	for _, tc := range []struct {
		name, url, want string
		status          int
	}{
		{"redis up", services.RedisURL(), "ok", http.StatusOK},
		{"redis down", "redis://127.0.0.1:1/0", "down", http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			fc, err := dedupe.NewFleetClaims(dedupe.FleetOptions{URL: tc.url, Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer fc.Close()
			d := e.deps
			d.Fleet = fc
			r := do(t, admin.New(d), http.MethodGet, "/ready")
			wantJSON(t, r, tc.status)
			wantField(t, r.body, "dedupe", tc.want)
			if tc.status != http.StatusOK {
				wantField(t, r.body, "reason", "dedupe_down")
				if ra := r.header.Get("Retry-After"); ra != "1" {
					t.Errorf("Retry-After %q", ra)
				}
			}
		})
	}
}
