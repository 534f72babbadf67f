// Package intaketest is the contract suite every intake.Intake adapter
// passes (memory, Kafka on kfake and real brokers, JetStream R3): one suite,
// many implementations, so the queue and boot recovery can rely on the
// behaviour rather than on an adapter.
package intaketest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
)

// Factory returns an Intake for node. Every call made with the same t must
// reach the same log (two nodes of one fleet sharing a topic or stream);
// the log may be fresh per t or shared across tests, as the suite uses node
// ids of its own per subtest and compares positions only with each other.
// The factory owns cleanup (t.Cleanup): the suite never calls Close.
type Factory func(t *testing.T, node string) intake.Intake

// timeout bounds every call the suite makes.
const timeout = 30 * time.Second

// Limits are what the suite must know of the adapters factory builds.
type Limits struct {
	// MaxRecordBytes is the largest record (value and headers) the
	// adapter accepts; the suite publishes a record of twice that and
	// expects it refused Permanent. Required (> 0).
	MaxRecordBytes int64
}

// Run runs the contract suite against the adapter factory builds. Each case
// states which part of the intake.Intake contract it checks.
func Run(t *testing.T, factory Factory, lim Limits) {
	if lim.MaxRecordBytes <= 0 {
		t.Fatal("intaketest.Run: Limits.MaxRecordBytes must be > 0")
	}
	t.Run("PublishReturnsIncreasingPositions", func(t *testing.T) { testIncreasingPositions(t, factory) })
	t.Run("ReplayFromStartReturnsAllFieldsInOrder", func(t *testing.T) { testReplayAll(t, factory) })
	t.Run("ReplayFromPositionIsExclusive", func(t *testing.T) { testReplayFrom(t, factory) })
	t.Run("ReplayFiltersByNode", func(t *testing.T) { testReplayFiltersNode(t, factory) })
	t.Run("ReplayOfNodeWithoutRecordsEnds", func(t *testing.T) { testReplayEmpty(t, factory) })
	t.Run("ReplaySkipsUnknownVersionAndKind", func(t *testing.T) { testReplaySkipsUnknown(t, factory) })
	t.Run("ReplayStopsOnCallbackError", func(t *testing.T) { testReplayStops(t, factory) })
	t.Run("DuplicatePublishIsReplayedTwice", func(t *testing.T) { testDuplicate(t, factory) })
	t.Run("ConcurrentPublishersGetDistinctPositions", func(t *testing.T) { testConcurrent(t, factory) })
	t.Run("ReadyOnHealthyLog", func(t *testing.T) { testReady(t, factory) })
	t.Run("EarliestIsAtOrBeforeFirstPosition", func(t *testing.T) { testEarliest(t, factory) })
	t.Run("DescribeIsNotEmpty", func(t *testing.T) { testDescribe(t, factory) })
	t.Run("VerifyPassesOnHealthyLog", func(t *testing.T) { testVerify(t, factory) })
	t.Run("ErrorClasses", func(t *testing.T) { testErrorClasses(t, factory) })
	t.Run("OversizeRecordIsPermanentAndWritesNothing", func(t *testing.T) { testOversize(t, factory, lim) })
	t.Run("RecordAtTheBoundIsAccepted", func(t *testing.T) { testAtBound(t, factory, lim) })
	t.Run("EndedContextIsHonoured", func(t *testing.T) { testContext(t, factory) })
	t.Run("CloseIsIdempotentAndLaterCallsFail", func(t *testing.T) { testClose(t, factory) })
}

// Replayed is one record returned by Replay with its position.
type Replayed struct {
	Rec intake.Record
	Pos intake.Position
}

// ReplayAll collects everything Replay returns after from.
func ReplayAll(t testing.TB, in intake.Intake, from intake.Position) []Replayed {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var out []Replayed
	err := in.Replay(ctx, from, func(r intake.Record, p intake.Position) error {
		out = append(out, Replayed{Rec: r, Pos: p})
		return nil
	})
	if err != nil {
		t.Fatalf("replay from %d: %v", from, err)
	}
	return out
}

// NewRecord returns a record of node with every field set and distinct: a
// random id, a value with bytes that are not text.
func NewRecord(node string, seq uint64) intake.Record {
	r := intake.Record{
		Version:     intake.RecordVersion,
		Kind:        intake.KindHook,
		Node:        node,
		Seq:         seq,
		Incarnation: fmt.Sprintf("inc-%d", seq%3),
		Tenant:      fmt.Sprintf("tenant-%d", seq%5),
		Source:      fmt.Sprintf("source-%d", seq%7),
		Value:       append([]byte{'A', 'E', 1, 0, 0xff, 0xfe}, fmt.Sprintf("hook %d", seq)...),
	}
	_, _ = rand.Read(r.ID[:])
	return r
}

// RecordsEqual reports whether a and b carry the same fields and bytes (a
// nil and an empty Value are equal).
func RecordsEqual(a, b intake.Record) bool {
	return a.Version == b.Version && a.Kind == b.Kind && a.Node == b.Node &&
		a.Seq == b.Seq && a.ID == b.ID && a.Incarnation == b.Incarnation &&
		a.Tenant == b.Tenant && a.Source == b.Source && bytes.Equal(a.Value, b.Value)
}

// nodeID returns a node id of its own for one subtest, safe in a file name,
// a Kafka key and a NATS subject token.
func nodeID(suffix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "it-" + hex.EncodeToString(b[:]) + "-" + suffix
}

func publish(t *testing.T, in intake.Intake, recs ...intake.Record) intake.Position {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	p, err := in.PublishBatch(ctx, recs)
	if err != nil {
		t.Fatalf("publish %d records: %v", len(recs), err)
	}
	if p < 0 {
		t.Fatalf("publish %d records: position %d < 0", len(recs), p)
	}
	return p
}

// expect checks that got holds exactly want, in order, with strictly
// increasing positions.
func expect(t *testing.T, got []Replayed, want []intake.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if !RecordsEqual(got[i].Rec, want[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i].Rec, want[i])
		}
		if i > 0 && got[i].Pos <= got[i-1].Pos {
			t.Errorf("position of record %d is %d, not after %d", i, got[i].Pos, got[i-1].Pos)
		}
	}
}

func testIncreasingPositions(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	r := []intake.Record{NewRecord(node, 1), NewRecord(node, 2), NewRecord(node, 3), NewRecord(node, 4)}
	p1 := publish(t, in, r[0], r[1], r[2])
	p2 := publish(t, in, r[3])
	if p2 <= p1 {
		t.Fatalf("second batch confirmed at %d, not after the first's %d", p2, p1)
	}
	got := ReplayAll(t, in, -1)
	expect(t, got, r)
	// The confirm is the position of the batch's last record.
	if got[2].Pos != p1 || got[3].Pos != p2 {
		t.Errorf("replayed positions %d and %d, confirms were %d and %d", got[2].Pos, got[3].Pos, p1, p2)
	}
}

func testReplayAll(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	var want []intake.Record
	for batch := range 3 {
		var recs []intake.Record
		for i := range batch + 1 {
			recs = append(recs, NewRecord(node, uint64(10*batch+i+1)))
		}
		recs[0].Value = nil // an empty value survives too
		recs[len(recs)-1].Tenant = "tenant with spaces ü"
		publish(t, in, recs...)
		want = append(want, recs...)
	}
	expect(t, ReplayAll(t, in, -1), want)
}

func testReplayFrom(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	var recs []intake.Record
	var pos []intake.Position
	for i := range 5 {
		r := NewRecord(node, uint64(i+1))
		recs = append(recs, r)
		pos = append(pos, publish(t, in, r))
	}
	expect(t, ReplayAll(t, in, pos[2]), recs[3:])
	if got := ReplayAll(t, in, pos[4]); len(got) != 0 {
		t.Errorf("replay from the last position returned %d records", len(got))
	}
	got := ReplayAll(t, in, pos[0])
	expect(t, got, recs[1:])
	for i, g := range got {
		if g.Pos != pos[i+1] {
			t.Errorf("record %d replayed at %d, confirmed at %d", i+1, g.Pos, pos[i+1])
		}
	}
}

func testReplayFiltersNode(t *testing.T, factory Factory) {
	na, nb := nodeID("a"), nodeID("b")
	a, b := factory(t, na), factory(t, nb)
	var wantA, wantB []intake.Record
	for i := range 4 {
		ra := NewRecord(na, uint64(i+1))
		rb := []intake.Record{NewRecord(nb, uint64(2*i+1)), NewRecord(nb, uint64(2*i+2))}
		publish(t, a, ra)
		publish(t, b, rb...)
		wantA = append(wantA, ra)
		wantB = append(wantB, rb...)
	}
	expect(t, ReplayAll(t, a, -1), wantA)
	expect(t, ReplayAll(t, b, -1), wantB)
}

func testReplayEmpty(t *testing.T, factory Factory) {
	na, nb := nodeID("a"), nodeID("b")
	a, b := factory(t, na), factory(t, nb)
	publish(t, a, NewRecord(na, 1), NewRecord(na, 2))
	if got := ReplayAll(t, b, -1); len(got) != 0 {
		t.Fatalf("a node that published nothing replayed %d records", len(got))
	}
}

func testReplaySkipsUnknown(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	known1, known2 := NewRecord(node, 1), NewRecord(node, 4)
	v2 := NewRecord(node, 2)
	v2.Version = "2"
	probe := NewRecord(node, 3)
	probe.Kind = "probe"
	publish(t, in, known1, v2, probe, known2)
	before := in.Skipped()
	expect(t, ReplayAll(t, in, -1), []intake.Record{known1, known2})
	if got := in.Skipped() - before; got != 2 {
		t.Errorf("Skipped grew by %d over a replay passing two unknown records, want 2", got)
	}
}

func testReplayStops(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	publish(t, in, NewRecord(node, 1), NewRecord(node, 2), NewRecord(node, 3))
	stop := errors.New("stop here")
	calls := 0
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	err := in.Replay(ctx, -1, func(intake.Record, intake.Position) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatalf("replay returned %v, want the callback's error", err)
	}
	if calls != 1 {
		t.Fatalf("callback called %d times after returning an error", calls)
	}
}

func testDuplicate(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	r := NewRecord(node, 7)
	p1 := publish(t, in, r)
	p2 := publish(t, in, r)
	got := ReplayAll(t, in, -1)
	switch {
	case p2 == p1:
		// The log collapsed the republish itself (JetStream's duplicate
		// window on Nats-Msg-Id <node>:<seq>): stored once.
		expect(t, got, []intake.Record{r})
		if got[0].Pos != p1 {
			t.Errorf("replayed at %d, confirmed at %d", got[0].Pos, p1)
		}
	case p2 > p1:
		// Dedupe by (node, seq) and id is the reader's job: the log holds both.
		expect(t, got, []intake.Record{r, r})
		if got[0].Pos != p1 || got[1].Pos != p2 {
			t.Errorf("replayed at %d and %d, confirmed at %d and %d", got[0].Pos, got[1].Pos, p1, p2)
		}
	default:
		t.Fatalf("republish confirmed at %d, before the original at %d", p2, p1)
	}
}

func testConcurrent(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	const publishers, batches, size = 4, 5, 3
	type confirm struct {
		pos intake.Position
		seq uint64 // the batch's last seq
	}
	confirms := make([][]confirm, publishers)
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			for b := range batches {
				var recs []intake.Record
				for i := range size {
					recs = append(recs, NewRecord(node, uint64(g*1000+b*size+i+1)))
				}
				p, err := in.PublishBatch(ctx, recs)
				if err != nil {
					t.Errorf("publisher %d batch %d: %v", g, b, err)
					return
				}
				confirms[g] = append(confirms[g], confirm{p, recs[size-1].Seq})
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := map[intake.Position]bool{}
	for g, cs := range confirms {
		for i, c := range cs {
			if seen[c.pos] {
				t.Errorf("position %d confirmed twice", c.pos)
			}
			seen[c.pos] = true
			if i > 0 && c.pos <= cs[i-1].pos {
				t.Errorf("publisher %d: batch %d confirmed at %d, not after %d", g, i, c.pos, cs[i-1].pos)
			}
		}
	}
	got := ReplayAll(t, in, -1)
	if len(got) != publishers*batches*size {
		t.Fatalf("replayed %d records, want %d", len(got), publishers*batches*size)
	}
	bySeq := map[uint64]intake.Position{}
	var order [publishers][]uint64
	for i, g := range got {
		if i > 0 && g.Pos <= got[i-1].Pos {
			t.Errorf("replay positions not increasing: %d after %d", g.Pos, got[i-1].Pos)
		}
		bySeq[g.Rec.Seq] = g.Pos
		if p := g.Rec.Seq / 1000; p < publishers {
			order[p] = append(order[p], g.Rec.Seq)
		} else {
			t.Errorf("replayed seq %d that no publisher wrote", g.Rec.Seq)
		}
	}
	for g, seqs := range order {
		if !slices.IsSorted(seqs) || len(seqs) != batches*size {
			t.Errorf("publisher %d: replayed seqs %v, want %d in publish order", g, seqs, batches*size)
		}
		for _, c := range confirms[g] {
			if bySeq[c.seq] != c.pos {
				t.Errorf("publisher %d: seq %d confirmed at %d, replayed at %d", g, c.seq, c.pos, bySeq[c.seq])
			}
		}
	}
}

func testReady(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	publish(t, in, NewRecord(node, 1))
	if !in.Ready() {
		t.Fatal("Ready is false on a log that just confirmed a publish")
	}
}

func testEarliest(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	first := publish(t, in, NewRecord(node, 1))
	publish(t, in, NewRecord(node, 2))
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	e, err := in.Earliest(ctx)
	if err != nil {
		t.Fatalf("earliest: %v", err)
	}
	if e < 0 || e > first {
		t.Fatalf("earliest %d, first record at %d", e, first)
	}
}

func testDescribe(t *testing.T, factory Factory) {
	if d := factory(t, nodeID("a")).Describe(); d == "" {
		t.Fatal("Describe is empty")
	}
}

func testVerify(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := in.Verify(ctx); err != nil {
		t.Fatalf("Verify on the log the factory set up: %v", err)
	}
	// Verify changes nothing a publish depends on.
	publish(t, in, NewRecord(node, 1))
}

// wantClass fails unless err is an *intake.Error of class c, and checks
// that IsTransient agrees with the class.
func wantClass(t *testing.T, what string, err error, c intake.Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, c)
	}
	var e *intake.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: unclassified error %v, want %s", what, err, c)
	}
	if e.Class != c {
		t.Fatalf("%s: class %s (%v), want %s", what, e.Class, err, c)
	}
	transient, _ := intake.IsTransient(err)
	if want := c == intake.Unavailable || c == intake.Throttled; transient != want {
		t.Fatalf("%s: IsTransient %v for class %s", what, transient, c)
	}
}

// testErrorClasses: a batch the log can never take is Permanent, never
// transient, so the reconciler does not retry it forever.
func testErrorClasses(t *testing.T, factory Factory) {
	in := factory(t, nodeID("a"))
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	_, err := in.PublishBatch(ctx, nil)
	wantClass(t, "publish of an empty batch", err, intake.Permanent)
}

func testOversize(t *testing.T, factory Factory, lim Limits) {
	node := nodeID("a")
	in := factory(t, node)
	small, big := NewRecord(node, 1), NewRecord(node, 2)
	big.Value = bytes.Repeat([]byte{0xA5}, int(2*lim.MaxRecordBytes))
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	_, err := in.PublishBatch(ctx, []intake.Record{small, big})
	wantClass(t, "publish of a record over the size limit", err, intake.Permanent)
	// Refused before anything was written: the small record of the same
	// batch is not in the log either.
	if got := ReplayAll(t, in, -1); len(got) != 0 {
		t.Fatalf("a refused batch left %d records in the log", len(got))
	}
	// The refusal is about that record only: the log still takes others.
	expectAfter := []intake.Record{NewRecord(node, 3)}
	publish(t, in, expectAfter...)
	expect(t, ReplayAll(t, in, -1), expectAfter)
}

// testAtBound: a record whose intake.RecordBound is exactly the limit —
// long tenant, source and incarnation, the rest of the room in its value —
// is accepted: the queue admits up to that bound (ADR section 3: a record
// too large is refused before either half, never stored and then refused
// by the log).
func testAtBound(t *testing.T, factory Factory, lim Limits) {
	node := nodeID("a")
	in := factory(t, node)
	r := NewRecord(node, 1)
	r.Tenant, r.Source = strings.Repeat("t", 128), strings.Repeat("s", 128)
	r.Incarnation = strings.Repeat("i", 64)
	n := lim.MaxRecordBytes - intake.RecordBound(&r, 0)
	if n <= 0 {
		t.Fatalf("Limits.MaxRecordBytes %d leaves no room for a value", lim.MaxRecordBytes)
	}
	r.Value = bytes.Repeat([]byte{0x5A}, int(n))
	if got := intake.RecordBound(&r, len(r.Value)); got != lim.MaxRecordBytes {
		t.Fatalf("bound %d, want %d", got, lim.MaxRecordBytes)
	}
	publish(t, in, r)
	expect(t, ReplayAll(t, in, -1), []intake.Record{r})
}

// testContext: a call whose ctx has ended returns promptly with a transient
// error that wraps ctx's, never a confirm.
func testContext(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	publish(t, in, NewRecord(node, 1))
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx, cancel
		}, context.Canceled},
		{"deadline passed", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		}, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := c.ctx()
			defer cancel()
			p, err := in.PublishBatch(ctx, []intake.Record{NewRecord(node, 2)})
			wantClass(t, "publish with an ended ctx", err, intake.Unavailable)
			if !errors.Is(err, c.want) {
				t.Errorf("publish error %v does not wrap %v", err, c.want)
			}
			if p >= 0 {
				t.Errorf("failed publish returned position %d", p)
			}
			err = in.Replay(ctx, -1, func(intake.Record, intake.Position) error { return nil })
			if err == nil || !errors.Is(err, c.want) {
				t.Errorf("replay with an ended ctx returned %v, want an error wrapping %v", err, c.want)
			}
		})
	}
	// The adapter still publishes afterwards: an abandoned attempt leaves
	// nothing behind that fails the next one.
	r := NewRecord(node, 3)
	publish(t, in, r)
	got := ReplayAll(t, in, -1)
	if len(got) == 0 || !RecordsEqual(got[len(got)-1].Rec, r) {
		t.Fatalf("the publish after the ended-ctx attempts is not the last record replayed: %+v", got)
	}
}

func testClose(t *testing.T, factory Factory) {
	node := nodeID("a")
	in := factory(t, node)
	publish(t, in, NewRecord(node, 1))
	if err := in.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := in.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if in.Ready() {
		t.Error("Ready after Close")
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	closed := func(what string, err error) {
		t.Helper()
		wantClass(t, what+" after Close", err, intake.Unavailable)
		if !errors.Is(err, intake.ErrClosed) {
			t.Errorf("%s after Close: %v does not wrap intake.ErrClosed", what, err)
		}
	}
	_, err := in.PublishBatch(ctx, []intake.Record{NewRecord(node, 2)})
	closed("publish", err)
	closed("replay", in.Replay(ctx, -1, func(intake.Record, intake.Position) error {
		t.Error("replay after Close called its callback")
		return nil
	}))
	_, err = in.Earliest(ctx)
	closed("earliest", err)
	closed("verify", in.Verify(ctx))
	if p, ok := in.(intake.Positioner); ok {
		_, err := p.PublishBatchPositions(ctx, []intake.Record{NewRecord(node, 3)})
		closed("publish with positions", err)
	}
	if pa, ok := in.(intake.PartitionAssigner); ok {
		_, err := pa.AssignPartition(ctx, node)
		closed("assign partition", err)
	}
	_ = in.Describe() // must not panic
}
