package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/jetstream"
	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/testutil/natscluster"
)

// fixture is one stream on the shared cluster and a way to open adapters
// on it.
type fixture struct {
	c     *natscluster.Cluster
	fleet string
	cfg   natsjs.StreamConfig
}

func newFixture(t *testing.T, edit func(*natsjs.StreamConfig)) *fixture {
	t.Helper()
	c := sharedCluster(t)
	fleet := newFleet()
	cfg := streamConfig(fleet)
	if edit != nil {
		edit(&cfg)
	}
	return &fixture{c: c, fleet: fleet, cfg: c.CreateStream(t, cfg)}
}

// open opens node's adapter on the fixture's stream; edit adjusts the
// options first.
func (f *fixture) open(t *testing.T, node string, edit func(*jetstream.Options)) *jetstream.Intake {
	t.Helper()
	o := jetstream.Options{
		URL:         f.c.URL(),
		Stream:      f.cfg.Name,
		Fleet:       f.fleet,
		Node:        node,
		VerifyTopic: true,
	}
	if edit != nil {
		edit(&o)
	}
	return open(t, o)
}

// subjectMsgs is how many messages the stream holds on subject.
func (f *fixture) subjectMsgs(t *testing.T, subject string) uint64 {
	t.Helper()
	info := f.c.StreamInfo(t, f.cfg.Name, natsjs.WithSubjectFilter(subject))
	return info.State.Subjects[subject]
}

func replayAll(t *testing.T, in intake.Intake, from intake.Position) []intaketest.Replayed {
	t.Helper()
	return intaketest.ReplayAll(t, in, from)
}

// TestIntake_RecordFormat reads a published record back as a plain
// JetStream message: subject, Nats-Msg-Id, every header, the value bytes.
func TestIntake_RecordFormat(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	node := "fmt-node"
	in := f.open(t, node, nil)
	rec := intaketest.NewRecord(node, 42)
	pos := mustPublish(t, in, rec)

	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	st, err := f.c.JetStream().Stream(ctx, f.cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetMsg(ctx, uint64(pos))
	if err != nil {
		t.Fatalf("get message %d: %v", pos, err)
	}
	if want := jetstream.SubjectPrefix + "." + f.fleet + "." + node; msg.Subject != want || in.Subject() != want {
		t.Errorf("subject %q (adapter says %q), want %q", msg.Subject, in.Subject(), want)
	}
	want := map[string]string{
		"Nats-Msg-Id":            node + ":42",
		intake.HeaderVersion:     intake.RecordVersion,
		intake.HeaderKind:        intake.KindHook,
		intake.HeaderNode:        node,
		intake.HeaderSeq:         "42",
		intake.HeaderID:          uuid.UUID(rec.ID).String(),
		intake.HeaderIncarnation: rec.Incarnation,
		intake.HeaderTenant:      rec.Tenant,
		intake.HeaderSource:      rec.Source,
	}
	for k, v := range want {
		if got := msg.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if !bytes.Equal(msg.Data, rec.Value) {
		t.Errorf("data %q, want %q", msg.Data, rec.Value)
	}
	if got := jetstream.MsgID(node, 42); got != node+":42" {
		t.Errorf("MsgID = %q", got)
	}
}

// TestIntake_DuplicateWindowCollapsesRepublish: the same (node, seq)
// published again inside the stream's duplicate window is stored once and
// confirmed at the original's position, in a later batch or in the same
// one; the same hook id under a new seq is a new record.
func TestIntake_DuplicateWindowCollapsesRepublish(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	node := "dup-node"
	in := f.open(t, node, nil)
	r := intaketest.NewRecord(node, 7)
	p1 := mustPublish(t, in, r)
	p2 := mustPublish(t, in, r)
	if p2 != p1 {
		t.Errorf("republish confirmed at %d, want the original's %d", p2, p1)
	}
	if n := f.subjectMsgs(t, in.Subject()); n != 1 {
		t.Fatalf("stream holds %d messages of the node after a republish, want 1", n)
	}

	r8 := intaketest.NewRecord(node, 8)
	p3 := mustPublish(t, in, r8, r8)
	if p3 <= p1 {
		t.Errorf("batch confirmed at %d, not after %d", p3, p1)
	}
	again := r8
	again.Seq = 9 // a new seq is a new message id, whatever the hook id
	p4 := mustPublish(t, in, again)
	if n := f.subjectMsgs(t, in.Subject()); n != 3 {
		t.Fatalf("stream holds %d messages of the node, want 3 (seq 7, 8, 9)", n)
	}
	got := replayAll(t, in, -1)
	if len(got) != 3 || got[0].Pos != p1 || got[1].Pos != p3 || got[2].Pos != p4 ||
		!intaketest.RecordsEqual(got[0].Rec, r) || !intaketest.RecordsEqual(got[1].Rec, r8) ||
		!intaketest.RecordsEqual(got[2].Rec, again) {
		t.Fatalf("replayed %+v, want seq 7 at %d, 8 at %d, 9 at %d", got, p1, p3, p4)
	}
}

// TestIntake_ReplayFiltersAndSkips interleaves two nodes' records with
// messages a reader must skip on the node's own subject (an unknown kind,
// an unknown version, no headers, a bad seq, a bad id): replay returns only
// the node's known records, in order, counts the skipped ones, starts after
// a position that belongs to another node, and ends although the stream
// keeps growing past the node's last record.
func TestIntake_ReplayFiltersAndSkips(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	a, b := f.open(t, "node-a", nil), f.open(t, "node-b", nil)
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	raw := func(h nats.Header) {
		t.Helper()
		if _, err := f.c.JetStream().PublishMsg(ctx, &nats.Msg{Subject: a.Subject(), Header: h, Data: []byte("x")}); err != nil {
			t.Fatalf("raw publish: %v", err)
		}
	}
	good := func(seq uint64, mut func(*intake.Record)) intake.Record {
		r := intaketest.NewRecord("node-a", seq)
		if mut != nil {
			mut(&r)
		}
		return r
	}
	hdr := func(r intake.Record) nats.Header {
		return nats.Header{
			intake.HeaderVersion: {r.Version}, intake.HeaderKind: {r.Kind}, intake.HeaderNode: {r.Node},
			intake.HeaderSeq: {strconv.FormatUint(r.Seq, 10)}, intake.HeaderID: {uuid.UUID(r.ID).String()},
		}
	}

	var want []intake.Record
	var wantPos []intake.Position
	var bPos intake.Position
	for i := range 60 {
		batch := []intake.Record{good(uint64(2*i+1), nil), good(uint64(2*i+2), nil)}
		wantPos = append(wantPos, 0, mustPublish(t, a, batch...))
		want = append(want, batch...)
		bPos = mustPublish(t, b, intaketest.NewRecord("node-b", uint64(i+1)))
		switch i {
		case 10:
			mustPublish(t, a, good(1000, func(r *intake.Record) { r.Kind = "probe" }))
		case 20:
			mustPublish(t, a, good(1001, func(r *intake.Record) { r.Version = "2" }))
		case 30:
			raw(nil)
		case 40:
			h := hdr(good(1002, nil))
			h.Set(intake.HeaderSeq, "not-a-number")
			raw(h)
		case 50:
			h := hdr(good(1003, nil))
			h.Set(intake.HeaderID, "not-a-uuid")
			raw(h)
		}
	}
	mustPublish(t, b, intaketest.NewRecord("node-b", 999)) // the stream goes on past a's last record

	got := replayAll(t, a, -1)
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if !intaketest.RecordsEqual(got[i].Rec, want[i]) {
			t.Fatalf("record %d: got seq %d, want seq %d", i, got[i].Rec.Seq, want[i].Seq)
		}
		if i > 0 && got[i].Pos <= got[i-1].Pos {
			t.Fatalf("positions not increasing: %d after %d", got[i].Pos, got[i-1].Pos)
		}
		if i%2 == 1 && got[i].Pos != wantPos[i] {
			t.Fatalf("record %d replayed at %d, its batch confirmed at %d", i, got[i].Pos, wantPos[i])
		}
	}
	if n := a.Skipped(); n != 5 {
		t.Errorf("Skipped = %d, want 5 (kind, version, no headers, bad seq, bad id)", n)
	}

	// From a position of node b's, which is not a position of a's.
	bRecs := replayAll(t, b, -1)
	mid := bRecs[len(bRecs)/2].Pos
	var after []intake.Record
	for _, g := range got {
		if g.Pos > mid {
			after = append(after, g.Rec)
		}
	}
	tail := replayAll(t, a, mid)
	if len(tail) != len(after) || len(after) == 0 || !intaketest.RecordsEqual(tail[0].Rec, after[0]) {
		t.Fatalf("replay after node b's position %d returned %d records, want %d", mid, len(tail), len(after))
	}
	if got := replayAll(t, a, bPos); len(got) != 0 {
		t.Fatalf("replay after node b's last position %d (after all of a's) returned %d records", bPos, len(got))
	}
}

// TestIntake_ReplayStopsAtCallTime: records published while a replay runs
// are not part of it.
func TestIntake_ReplayStopsAtCallTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	node := "calltime-node"
	in := f.open(t, node, nil)
	mustPublish(t, in, intaketest.NewRecord(node, 1), intaketest.NewRecord(node, 2))
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	var seqs []uint64
	err := in.Replay(ctx, -1, func(r intake.Record, _ intake.Position) error {
		if r.Seq == 1 {
			mustPublish(t, in, intaketest.NewRecord(node, 3))
		}
		seqs = append(seqs, r.Seq)
		return nil
	})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if fmt.Sprint(seqs) != "[1 2]" {
		t.Fatalf("replayed seqs %v, want [1 2]", seqs)
	}
}

// TestIntake_ErrorClasses drives the refusals a real cluster gives.
func TestIntake_ErrorClasses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *natsjs.StreamConfig) {
		c.Replicas = 1 // classification only; R1 is quicker
		c.MaxMsgSize = 4096
	})
	node := "err-node"
	rec := func(size int) intake.Record {
		r := intaketest.NewRecord(node, 1)
		r.Value = bytes.Repeat([]byte{'x'}, size)
		return r
	}

	t.Run("StreamMaxMsgSizeIsPermanent", func(t *testing.T) {
		in := f.open(t, node, nil)
		_, err := publish(in, callTimeout, rec(8192))
		assertClass(t, err, intake.Permanent)
		if !errors.Is(err, jetstream.ErrTooLarge) {
			t.Errorf("%v does not wrap ErrTooLarge", err)
		}
	})
	t.Run("MaxRecordBytesIsPermanentBeforeSending", func(t *testing.T) {
		in := f.open(t, "err-small", func(o *jetstream.Options) { o.MaxRecordBytes = 1024 })
		r := rec(2048)
		r.Node = "err-small"
		_, err := publish(in, callTimeout, intaketest.NewRecord("err-small", 1), r)
		assertClass(t, err, intake.Permanent)
		if !errors.Is(err, jetstream.ErrTooLarge) {
			t.Errorf("%v does not wrap ErrTooLarge", err)
		}
		if n := f.subjectMsgs(t, in.Subject()); n != 0 {
			t.Errorf("a refused batch left %d messages", n)
		}
	})
	t.Run("ServerMaxPayloadIsPermanent", func(t *testing.T) {
		in := f.open(t, node, nil)
		testutil.Eventually(t, 10*time.Second, "the adapter to connect", in.Ready)
		_, err := publish(in, callTimeout, rec(2<<20)) // the server's max_payload is 1 MiB
		assertClass(t, err, intake.Permanent)
		if !errors.Is(err, jetstream.ErrTooLarge) {
			t.Errorf("%v does not wrap ErrTooLarge", err)
		}
	})
	t.Run("HeaderWithNewlineIsPermanent", func(t *testing.T) {
		in := f.open(t, node, nil)
		r := rec(10)
		r.Tenant = "a\r\nb"
		_, err := publish(in, callTimeout, r)
		assertClass(t, err, intake.Permanent)
	})
	t.Run("RecordOfAnotherNodeIsPermanent", func(t *testing.T) {
		in := f.open(t, node, nil)
		r := rec(10)
		r.Node = "someone-else"
		_, err := publish(in, callTimeout, r)
		assertClass(t, err, intake.Permanent)
	})
	t.Run("EmptyBatchIsPermanent", func(t *testing.T) {
		_, err := publish(f.open(t, node, nil), callTimeout)
		assertClass(t, err, intake.Permanent)
	})
	t.Run("NoStreamCapturesSubjectIsNotFound", func(t *testing.T) {
		in := f.open(t, node, func(o *jetstream.Options) { o.Fleet = newFleet() })
		_, err := publish(in, callTimeout, rec(10))
		assertClass(t, err, intake.NotFound)
		if !errors.Is(err, jetstream.ErrNoStream) {
			t.Errorf("%v does not wrap ErrNoStream", err)
		}
	})
	t.Run("SubjectOfAnotherStreamIsNotFound", func(t *testing.T) {
		in := f.open(t, node, func(o *jetstream.Options) { o.Stream = "ANKUSA_INTAKE_OTHER" })
		_, err := publish(in, callTimeout, rec(10))
		assertClass(t, err, intake.NotFound)
		if n := f.subjectMsgs(t, in.Subject()); n != 0 {
			t.Errorf("a refused publish left %d messages", n)
		}
	})
	t.Run("MissingStreamIsNotFound", func(t *testing.T) {
		in := f.open(t, node, func(o *jetstream.Options) { o.Stream = "ANKUSA_INTAKE_MISSING" })
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		assertClass(t, in.Verify(ctx), intake.NotFound)
		_, err := in.Earliest(ctx)
		assertClass(t, err, intake.NotFound)
		err = in.Replay(ctx, -1, func(intake.Record, intake.Position) error { return nil })
		assertClass(t, err, intake.NotFound)
	})
	t.Run("ClosedIsUnavailable", func(t *testing.T) {
		in, err := jetstream.Open(jetstream.Options{URL: f.c.URL(), Stream: f.cfg.Name, Fleet: f.fleet, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		if err := in.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
		if in.Ready() {
			t.Error("Ready after Close")
		}
		_, err = publish(in, callTimeout, rec(10))
		assertClass(t, err, intake.Unavailable)
		if !errors.Is(err, jetstream.ErrClosed) {
			t.Errorf("%v does not wrap ErrClosed", err)
		}
	})
}

// TestIntake_ServerDownAtOpen: Open does not fail with no server; Ready is
// false and a publish fails Unavailable at once.
func TestIntake_ServerDownAtOpen(t *testing.T) {
	t.Parallel()
	ports, err := natscluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	in := open(t, jetstream.Options{
		URL:    fmt.Sprintf("nats://127.0.0.1:%d", ports[0]),
		Stream: "ANKUSA_INTAKE_X", Fleet: "f", Node: "n",
	})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open took %s with the server down", d)
	}
	if in.Ready() {
		t.Error("Ready with no server")
	}
	start = time.Now()
	_, err = publish(in, 5*time.Second, intaketest.NewRecord("n", 1))
	assertClass(t, err, intake.Unavailable)
	if !errors.Is(err, jetstream.ErrNotConnected) {
		t.Errorf("%v does not wrap ErrNotConnected", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("publish took %s with the server down, want prompt", d)
	}
	if d := in.Describe(); !strings.Contains(d, "replicas=unknown") {
		t.Errorf("Describe before any stream info = %q", d)
	}
}

// TestOpen_Refusals: options Open refuses without dialling.
func TestOpen_Refusals(t *testing.T) {
	t.Parallel()
	base := jetstream.Options{URL: "nats://127.0.0.1:1", Stream: "S", Fleet: "f", Node: "n"}
	for name, edit := range map[string]func(*jetstream.Options){
		"no url":            func(o *jetstream.Options) { o.URL = "" },
		"no stream":         func(o *jetstream.Options) { o.Stream = "" },
		"dotted stream":     func(o *jetstream.Options) { o.Stream = "a.b" },
		"wildcard fleet":    func(o *jetstream.Options) { o.Fleet = "*" },
		"empty node token":  func(o *jetstream.Options) { o.Node = "a..b" },
		"node with >":       func(o *jetstream.Options) { o.Node = ">" },
		"node with space":   func(o *jetstream.Options) { o.Node = "a b" },
		"two credentials":   func(o *jetstream.Options) { o.User, o.Password, o.Token = "u", "p", "t" },
		"password, no user": func(o *jetstream.Options) { o.Password = "p" },
		"negative max":      func(o *jetstream.Options) { o.MaxRecordBytes = -1 },
		"missing creds":     func(o *jetstream.Options) { o.CredsFile = "/nonexistent/creds" },
	} {
		o := base
		edit(&o)
		if in, err := jetstream.Open(o); err == nil {
			_ = in.Close()
			t.Errorf("%s: Open accepted %+v", name, o)
		}
	}
}

// TestIntake_PublishBatchPositions: two nodes publish concurrently into one
// stream, so a batch's records are not at contiguous positions; each
// record's position from PublishBatchPositions is where replay finds it, and
// a collapsed republish reports its original's (lower) position.
func TestIntake_PublishBatchPositions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	nodes := []string{"pos-a", "pos-b"}
	ins := []*jetstream.Intake{f.open(t, nodes[0], nil), f.open(t, nodes[1], nil)}
	const batches, size = 20, 5
	confirmed := make([]map[uint64]intake.Position, len(nodes))
	var wg sync.WaitGroup
	for n := range nodes {
		confirmed[n] = map[uint64]intake.Position{}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
			defer cancel()
			for b := range batches {
				var recs []intake.Record
				for i := range size {
					recs = append(recs, intaketest.NewRecord(nodes[n], uint64(b*size+i+1)))
				}
				pos, err := ins[n].PublishBatchPositions(ctx, recs)
				if err != nil {
					t.Errorf("node %s batch %d: %v", nodes[n], b, err)
					return
				}
				for i, r := range recs {
					confirmed[n][r.Seq] = pos[i]
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	gaps := 0
	for n := range nodes {
		got := replayAll(t, ins[n], -1)
		if len(got) != batches*size {
			t.Fatalf("node %s replayed %d records, want %d", nodes[n], len(got), batches*size)
		}
		for i, g := range got {
			if confirmed[n][g.Rec.Seq] != g.Pos {
				t.Errorf("node %s seq %d replayed at %d, confirmed at %d", nodes[n], g.Rec.Seq, g.Pos, confirmed[n][g.Rec.Seq])
			}
			if i%size > 0 && g.Pos != got[i-1].Pos+1 {
				gaps++
			}
		}
	}
	t.Logf("%d records sat after another node's record inside their own batch", gaps)

	// [new seq 1000, republished seq 1]: the second position is lower.
	in := ins[0]
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	fresh := intaketest.NewRecord(nodes[0], 1000)
	old := intaketest.NewRecord(nodes[0], 1)
	pos, err := in.PublishBatchPositions(ctx, []intake.Record{fresh, old})
	if err != nil {
		t.Fatal(err)
	}
	if pos[1] != confirmed[0][1] || pos[0] <= pos[1] {
		t.Errorf("positions %v, want [new, %d]", pos, confirmed[0][1])
	}
	last, err := in.PublishBatch(ctx, []intake.Record{fresh, old})
	if err != nil || last != confirmed[0][1] {
		t.Errorf("PublishBatch of the same = %d, %v; want the last record's original position %d", last, err, confirmed[0][1])
	}
}
