package kafka_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
)

// rawRecord is a record for partition p with the given headers (name,
// value pairs), written by a plain kgo client, not the adapter.
func rawRecord(p int32, key string, hs ...string) *kgo.Record {
	r := &kgo.Record{Partition: p, Key: []byte(key), Value: []byte("raw")}
	for i := 0; i+1 < len(hs); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: hs[i], Value: []byte(hs[i+1])})
	}
	return r
}

// headers are a complete intake header set for node, with overrides.
func headers(node string, over map[string]string) []string {
	h := map[string]string{
		intake.HeaderVersion: "1", intake.HeaderKind: "hook", intake.HeaderNode: node,
		intake.HeaderSeq: "99", intake.HeaderID: uuid.NewString(),
		intake.HeaderIncarnation: "0", intake.HeaderTenant: "t", intake.HeaderSource: "s",
	}
	for k, v := range over {
		h[k] = v
	}
	var out []string
	for k, v := range h {
		out = append(out, k, v)
	}
	return out
}

// TestReplay_FiltersNodeSkipsUnknownReturnsDuplicates: two nodes share a
// partition with records a plain client wrote (a probe, a version 2
// record, unreadable seq and id, no headers at all). Each node replays
// exactly its own hook records, in log order, a republished record twice;
// the unknown and unreadable records of the node are skipped and counted,
// other writers' records are passed over uncounted.
func TestReplay_FiltersNodeSkipsUnknownReturnsDuplicates(t *testing.T) {
	c := newCluster(t)
	const p = 1
	a, b := open(t, c, "node-a", p), open(t, c, "node-b", p)
	raw := rawProducer(t, c)

	a1, a2 := rec("node-a", 1), rec("node-a", 2)
	b1 := rec("node-b", 1)
	mustPublish(t, a, a1)
	mustPublish(t, b, b1)
	res := raw.ProduceSync(ctxT(t),
		rawRecord(p, "node-a", headers("node-a", map[string]string{intake.HeaderKind: "probe"})...),
		rawRecord(p, "node-a", headers("node-a", map[string]string{intake.HeaderVersion: "2"})...),
		rawRecord(p, "node-a", headers("node-a", map[string]string{intake.HeaderSeq: "seven"})...),
		rawRecord(p, "node-a", headers("node-a", map[string]string{intake.HeaderID: "not-a-uuid"})...),
		rawRecord(p, "node-a"), // no headers: not an intake record
		rawRecord(p, "node-c", headers("node-c", map[string]string{intake.HeaderKind: "probe"})...),
	)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, a, a2)
	mustPublish(t, a, a1) // the reconciler's republish of a lost ack

	gotA := replayAll(t, a, -1)
	expectRecords(t, gotA, []intake.Record{a1, a2, a1})
	if gotA[0].Pos == gotA[2].Pos {
		t.Errorf("the duplicate replayed at the same position %d", gotA[0].Pos)
	}
	if n := a.Skipped(); n != 4 {
		t.Errorf("node-a skipped %d records, want 4 (probe, version 2, bad seq, bad id)", n)
	}
	expectRecords(t, replayAll(t, b, -1), []intake.Record{b1})
	if n := b.Skipped(); n != 0 {
		t.Errorf("node-b skipped %d records, want 0 (none of the odd records are its)", n)
	}

	// From a position: exclusive, and the filter still applies.
	expectRecords(t, replayAll(t, a, gotA[1].Pos), []intake.Record{a1})
}

// TestReplay_StopsAtCallTimeEnd: records published while a replay runs are
// not part of it (the end is the high watermark when Replay was called).
func TestReplay_StopsAtCallTimeEnd(t *testing.T) {
	c := newCluster(t)
	const node = "node-a"
	in := open(t, c, node, 0)
	r1, r2 := rec(node, 1), rec(node, 2)
	mustPublish(t, in, r1, r2)
	var got []intake.Record
	late := rec(node, 3)
	err := in.Replay(ctxT(t), -1, func(r intake.Record, _ intake.Position) error {
		if len(got) == 0 {
			mustPublish(t, in, late)
		}
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !intaketest.RecordsEqual(got[0], r1) || !intaketest.RecordsEqual(got[1], r2) {
		t.Fatalf("replayed %+v, want the two records present at the call", got)
	}
	expectRecords(t, replayAll(t, in, -1), []intake.Record{r1, r2, late})
}

// TestReplay_UnstampedReadsEveryPartition: a node restored without its
// partition stamp still finds its records, wherever they are.
func TestReplay_UnstampedReadsEveryPartition(t *testing.T) {
	c := newCluster(t)
	const node = "node-a"
	r0, r2 := rec(node, 1), rec(node, 2)
	mustPublish(t, open(t, c, node, 0), r0)
	mustPublish(t, open(t, c, node, 2), r2)
	mustPublish(t, open(t, c, "node-b", 1), rec("node-b", 1))

	in := open(t, c, node, -1)
	got := replayAll(t, in, -1) // partition by partition; positions are per partition
	if len(got) != 2 || !intaketest.RecordsEqual(got[0].Rec, r0) || !intaketest.RecordsEqual(got[1].Rec, r2) {
		t.Fatalf("replayed %+v, want the records of partitions 0 and 2 in that order", got)
	}
	if got[0].Pos != 0 || got[1].Pos != 0 {
		t.Errorf("positions %d and %d, want each record's offset in its partition (0)", got[0].Pos, got[1].Pos)
	}
	err := in.Replay(ctxT(t), 0, func(intake.Record, intake.Position) error { return nil })
	wantClass(t, err, intake.Permanent)
}

// TestReplay_RetentionMovesEarliest: records deleted below a point (kadm
// DeleteRecords, as retention does) move Earliest, and a replay from before
// it starts at the log start instead of failing.
func TestReplay_RetentionMovesEarliest(t *testing.T) {
	c := newCluster(t)
	const node = "node-a"
	in := open(t, c, node, 0)
	var recs []intake.Record
	for i := range 5 {
		r := rec(node, uint64(i+1))
		recs = append(recs, r)
		mustPublish(t, in, r)
	}
	if e, err := in.Earliest(ctxT(t)); err != nil || e != 0 {
		t.Fatalf("Earliest = %d, %v; want 0", e, err)
	}
	adm := newAdmin(t, c)
	resp, err := adm.DeleteRecords(ctxT(t), kadm.OffsetsList{{Topic: topic, Partition: 0, At: 3, LeaderEpoch: -1}}.Offsets())
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Error(); err != nil {
		t.Fatal(err)
	}
	if e, err := in.Earliest(ctxT(t)); err != nil || e != 3 {
		t.Fatalf("Earliest after deleting below 3 = %d, %v; want 3", e, err)
	}
	expectRecords(t, replayAll(t, in, -1), recs[3:])
	expectRecords(t, replayAll(t, in, 1), recs[3:])
	expectRecords(t, replayAll(t, in, 3), recs[4:])
}

// TestReplay_Context: a replay whose ctx is already over is Unavailable.
func TestReplay_Context(t *testing.T) {
	c := newCluster(t)
	const node = "node-a"
	in := open(t, c, node, 0)
	mustPublish(t, in, rec(node, 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := in.Replay(ctx, -1, func(intake.Record, intake.Position) error { return nil })
	wantClass(t, err, intake.Unavailable)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}
