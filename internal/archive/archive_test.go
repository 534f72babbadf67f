package archive_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/ankusa/ankusa/internal/archive"
	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/testutil/s3fake"
)

var key = []byte("archive-test-signing-key")

// locations are the blob stores an archive runs on: the crash-safe file
// store of file://, s3:// opened by backup.OpenBucket against gofakes3 (an
// in-process S3-compatible fake: no real S3 can be reached here), and
// gocloud's in-memory bucket through the same adapter.
var locations = []struct {
	name string
	open func(t *testing.T) backup.Store
}{
	{"file", func(t *testing.T) backup.Store {
		s, err := backup.NewFileStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"s3", func(t *testing.T) backup.Store {
		b, err := backup.OpenBucket(context.Background(), s3fake.New(t).Bucket(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}},
	{"memblob", func(t *testing.T) backup.Store {
		b := memblob.OpenBucket(nil)
		t.Cleanup(func() { _ = b.Close() })
		return backup.NewBlobStore(b)
	}},
}

func hook(seq uint64, deliveredAt int64, body string) archive.Hook {
	return archive.Hook{Seq: seq, ID: "id", Tenant: "t", Source: "s", ReceivedAtNs: deliveredAt * 1e6, DeliveredAtMs: deliveredAt,
		Envelope: []byte(body), Attempts: []archive.Attempt{{Sink: "out", N: 1, AtMs: deliveredAt, Result: "delivered"}}}
}

func newArchive(t *testing.T, st backup.Store, k []byte) *archive.Archive {
	t.Helper()
	a, err := archive.New(archive.Options{Store: st, Prefix: "node-1", SigningKey: k})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestWriteReadCatalogue(t *testing.T) {
	ctx := context.Background()
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			st := loc.open(t)
			a := newArchive(t, st, key)
			e1, err := a.Write(ctx, []archive.Hook{hook(1, 1000, "a"), hook(2, 1001, "b")})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Write(ctx, []archive.Hook{hook(3, 2000, "c")}); err != nil {
				t.Fatal(err)
			}
			// A fresh reader (another process) sees both segments, in order.
			b := newArchive(t, st, key)
			cat, err := b.Catalogue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(cat.Segments) != 2 || cat.Segments[0].Key != e1.Key || cat.Segments[0].Count != 2 ||
				cat.Segments[0].FirstSeq != 1 || cat.Segments[0].LastSeq != 2 || cat.Segments[1].Count != 1 {
				t.Fatalf("catalogue = %+v", cat.Segments)
			}
			seg, err := b.ReadSegment(ctx, cat.Segments[0])
			if err != nil {
				t.Fatal(err)
			}
			if len(seg.Hooks) != 2 || string(seg.Hooks[1].Envelope) != "b" || seg.Hooks[1].Attempts[0].Result != "delivered" {
				t.Fatalf("segment = %+v", seg.Hooks)
			}
		})
	}
}

// A2: the sweep retried after a crash writes the same first hook again,
// maybe with more after it; the catalogue keeps one entry for the key.
func TestRetriedWriteReplacesItsEntry(t *testing.T) {
	ctx := context.Background()
	st := locations[0].open(t)
	a := newArchive(t, st, key)
	if _, err := a.Write(ctx, []archive.Hook{hook(1, 1000, "a")}); err != nil {
		t.Fatal(err)
	}
	b := newArchive(t, st, key) // the restarted process
	if _, err := b.Write(ctx, []archive.Hook{hook(1, 1000, "a"), hook(2, 1001, "b")}); err != nil {
		t.Fatal(err)
	}
	cat, err := newArchive(t, st, key).Catalogue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Segments) != 1 || cat.Segments[0].Count != 2 {
		t.Fatalf("catalogue = %+v, want one entry of 2 hooks", cat.Segments)
	}
}

// A segment written again after a catalogue was read is ErrStale through
// that catalogue's entry, not a tampering (Write puts the segment first,
// then the catalogue: a reader between the two meets it), and reads
// through the new entry.
func TestSegmentWrittenAgainIsStale(t *testing.T) {
	ctx := context.Background()
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			st := loc.open(t)
			a := newArchive(t, st, key)
			old, err := a.Write(ctx, []archive.Hook{hook(1, 1000, "a")})
			if err != nil {
				t.Fatal(err)
			}
			cur, err := a.Write(ctx, []archive.Hook{hook(1, 1000, "a"), hook(2, 1001, "b")})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.ReadSegment(ctx, old); !errors.Is(err, archive.ErrStale) || errors.Is(err, archive.ErrBadSignature) {
				t.Fatalf("through the old entry: err = %v, want ErrStale", err)
			}
			if s, err := a.ReadSegment(ctx, cur); err != nil || len(s.Hooks) != 2 {
				t.Fatalf("through the new entry: %d hooks, %v", len(s.Hooks), err)
			}
		})
	}
}

// A3: a segment changed in the store, or read with another key, is refused.
func TestTamperedSegmentRefused(t *testing.T) {
	ctx := context.Background()
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			st := loc.open(t)
			a := newArchive(t, st, key)
			e, err := a.Write(ctx, []archive.Hook{hook(1, 1000, "original body")})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := newArchive(t, st, []byte("another-signing-key!")).Catalogue(ctx); !errors.Is(err, archive.ErrBadSignature) {
				t.Fatalf("catalogue with another key: err = %v, want ErrBadSignature", err)
			}
			r, err := st.Get(ctx, e.Key)
			if err != nil {
				t.Fatal(err)
			}
			obj, _ := io.ReadAll(r)
			_ = r.Close()
			// The attacker's edit: another body (base64 in the JSON).
			bad := bytes.Replace(obj, []byte("b3JpZ2luYWwgYm9keQ"), []byte("dGFtcGVyZWQgYm9keQ"), 1)
			if bytes.Equal(bad, obj) {
				t.Fatal("test did not find the body to tamper with")
			}
			if err := st.Put(ctx, e.Key, bytes.NewReader(bad)); err != nil {
				t.Fatal(err)
			}
			if _, err := a.ReadSegment(ctx, e); !errors.Is(err, archive.ErrBadSignature) {
				t.Fatalf("tampered segment: err = %v, want ErrBadSignature", err)
			}
			// Even with the catalogue's sha256 forged to match, the signature fails.
			e.SHA256 = sha(bad)
			if _, err := a.ReadSegment(ctx, e); !errors.Is(err, archive.ErrBadSignature) {
				t.Fatalf("tampered segment, matching sha: err = %v, want ErrBadSignature", err)
			}
		})
	}
}
