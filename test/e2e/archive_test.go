package e2e_test

import (
	"bytes"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

// A user's walk through the archive on file://: a delivered hook outlives
// its retention, goes to the archive and leaves the node (GET /v1/hooks no
// longer has it); POST /v1/replays kind archive delivers it again with the
// same id, idempotency key and body, tagged with the job's replay id.
func TestArchive_DeliveredHookArchivedThenReplayed(t *testing.T) {
	rc := newReceiver(t, status(200))
	dir := filepath.Join(t.TempDir(), "archive")
	in := startInstance(t, rc, func(c *config.Config) {
		c.Retention.Delivered = "1s"
		c.Retention.SweepIntervalMs = 100
		c.Archive = config.ArchiveConfig{Enabled: true, URL: "file://" + dir, SegmentBytes: 1 << 20,
			SigningKey: "e2e-archive-signing-key"}
	})
	since := time.Now().Add(-time.Minute)
	id := in.post(`{"order":42}`, "application/json")
	first := rc.next(t, id)
	in.waitReclaimed(id) // archived, then swept from the node

	var list struct {
		Hooks []map[string]any `json:"hooks"`
	}
	if code := in.api(http.MethodGet, "/v1/hooks?source="+sourceID, nil, &list); code != http.StatusOK || len(list.Hooks) != 0 {
		t.Fatalf("GET /v1/hooks after the archive sweep = %d %v, want none listed", code, list.Hooks)
	}

	var job struct {
		ID    string `json:"id"`
		Kind  string `json:"kind"`
		State string `json:"state"`
		Moved int    `json:"moved"`
	}
	spec := map[string]any{"kind": "archive", "since": since.Format(time.RFC3339Nano), "until": time.Now().Format(time.RFC3339Nano)}
	if code := in.api(http.MethodPost, "/v1/replays", spec, &job); code != http.StatusCreated || job.Kind != "archive" {
		t.Fatalf("POST /v1/replays kind archive = %d %+v", code, job)
	}
	again := rc.next(t, id)
	if again.ReplayID != job.ID {
		t.Fatalf("replayed with replay id %q, want the job's %q", again.ReplayID, job.ID)
	}
	if k1, k2 := first.Header.Get("X-Ankusa-Idempotency-Key"), again.Header.Get("X-Ankusa-Idempotency-Key"); k1 == "" || k1 != k2 {
		t.Fatalf("idempotency key %q then %q, want the same", k1, k2)
	}
	if !bytes.Equal(first.Body, again.Body) {
		t.Fatalf("body %q then %q", first.Body, again.Body)
	}
	testutil.Eventually(t, waitFor, "the archive job done", func() bool {
		in.api(http.MethodGet, "/v1/replays/"+job.ID, nil, &job)
		return job.State == "done"
	})
	if job.Moved != 1 {
		t.Fatalf("job moved %d hooks, want 1", job.Moved)
	}

	// Bad input is a precise 400, not a job.
	if code := in.api(http.MethodPost, "/v1/replays", map[string]any{"kind": "archive", "since": "yesterday"}, nil); code != http.StatusBadRequest {
		t.Fatalf("since: yesterday = %d, want 400", code)
	}
	if code := in.api(http.MethodPost, "/v1/replays", map[string]any{"kind": "archive",
		"since": time.Now().Format(time.RFC3339), "until": time.Now().Add(-time.Hour).Format(time.RFC3339)}, nil); code != http.StatusBadRequest {
		t.Fatalf("until before since = %d, want 400", code)
	}
}
