package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/store"
)

// pendingCost, the room check's estimate made before a record's rows
// exist, is at least the size its pending entry then counts (every row's
// key and value, the envelope once), so the pending set stays within
// intake.pending.max_bytes.
func TestPendingCost_BoundsTheEntry(t *testing.T) {
	long := strings.Repeat("k", 200)
	tests := []struct {
		name   string
		tenant string
		source string
		dedupe string
		sinks  int
		hdrs   int
		body   int
	}{
		{"small, one sink", "default", "demo", "", 1, 0, 16},
		{"1 KiB, dedupe", "default", "github", "evt_123", 1, 4, 1 << 10},
		{"no sinks", "t", "s", "", 0, 0, 0},
		{"eight sinks", "default", "demo", "", 8, 2, 1 << 10},
		{"long names and dedupe key", long, long, long, 3, 8, 100},
		{"long sink ids", "default", "demo", "", 4, 0, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Record{
				ReceivedAt: time.Now(), Tenant: tc.tenant, Source: tc.source, ContentType: "application/json",
				Body: []byte(strings.Repeat("x", tc.body)), DedupeKey: tc.dedupe, DedupeTTL: time.Hour,
			}
			for i := range tc.hdrs {
				r.Headers = append(r.Headers, store.Header{Name: "X-Header-" + strings.Repeat("n", i), Value: strings.Repeat("v", 40)})
			}
			for i := range tc.sinks {
				id := "sink-" + strings.Repeat("s", i)
				if strings.HasPrefix(tc.name, "long sink") {
					id = long
				}
				r.Sinks = append(r.Sinks, SinkRef{Num: uint16(i), ID: id})
			}
			env := store.Envelope{
				Seq: 1 << 40, ID: [16]byte{1}, ReceivedAt: r.ReceivedAt.UnixNano(), Tenant: r.Tenant, Source: r.Source,
				ContentType: r.ContentType, DedupeKey: r.DedupeKey, Headers: r.Headers, Body: r.Body,
			}
			rows := store.HookRows(&store.NewHook{
				Env: &env, Sinks: r.Sinks, DueAtMs: r.ReceivedAt.UnixMilli(),
				Dedupe: r.DedupeKey != "", DedupeExpiresAtMs: r.ReceivedAt.Add(time.Hour).UnixMilli(),
			})
			var size int64
			for _, o := range rows {
				size += int64(len(o.Key) + len(o.Value))
			}
			it := &item{rec: r, size: r.size()}
			if c := pendingCost(it); c < size {
				t.Fatalf("pendingCost %d below the entry's %d bytes", c, size)
			}
		})
	}
}
