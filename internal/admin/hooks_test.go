package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

func TestAdmin_Hook(t *testing.T) {
	e := newEnv(t, envOptions{})
	// Not valid UTF-8 and not JSON: the body must come back byte for byte.
	body := []byte("{\"a\":1}\x00\xff\xfe raw")
	rec := record(body, "evt_123",
		store.Header{Name: "authorization", Value: "Bearer provider-token"},
		store.Header{Name: "x-signature", Value: "sha256=abc"},
	)
	rec.ReceivedAt = time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.FixedZone("x", 3600))
	res := e.submit(t, rec)
	id := uuid.UUID(res.ID).String()

	t.Run("found", func(t *testing.T) {
		r := e.get(t, "/v1/hooks/"+id)
		wantJSON(t, r, http.StatusOK)
		sum := sha256.Sum256(body)
		for path, want := range map[string]any{
			"id":           id,
			"seq":          float64(res.Seq),
			"tenant":       "default",
			"source":       "demo",
			"received_at":  "2025-03-04T04:06:07.891011121Z",
			"content_type": "application/json",
			"size":         float64(len(body)),
			"sha256":       hex.EncodeToString(sum[:]),
			"flagged":      false,
			"dedupe_key":   "evt_123",
			"durable":      true,
		} {
			wantField(t, r.body, path, want)
		}
		if _, ok := r.body["body_base64"]; ok {
			t.Error("body_base64 present without ?body=1")
		}
		hs, _ := field(t, r.body, "headers").([]any)
		if len(hs) != 2 {
			t.Fatalf("headers = %v, want 2", hs)
		}
		wantField(t, hs[0].(map[string]any), "name", "authorization")
		wantField(t, hs[0].(map[string]any), "value", "[REDACTED]")
		wantField(t, hs[1].(map[string]any), "name", "x-signature")
		wantField(t, hs[1].(map[string]any), "value", "sha256=abc")
		if strings.Contains(r.raw, "provider-token") {
			t.Error("a credential header's value is shown")
		}

		ds, _ := field(t, r.body, "deliveries").([]any)
		if len(ds) != 1 {
			t.Fatalf("deliveries = %v, want 1", ds)
		}
		d := ds[0].(map[string]any)
		wantField(t, d, "sink", "log")
		wantField(t, d, "state", "due")
		wantField(t, d, "attempts", 0.0)
		wantField(t, d, "last_error", "")
		// A new hook is due at its commit time (the writer keeps due keys
		// monotonic), which is the stored row's next_at.
		next, _ := field(t, d, "next_at").(string)
		seq := uint64(field(t, r.body, "seq").(float64))
		row, err := e.st.Get(store.DeliveryKey(seq, 0))
		if err != nil || row == nil {
			t.Fatalf("delivery row: %v", err)
		}
		dl, _ := store.DecodeDelivery(row)
		if at, err := time.Parse(time.RFC3339, next); err != nil || !at.Equal(time.UnixMilli(dl.NextAtMs)) {
			t.Errorf("next_at = %q (%v), want %s", next, err, time.UnixMilli(dl.NextAtMs).UTC())
		}
	})

	t.Run("body", func(t *testing.T) {
		r := e.get(t, "/v1/hooks/"+id+"?body=1")
		wantJSON(t, r, http.StatusOK)
		b64, _ := field(t, r.body, "body_base64").(string)
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || string(got) != string(body) {
			t.Fatalf("body_base64 decodes to %q (%v), want %q", got, err, body)
		}
	})

	t.Run("no dedupe key is null", func(t *testing.T) {
		other := e.submit(t, record([]byte(`{}`), ""))
		r := e.get(t, "/v1/hooks/"+uuid.UUID(other.ID).String())
		wantJSON(t, r, http.StatusOK)
		if v, ok := r.body["dedupe_key"]; ok && v != nil {
			t.Errorf("dedupe_key = %v, want null or absent", v)
		}
	})

	t.Run("unknown id", func(t *testing.T) {
		r := e.get(t, "/v1/hooks/"+uuid.Must(uuid.NewV7()).String())
		wantJSON(t, r, http.StatusNotFound)
		wantField(t, r.body, "error", "not_found")
	})

	t.Run("bad id", func(t *testing.T) {
		for _, bad := range []string{"nope", "1234", strings.Repeat("z", 36)} {
			r := e.get(t, "/v1/hooks/"+bad)
			wantJSON(t, r, http.StatusBadRequest)
			wantField(t, r.body, "error", "invalid_id")
		}
	})
}

// A hook that is applied but whose fsync has not returned is readable in
// Pebble; the view shows it as not durable until the fsync covers it.
func TestAdmin_HookNotYetDurable(t *testing.T) {
	gate := testutil.NewWALSyncGate()
	e := newEnv(t, envOptions{fs: gate.Wrap(vfs.Default)})

	gate.Hold()
	done := make(chan error, 1)
	go func() {
		_, err := e.q.Submit(context.Background(), record([]byte(`{"slow":true}`), ""))
		done <- err
	}()
	// The syncer starts its fsync only after the group was applied.
	release := gate.Held(t)

	var id uuid.UUID
	lo := []byte{store.PrefixHookID}
	if err := e.st.Scan(lo, store.PrefixEnd(lo), func(k, _ []byte) bool {
		copy(id[:], k[1:])
		return false
	}); err != nil {
		t.Fatal(err)
	}
	r := e.get(t, "/v1/hooks/"+id.String())
	wantJSON(t, r, http.StatusOK)
	wantField(t, r.body, "durable", false)

	gate.Open()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("submit: %v", err)
	}
	r = e.get(t, "/v1/hooks/"+id.String())
	wantJSON(t, r, http.StatusOK)
	wantField(t, r.body, "durable", true)
}
