package quarantine_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// Hold returns only once the row is synced: a power cut right after it
// (only fsynced bytes survive) keeps the hook, in the frozen format.
func TestHoldIsDurable(t *testing.T) {
	const dir = "/data/ankusa/store"
	fs := vfs.NewCrashableMem()
	st := testutil.OpenStore(t, dir, fs) // creates dir and parents durably
	p := newPen(t, st, quarantine.Options{})
	at := time.UnixMilli(1_700_000_000_123).Add(456 * time.Microsecond)
	env := envelope(t, "gh", at, `{"a":1}`)
	if err := p.Hold(t.Context(), env, "no_match"); err != nil {
		t.Fatal(err)
	}

	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	after := testutil.OpenStore(t, dir, crashed)

	// The frozen key: 'p' + received_at (ms, big-endian) + id.
	key := append([]byte{'p'}, binary.BigEndian.AppendUint64(nil, uint64(at.UnixMilli()))...)
	key = append(key, env.ID[:]...)
	v, err := after.Get(key)
	if err != nil || v == nil {
		t.Fatalf("held row after the power cut: %v, %v", v, err)
	}
	// The frozen value: version 1, the reason, … , the envelope last.
	if v[0] != 1 || v[1] != byte(len("no_match")) || string(v[2:2+len("no_match")]) != "no_match" {
		t.Fatalf("value head = %q", v[:12])
	}
	enc := store.EncodeEnvelope(env)
	if !bytes.HasSuffix(v, enc) {
		t.Fatal("value does not end with the encoded envelope")
	}

	p2 := newPen(t, after, quarantine.Options{})
	stats(t, p2, 1, int64(len(env.Body)))
	total, hs, err := p2.List(quarantine.Filter{})
	if err != nil || total != 1 || len(hs) != 1 {
		t.Fatalf("List = %d, %v, %v", total, hs, err)
	}
	want := quarantine.Held{
		ID: idOf(env), SourceID: "gh", TenantID: "default", ReceivedAt: at.UTC(),
		Size: int64(len(env.Body)), ContentType: "application/json", Reason: "no_match",
	}
	if hs[0] != want {
		t.Fatalf("held = %+v, want %+v", hs[0], want)
	}
}

// Each source has its own bucket: burst 100, then an error carrying
// Retry-After (the edge's 429), while other sources hold on.
func TestHoldRateLimitPerSource(t *testing.T) {
	clk := newClock(time.Unix(1_700_000_000, 0))
	p := newPen(t, memStore(t), quarantine.Options{Rate: 20, Burst: 100, Now: clk.Now})
	for i := range 100 {
		if err := p.Hold(t.Context(), envelope(t, "a", clk.Now(), "x"), "no_match"); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
	}
	err := p.Hold(t.Context(), envelope(t, "a", clk.Now(), "x"), "no_match")
	var ra interface{ RetryAfter() time.Duration } // how the edge recognises it
	if !errors.As(err, &ra) {
		t.Fatalf("hold 101 = %v, want a RetryAfter error", err)
	}
	if ra.RetryAfter() != 50*time.Millisecond {
		t.Fatalf("RetryAfter = %s, want 50ms (one token at 20/s)", ra.RetryAfter())
	}
	var rl *quarantine.RateLimitedError
	if !errors.As(err, &rl) || rl.SourceID != "a" {
		t.Fatalf("err = %#v", err)
	}
	if errors.Is(err, edge.ErrQuarantineFull) {
		t.Fatal("a rate-limited hold must not read as full")
	}
	stats(t, p, 100, 100) // the refused hook was not written

	hold(t, p, envelope(t, "b", clk.Now(), "y"))
	clk.Advance(50 * time.Millisecond)
	hold(t, p, envelope(t, "a", clk.Now(), "x"))
	if err := p.Hold(t.Context(), envelope(t, "a", clk.Now(), "x"), "no_match"); !errors.As(err, &ra) {
		t.Fatalf("second hold after one refill = %v, want rate limited", err)
	}
	stats(t, p, 102, 102)
}

// Past MaxBytes a hold is refused with edge.ErrQuarantineFull and nothing
// already held is evicted; a purge makes room again. The bound counts
// bodies.
func TestHoldFull(t *testing.T) {
	st := memStore(t)
	p := newPen(t, st, quarantine.Options{MaxBytes: 1000})
	now := time.Now()
	first := envelope(t, "a", now, strings.Repeat("a", 600))
	hold(t, p, first)
	err := p.Hold(t.Context(), envelope(t, "b", now, strings.Repeat("b", 401)), "no_match")
	if !errors.Is(err, edge.ErrQuarantineFull) {
		t.Fatalf("hold over max_bytes = %v, want ErrQuarantineFull", err)
	}
	stats(t, p, 1, 600)
	if _, hs, _ := p.List(quarantine.Filter{}); len(hs) != 1 || hs[0].ID != idOf(first) {
		t.Fatalf("after a refused hold the pen holds %v", ids(hs))
	}
	hold(t, p, envelope(t, "b", now, strings.Repeat("b", 400))) // exactly full
	stats(t, p, 2, 1000)
	if err := p.Hold(t.Context(), envelope(t, "c", now, "c"), "no_match"); !errors.Is(err, edge.ErrQuarantineFull) {
		t.Fatalf("hold into a full pen = %v", err)
	}

	// A new pen over the same store learns the total by its scan.
	stats(t, newPen(t, st, quarantine.Options{MaxBytes: 1000}), 2, 1000)

	if n, err := p.Purge(quarantine.PurgeFilter{SourceID: "a"}); err != nil || n != 1 {
		t.Fatalf("purge = %d, %v", n, err)
	}
	stats(t, p, 1, 400)
	hold(t, p, envelope(t, "c", now, strings.Repeat("c", 600)))
	stats(t, p, 2, 1000)
}

// A row deleted behind the pen's back (boot recovery takes the pen row of a
// released hook it replays, ack rule 7) stays counted until Recount, which
// learns the pen's size again; a full pen then takes a hold again.
func TestRecount(t *testing.T) {
	st := memStore(t)
	p := newPen(t, st, quarantine.Options{MaxBytes: 1000})
	now := time.Now()
	gone := envelope(t, "a", now, strings.Repeat("a", 600))
	hold(t, p, gone)
	hold(t, p, envelope(t, "b", now, strings.Repeat("b", 400)))
	b := st.NewBatch()
	defer b.Close()
	if err := b.DeletePen(store.HeldRef(gone)); err != nil {
		t.Fatal(err)
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	stats(t, p, 2, 1000)
	if err := p.Recount(); err != nil {
		t.Fatal(err)
	}
	stats(t, p, 1, 400)
	hold(t, p, envelope(t, "c", now, strings.Repeat("c", 600)))
	stats(t, p, 2, 1000)
}

// listFixture holds six hooks of two sources one second apart:
// a0 b1 a2 b3 a4 b5, received at base+i s.
func listFixture(t *testing.T) (*quarantine.Pen, time.Time, []*store.Envelope) {
	t.Helper()
	p := newPen(t, memStore(t), quarantine.Options{})
	base := time.Unix(1_700_000_000, 0)
	var envs []*store.Envelope
	for i := range 6 {
		src := "a"
		if i%2 == 1 {
			src = "b"
		}
		e := envelope(t, src, base.Add(time.Duration(i)*time.Second), strings.Repeat("x", 10+i))
		hold(t, p, e)
		envs = append(envs, e)
	}
	return p, base, envs
}

func TestList(t *testing.T) {
	p, base, envs := listFixture(t)
	id := func(i ...int) []string {
		var out []string
		for _, x := range i {
			out = append(out, idOf(envs[x]))
		}
		return out
	}
	sec := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	tests := []struct {
		name  string
		f     quarantine.Filter
		total int
		want  []string
	}{
		{"all, newest first", quarantine.Filter{}, 6, id(5, 4, 3, 2, 1, 0)},
		{"source", quarantine.Filter{SourceID: "a"}, 3, id(4, 2, 0)},
		{"unknown source", quarantine.Filter{SourceID: "zz"}, 0, nil},
		{"limit keeps the newest", quarantine.Filter{Limit: 2}, 6, id(5, 4)},
		{"source and limit", quarantine.Filter{SourceID: "b", Limit: 1}, 3, id(5)},
		{"since inclusive", quarantine.Filter{Since: sec(3)}, 3, id(5, 4, 3)},
		{"until inclusive", quarantine.Filter{Until: sec(2)}, 3, id(2, 1, 0)},
		{"range", quarantine.Filter{Since: sec(1), Until: sec(3)}, 3, id(3, 2, 1)},
		{"range and source", quarantine.Filter{SourceID: "a", Since: sec(1), Until: sec(4)}, 2, id(4, 2)},
		{"empty range", quarantine.Filter{Since: sec(4), Until: sec(1)}, 0, nil},
		{"limit above max", quarantine.Filter{Limit: 5000}, 6, id(5, 4, 3, 2, 1, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total, hs, err := p.List(tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if total != tt.total || !slices.Equal(ids(hs), tt.want) {
				t.Fatalf("List = %d %v, want %d %v", total, ids(hs), tt.total, tt.want)
			}
		})
	}

	// Entries describe the hook without its body.
	_, hs, _ := p.List(quarantine.Filter{Limit: 1})
	if hs[0].Size != 15 || hs[0].SourceID != "b" || !hs[0].ReceivedAt.Equal(sec(5)) || hs[0].Reason != "no_match" {
		t.Fatalf("entry = %+v", hs[0])
	}
	js, _ := json.Marshal(hs[0])
	var m map[string]any
	_ = json.Unmarshal(js, &m)
	for _, k := range []string{"id", "source_id", "tenant_id", "received_at", "size", "content_type", "reason"} {
		if _, ok := m[k]; !ok {
			t.Errorf("entry JSON lacks %q: %s", k, js)
		}
	}
	if len(m) != 7 || strings.Contains(string(js), "xxxxxxxx") {
		t.Errorf("entry JSON carries more than the description: %s", js)
	}
}

func TestPurge(t *testing.T) {
	sec := func(base time.Time, i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	t.Run("unfiltered is refused", func(t *testing.T) {
		p, _, _ := listFixture(t)
		if n, err := p.Purge(quarantine.PurgeFilter{}); !errors.Is(err, quarantine.ErrUnfiltered) || n != 0 {
			t.Fatalf("Purge({}) = %d, %v", n, err)
		}
		stats(t, p, 6, 10+11+12+13+14+15)
		if n, err := p.Purge(quarantine.PurgeFilter{All: true}); err != nil || n != 6 {
			t.Fatalf("Purge(all) = %d, %v", n, err)
		}
		stats(t, p, 0, 0)
		if total, _, _ := p.List(quarantine.Filter{}); total != 0 {
			t.Fatalf("after purge all, %d held", total)
		}
	})
	t.Run("by source", func(t *testing.T) {
		p, _, envs := listFixture(t)
		if n, err := p.Purge(quarantine.PurgeFilter{SourceID: "a"}); err != nil || n != 3 {
			t.Fatalf("Purge(a) = %d, %v", n, err)
		}
		stats(t, p, 3, 11+13+15)
		_, hs, _ := p.List(quarantine.Filter{})
		if want := []string{idOf(envs[5]), idOf(envs[3]), idOf(envs[1])}; !slices.Equal(ids(hs), want) {
			t.Fatalf("left %v, want %v", ids(hs), want)
		}
		if n, err := p.Purge(quarantine.PurgeFilter{SourceID: "a"}); err != nil || n != 0 {
			t.Fatalf("second Purge(a) = %d, %v", n, err)
		}
	})
	t.Run("by id", func(t *testing.T) {
		p, _, envs := listFixture(t)
		if n, err := p.Purge(quarantine.PurgeFilter{ID: envs[2].ID}); err != nil || n != 1 {
			t.Fatalf("Purge(id) = %d, %v", n, err)
		}
		stats(t, p, 5, 10+11+13+14+15)
		_, hs, _ := p.List(quarantine.Filter{})
		if slices.Contains(ids(hs), idOf(envs[2])) {
			t.Fatal("purged id still listed")
		}
		// Criteria combine: that id is not of source b.
		if n, _ := p.Purge(quarantine.PurgeFilter{ID: envs[4].ID, SourceID: "b"}); n != 0 {
			t.Fatalf("Purge(id of a, source b) = %d", n)
		}
	})
	t.Run("by range", func(t *testing.T) {
		p, base, envs := listFixture(t)
		n, err := p.Purge(quarantine.PurgeFilter{Since: sec(base, 1), Until: sec(base, 3)})
		if err != nil || n != 3 {
			t.Fatalf("Purge(range) = %d, %v", n, err)
		}
		stats(t, p, 3, 10+14+15)
		_, hs, _ := p.List(quarantine.Filter{})
		if want := []string{idOf(envs[5]), idOf(envs[4]), idOf(envs[0])}; !slices.Equal(ids(hs), want) {
			t.Fatalf("left %v, want %v", ids(hs), want)
		}
		if n, _ := p.Purge(quarantine.PurgeFilter{Since: sec(base, 5)}); n != 1 {
			t.Fatalf("Purge(since only) = %d", n)
		}
		if n, _ := p.Purge(quarantine.PurgeFilter{Until: sec(base, 0)}); n != 1 {
			t.Fatalf("Purge(until only) = %d", n)
		}
		stats(t, p, 1, 14)
	})
}

// Concurrent holds reserve their bytes before writing: together they never
// pass MaxBytes, and the counters match the rows.
func TestHoldConcurrentBound(t *testing.T) {
	st := memStore(t)
	p := newPen(t, st, quarantine.Options{MaxBytes: 1000, Burst: 1000})
	var wg sync.WaitGroup
	var held, full atomic.Int64
	for range 50 {
		wg.Go(func() {
			err := p.Hold(t.Context(), envelope(t, "a", time.Now(), strings.Repeat("x", 100)), "no_match")
			switch {
			case err == nil:
				held.Add(1)
			case errors.Is(err, edge.ErrQuarantineFull):
				full.Add(1)
			default:
				t.Errorf("hold: %v", err)
			}
		})
	}
	wg.Wait()
	if held.Load() != 10 || full.Load() != 40 {
		t.Fatalf("held %d, full %d; want 10, 40", held.Load(), full.Load())
	}
	stats(t, p, 10, 1000)
	stats(t, newPen(t, st, quarantine.Options{}), 10, 1000)
}
