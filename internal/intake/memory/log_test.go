package memory_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/memory"
)

func TestLog_RoundTrip(t *testing.T) {
	l := open(t, t.TempDir(), "node-a")
	r := intake.Record{
		Version:     intake.RecordVersion,
		Kind:        intake.KindHook,
		Node:        "node-a",
		Seq:         18446744073709551615,
		ID:          [16]byte{0x01, 0x8f, 0x2a, 0x00, 0xff, 0x10, 0x70, 0x01, 0x80, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x01},
		Incarnation: "7f3a",
		Tenant:      "acme",
		Source:      "stripe-live",
		Value:       []byte{'A', 'E', 1, 0, 0, 0xff, '\n', 0x83, 0x68},
	}
	empty := r
	empty.Seq, empty.Value, empty.Tenant, empty.Incarnation = 0, nil, "", "0"
	if p := mustPublish(t, l, r, empty); p != 1 {
		t.Fatalf("confirmed at %d, want 1", p)
	}
	got := intaketest.ReplayAll(t, l, -1)
	if len(got) != 2 || got[0].Pos != 0 || got[1].Pos != 1 {
		t.Fatalf("replayed %+v", got)
	}
	equalRecords(t, []intake.Record{got[0].Rec, got[1].Rec}, []intake.Record{r, empty})
	if !bytes.Equal(got[0].Rec.Value, r.Value) {
		t.Fatalf("value %x, want %x", got[0].Rec.Value, r.Value)
	}
	equalRecords(t, l.Records(), []intake.Record{r, empty})
	if l.Published() != 2 || l.Last() != 1 {
		t.Fatalf("published %d, last %d; want 2, 1", l.Published(), l.Last())
	}
}

func TestLog_PositionsAreDenseAndSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, "n1")
	var want []intake.Record
	next := intake.Position(0)
	for batch := range 4 {
		var recs []intake.Record
		for i := range batch + 1 {
			recs = append(recs, rec("n1", uint64(len(want)+i+1)))
		}
		p := mustPublish(t, l, recs...)
		next += intake.Position(len(recs))
		if p != next-1 {
			t.Fatalf("batch %d confirmed at %d, want %d", batch, p, next-1)
		}
		want = append(want, recs...)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l2 := open(t, dir, "n1")
	if l2.Last() != next-1 {
		t.Fatalf("reopened last %d, want %d", l2.Last(), next-1)
	}
	equalRecords(t, l2.Records(), want)
	extra := rec("n1", 100)
	if p := mustPublish(t, l2, extra); p != next {
		t.Fatalf("first publish after reopen at %d, want %d", p, next)
	}
	got := intaketest.ReplayAll(t, l2, -1)
	for i, g := range got {
		if g.Pos != intake.Position(i) {
			t.Fatalf("record %d replayed at %d", i, g.Pos)
		}
	}
	equalRecords(t, l2.Records(), append(want, extra))
	if l2.Published() != 1 {
		t.Fatalf("Published counts this Log's appends: %d, want 1", l2.Published())
	}
}

// A second process after a crash: the first Log is abandoned, never closed.
func TestLog_ReopenAfterAbandon(t *testing.T) {
	dir := t.TempDir()
	crashed := open(t, dir, "n1")
	mustPublish(t, crashed, rec("n1", 1), rec("n1", 2))
	l := open(t, dir, "n1")
	if p := mustPublish(t, l, rec("n1", 3)); p != 2 {
		t.Fatalf("publish after the crash at %d, want 2", p)
	}
	if n := len(intaketest.ReplayAll(t, l, -1)); n != 3 {
		t.Fatalf("replayed %d records, want 3", n)
	}
}

func TestLog_NodesInOneDirAreIsolated(t *testing.T) {
	dir := t.TempDir()
	a, b := open(t, dir, "node-a"), open(t, dir, "node-b")
	ra := []intake.Record{rec("node-a", 1), rec("node-a", 2)}
	rb := []intake.Record{rec("node-b", 1)}
	if p := mustPublish(t, a, ra...); p != 1 {
		t.Fatalf("node-a confirmed at %d", p)
	}
	if p := mustPublish(t, b, rb...); p != 0 {
		t.Fatalf("node-b has its own positions: confirmed at %d, want 0", p)
	}
	equalRecords(t, a.Records(), ra)
	equalRecords(t, b.Records(), rb)
	for _, f := range []string{"node-a.log", "node-b.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("partition file: %v", err)
		}
	}
}

func TestLog_ReplayFiltersOtherNodesInTheFile(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	mine, theirs := rec("n1", 1), rec("n2", 1)
	mustPublish(t, l, mine, theirs, mine)
	got := intaketest.ReplayAll(t, l, -1)
	if len(got) != 2 || got[0].Pos != 0 || got[1].Pos != 2 {
		t.Fatalf("replayed %+v, want positions 0 and 2", got)
	}
	if l.Skipped() != 0 {
		t.Fatalf("another node's record counted as skipped: %d", l.Skipped())
	}
	if n := len(l.Records()); n != 3 {
		t.Fatalf("Records is unfiltered: %d, want 3", n)
	}
}

func TestLog_ReplaySkipsUnknownAndCounts(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	v2, probe, tomb := rec("n1", 2), rec("n1", 3), rec("n1", 4)
	v2.Version = "2"
	probe.Kind = "probe"
	tomb.Kind = "tombstone"
	known := []intake.Record{rec("n1", 1), rec("n1", 5)}
	mustPublish(t, l, known[0], v2, probe, tomb, known[1])
	got := intaketest.ReplayAll(t, l, -1)
	equalRecords(t, []intake.Record{got[0].Rec, got[1].Rec}, known)
	if got[1].Pos != 4 {
		t.Fatalf("record after the skipped ones at %d, want 4", got[1].Pos)
	}
	if l.Skipped() != 3 {
		t.Fatalf("skipped %d, want 3", l.Skipped())
	}
	intaketest.ReplayAll(t, l, 1) // skips 2 more: v2 is before it
	if l.Skipped() != 5 {
		t.Fatalf("skipped %d after a second replay, want 5", l.Skipped())
	}
}

func TestLog_ConcurrentPublishers(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	const publishers, batches = 8, 20
	type confirm struct{ first, last intake.Position }
	confirms := make([][]confirm, publishers)
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			for b := range batches {
				size := 1 + (g+b)%4
				recs := make([]intake.Record, size)
				for i := range recs {
					recs[i] = rec("n1", uint64(g*10000+b*10+i))
				}
				p, err := l.PublishBatch(ctxT(t), recs)
				if err != nil {
					t.Errorf("publisher %d: %v", g, err)
					return
				}
				confirms[g] = append(confirms[g], confirm{p - intake.Position(size) + 1, p})
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := 0
	owner := map[intake.Position]int{}
	for g, cs := range confirms {
		for i, c := range cs {
			if i > 0 && c.first <= cs[i-1].last {
				t.Errorf("publisher %d: batch %d at %d, not after %d", g, i, c.first, cs[i-1].last)
			}
			for p := c.first; p <= c.last; p++ {
				if o, dup := owner[p]; dup {
					t.Fatalf("position %d confirmed to publishers %d and %d", p, o, g)
				}
				owner[p] = g
				total++
			}
		}
	}
	got := intaketest.ReplayAll(t, l, -1)
	if len(got) != total || l.Published() != total {
		t.Fatalf("replayed %d, published %d, confirmed %d", len(got), l.Published(), total)
	}
	for i, g := range got {
		// Dense, and each batch's records sit in its confirmed range.
		if g.Pos != intake.Position(i) || owner[g.Pos] != int(g.Rec.Seq/10000) {
			t.Fatalf("record seq %d at %d, confirmed to publisher %d", g.Rec.Seq, g.Pos, owner[g.Pos])
		}
	}
}

func TestLog_TornTail(t *testing.T) {
	// Each tail is what a crash can leave after the last good frame.
	tails := map[string]func(frame []byte) []byte{
		"half head":      func(f []byte) []byte { return f[:5] },
		"half body":      func(f []byte) []byte { return f[:len(f)/2] },
		"bad crc":        func(f []byte) []byte { g := bytes.Clone(f); g[len(g)-1] ^= 0xff; return g },
		"zeros":          func(f []byte) []byte { return make([]byte, 4096) },
		"garbage length": func(f []byte) []byte { return []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5} },
		"frame then half": func(f []byte) []byte {
			return append(bytes.Clone(f[:len(f)-3]), f...) // a bad frame hides a good one behind it
		},
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "n1.log")
			l := open(t, dir, "n1")
			good := []intake.Record{rec("n1", 1), rec("n1", 2)}
			mustPublish(t, l, good...)
			goodBytes, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// The file of one more record gives a real frame to tear.
			mustPublish(t, l, rec("n1", 3))
			full, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			frame := full[len(goodBytes):]
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, append(bytes.Clone(goodBytes), tail(frame)...), 0o600); err != nil {
				t.Fatal(err)
			}

			l2 := open(t, dir, "n1")
			if l2.Last() != 1 {
				t.Fatalf("last after a torn tail %d, want 1", l2.Last())
			}
			equalRecords(t, l2.Records(), good)
			next := rec("n1", 3)
			if p := mustPublish(t, l2, next); p != 2 {
				t.Fatalf("append after a torn tail at %d, want 2", p)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(full) || !bytes.Equal(after[:len(goodBytes)], goodBytes) {
				t.Fatalf("file is %d bytes after the append, want %d (torn tail truncated)", len(after), len(full))
			}
			if err := l2.Close(); err != nil {
				t.Fatal(err)
			}
			equalRecords(t, open(t, dir, "n1").Records(), append(good, next))
		})
	}
}

func TestLog_Truncate(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, "n1")
	var recs []intake.Record
	for i := range 5 {
		recs = append(recs, rec("n1", uint64(i+1)))
	}
	mustPublish(t, l, recs...)
	if e, _ := l.Earliest(ctxT(t)); e != 0 {
		t.Fatalf("earliest %d before truncation, want 0", e)
	}
	if err := l.Truncate(1); err != nil {
		t.Fatal(err)
	}
	if e, _ := l.Earliest(ctxT(t)); e != 2 {
		t.Fatalf("earliest %d, want 2", e)
	}
	got := intaketest.ReplayAll(t, l, -1)
	if len(got) != 3 || got[0].Pos != 2 {
		t.Fatalf("replay from -1 after truncation: %+v", got)
	}
	equalRecords(t, l.Records(), recs[2:])
	if err := l.Truncate(0); err != nil {
		t.Fatalf("truncate behind the start is a no-op: %v", err)
	}
	if err := l.Truncate(5); err == nil {
		t.Fatal("truncate past the last record succeeded")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l2 := open(t, dir, "n1")
	if e, _ := l2.Earliest(ctxT(t)); e != 2 {
		t.Fatalf("earliest after reopen %d, want 2", e)
	}
	if p := mustPublish(t, l2, rec("n1", 6)); p != 5 {
		t.Fatalf("positions never move: publish at %d, want 5", p)
	}
	if err := l2.Truncate(5); err != nil {
		t.Fatal(err)
	}
	if e, _ := l2.Earliest(ctxT(t)); e != 6 {
		t.Fatalf("earliest when everything is truncated %d, want the next position 6", e)
	}
	if got := intaketest.ReplayAll(t, l2, -1); len(got) != 0 {
		t.Fatalf("replayed %d records of a fully truncated log", len(got))
	}
}

func TestLog_EarliestOfEmptyLog(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	e, err := l.Earliest(ctxT(t))
	if err != nil || e != 0 || l.Last() != -1 {
		t.Fatalf("earliest %d, %v, last %d; want 0, nil, -1", e, err, l.Last())
	}
	if got := intaketest.ReplayAll(t, l, -1); len(got) != 0 {
		t.Fatalf("replayed %d records of an empty log", len(got))
	}
}

func TestLog_RefusesInvalidBatches(t *testing.T) {
	dir := t.TempDir()
	l, err := memory.Open(memory.Options{Dir: dir, Node: "n1", MaxRecordBytes: 512, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	noVersion := rec("n1", 2)
	noVersion.Version = ""
	noNode := rec("n1", 2)
	noNode.Node = ""
	big := rec("n1", 2)
	big.Value = make([]byte, 600)
	for name, batch := range map[string][]intake.Record{
		"empty":      nil,
		"no version": {rec("n1", 1), noVersion},
		"no node":    {rec("n1", 1), noNode},
		"too large":  {rec("n1", 1), big},
	} {
		_, err := l.PublishBatch(ctxT(t), batch)
		wantClass(t, err, intake.Permanent)
		if name == "too large" && !errors.Is(err, memory.ErrTooLarge) {
			t.Errorf("%s: %v does not wrap ErrTooLarge", name, err)
		}
	}
	if l.Published() != 0 || l.Last() != -1 {
		t.Fatalf("a refused batch appended: published %d, last %d", l.Published(), l.Last())
	}
}

func TestOpen_RefusesBadOptions(t *testing.T) {
	for _, o := range []memory.Options{
		{Dir: "", Node: "n1"},
		{Dir: t.TempDir(), Node: ""},
		{Dir: t.TempDir(), Node: "../escape"},
		{Dir: t.TempDir(), Node: "a/b"},
	} {
		if l, err := memory.Open(o); err == nil {
			_ = l.Close()
			t.Errorf("Open(%+v) succeeded", o)
		}
	}
}

func TestOpen_CreatesNestedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outside", "the", "data", "dir")
	l := open(t, dir, "n1")
	mustPublish(t, l, rec("n1", 1))
	if _, err := os.Stat(filepath.Join(dir, "n1.log")); err != nil {
		t.Fatal(err)
	}
}

func TestLog_VerifyDescribeReadyClose(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, "n1")
	if err := l.Verify(ctxT(t)); err != nil {
		t.Fatalf("verify: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("verify left files behind: %v", entries)
	}
	if d := l.Describe(); !strings.Contains(d, dir) || !strings.Contains(d, "TEST ONLY") {
		t.Fatalf("describe %q", d)
	}
	if !l.Ready() {
		t.Fatal("not ready at open")
	}
	l.SetReady(false)
	if l.Ready() {
		t.Fatal("ready after SetReady(false)")
	}
	l.SetReady(true)
	mustPublish(t, l, rec("n1", 1))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if l.Ready() {
		t.Fatal("ready after close")
	}
	_, err := l.PublishBatch(ctxT(t), []intake.Record{rec("n1", 2)})
	if !errors.Is(err, memory.ErrClosed) {
		t.Fatalf("publish after close: %v", err)
	}
	if err := l.Replay(ctxT(t), -1, func(intake.Record, intake.Position) error { return nil }); !errors.Is(err, memory.ErrClosed) {
		t.Fatalf("replay after close: %v", err)
	}
	if n := len(l.Records()); n != 1 {
		t.Fatalf("Records after close: %d, want 1", n)
	}
}

func TestLog_VerifyUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes to a read-only directory")
	}
	dir := t.TempDir()
	l := open(t, dir, "n1")
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	err := l.Verify(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "intake.memory.path") {
		t.Fatalf("verify of a read-only dir: %v", err)
	}
}
