package sim

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// The invariants of issue 11, checked by the functions below. Cited as
// "rule N" in this package and in docs/testing.md's Simulation section, and
// reported as "inv N" (violation.inv); they are not the ack protocol's
// rules (internal/queue/queue.go, cited as "ack rule N"):
//
//  1. every hook answered 201 is delivered at least once (or dead-lettered
//     by a sink that refused it), with a byte-identical body, after recovery
//     and drain — checkDrained, and simSink.Deliver for the body;
//  2. a 201 duplicate only names a hook durable in the store (disk) and in
//     the log too (dual) — onAck;
//  3. a second hook id for one dedupe key only past the reconcile deadline
//     of a refused original — onAck;
//  4. the watermark never passes an unconfirmed seq, the offset never passes
//     a record that is only in the log — checkMarks;
//  5. a second boot recovery changes nothing — checkRecoveryIdempotent (and
//     boot recovery succeeds once every fault is off);
//  6. a seq never names two hook ids — onAck, checkSeqs, recover;
//  7. the counters equal a fold over the rows — checkCounters;
//  8. no acked hook is undone by a fence or lost by a crash of the local
//     disk — checkAckedPresent.
//
// Besides them: L, the node answers 201 again once every fault healed
// (checkLive); C, boot recovery refuses a fresh or restored store over a
// log truncated past what it needs (recover); and W, no single delete of
// the dispatcher's breaks the store's W1 (store/delivery.go) over the
// whole schedule's history, crashes and reopens included
// (checkSingleDeletes).
//
// And for the release class (release_test.go), whose holds are answered
// 202 and released under ack rule 7 of internal/queue:
//
//   - Q, a held hook is never lost: every 202 is, at every checkpoint and
//     right after a crash's reopen, in the pen or stored (checkHeldPresent),
//     and after the final release job and the drain, still in the pen or
//     delivered to each sink of its source or dead-lettered (drain,
//     owedHeld), with its body (simSink.Deliver);
//   - R, a hook id is committed once: it is never stored or delivered under
//     two seqs (noteSeqLocked, from every delivery, every 201 new and every
//     scan of the durable rows). A redelivery of one seq after a crash is
//     at-least-once and allowed; a second seq is a second commit;
//   - P, the pen's counters (Pen.Stats) equal a walk of its rows (Pen.List)
//     at the end, when no hold or release is in flight (checkPen).
//
// And for the resend class: S, an answered resend is not lost (stated in
// resend_test.go; checked by unresent, after the drain); for the dlq
// class: D, an answered dlq replay job finishes its work (stated in
// dlqreplay_test.go; checked by unfinishedJobs, after the drain).

// checkpoint runs the cheap checks at a quiescent instant; final is the
// one after the drain.
func (w *world) checkpoint(final bool) {
	n := w.current()
	if n == nil {
		return
	}
	if n.q.Stats().Fenced {
		return
	}
	w.checkAckedPresent(n, "at a checkpoint")
	w.checkHeldPresent(n, "at a checkpoint")
	w.checkSeqs(n)
	w.checkCounters(n, final)
	if w.cfg.dual {
		w.checkMarks(n)
	}
}

// checkSingleDeletes: W. A full compaction makes Pebble meet every single
// delete still on disk with what lies beneath it, from every life of the
// node's store, and report one that met no SET or more than one.
func (w *world) checkSingleDeletes(n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.st.Compact(ctx); err != nil {
		w.tracef("compact for W: %v", err) // a store the faults left failed: nothing to check
		return
	}
	var m uint64
	for _, st := range w.stores {
		m += st.SingleDeleteMisuses() // a flush of an earlier life may have met one
	}
	if m != 0 {
		w.violate("W", "Pebble reported %d single delete misuses (store W1) over the node's lives, the last ending in a full compaction", m)
	}
}

// pendingAcks is every acked hook not yet delivered to all its sinks (a
// fully delivered hook may have been reclaimed) and not excused.
func (w *world) pendingAcks() map[[16]byte]*ackInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[[16]byte]*ackInfo{}
	for id, a := range w.acks {
		if !w.excused[id] && !w.fullyDeliveredLocked(id, a.source) {
			out[id] = a
		}
	}
	return out
}

// checkAckedPresent: rule 8.
func (w *world) checkAckedPresent(n *node, when string) {
	for id, a := range w.pendingAcks() {
		v, err := n.st.Get(store.HookIDKey(id))
		if err != nil {
			continue
		}
		if v == nil {
			w.violate("8", "acked hook of req %d is not in the store %s", a.req, when)
		}
	}
}

// checkSeqs: rule 6 over the durable rows.
func (w *world) checkSeqs(n *node) {
	durable := n.q.Durable()
	type row struct {
		seq uint64
		id  [16]byte
	}
	var rows []row
	_ = n.st.Scan([]byte{store.PrefixHook}, []byte{store.PrefixHook + 1}, func(k, v []byte) bool {
		if env, err := store.DecodeEnvelope(v); err == nil && env.Seq <= durable {
			rows = append(rows, row{env.Seq, env.ID})
		}
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range rows {
		if prev, ok := w.seqID[r.seq]; ok && prev != r.id {
			w.violateLocked("6", "a durable seq names a second hook id in the store")
		}
		w.seqID[r.seq] = r.id
		w.noteSeqLocked(r.id, r.seq, "stored")
	}
}

// noteSeqLocked: R. It records that hook id was stored, acked or delivered
// under seq, and reports the id once it has a second seq. REQUIRES: w.mu
// held.
func (w *world) noteSeqLocked(id [16]byte, seq uint64, how string) {
	seqs := w.idSeqs[id]
	if seqs == nil {
		seqs = map[uint64]bool{}
		w.idSeqs[id] = seqs
	}
	if seqs[seq] {
		return
	}
	seqs[seq] = true
	if len(seqs) < 2 || w.twice[id] {
		return
	}
	w.twice[id] = true
	if w.excused[id] {
		// Its log record aged out and the operator accepted the gap: the
		// store forgot the commit with it (a restored pen row is released
		// again), as rule 1 forgives the loss of such a hook.
		w.tracefLocked("R excused: a hook lost in an accepted gap was committed again")
		return
	}
	what := "a hook no provider was answered for"
	if h := w.held[id]; h != nil {
		what = fmt.Sprintf("the held hook of req %d", h.req)
	} else if a := w.acks[id]; a != nil {
		what = fmt.Sprintf("the acked hook of req %d", a.req)
	}
	extra := ""
	if h := w.held[id]; h != nil && h.both {
		extra = " (a boot found it stored and still in the pen: ack rule 7's exception)"
	}
	if os.Getenv("SIM_DEBUG") != "" {
		extra += fmt.Sprintf(" [seqs %v landed %v]", seqs, w.landed[id])
	}
	w.violateLocked("R", "%s was %s under a second seq: one id committed twice%s", what, how, extra)
}

// checkHeldPresent: Q at an instant. Every held hook whose provider saw the
// 202 and that no sink has is in the pen or in the store (its pen row
// leaves in the batch that writes its hook, ack rule 7 (b); a fence puts
// it back). A hook delivered may have been reclaimed.
func (w *world) checkHeldPresent(n *node, when string) {
	w.mu.Lock()
	var check []*heldInfo
	for id, h := range w.held {
		if h.answered && !h.lost && !w.excused[id] && w.delivered[id] == nil {
			check = append(check, h)
		}
	}
	w.mu.Unlock()
	for _, h := range check {
		pv, err1 := n.st.ReadPen(h.ref)
		iv, err2 := n.st.Get(store.HookIDKey(h.ref.ID))
		if err1 != nil || err2 != nil {
			continue
		}
		if pv == nil && iv == nil {
			w.violate("Q", "held hook (202) of req %d is neither in the pen nor in the store %s", h.req, when)
		}
	}
}

// owedHeld is every held hook whose provider saw the 202, no longer in the
// pen (released) and not yet delivered to all its sinks: the drain waits
// for them as for rule 1's acks.
func (w *world) owedHeld(n *node) map[[16]byte]*ackInfo {
	w.mu.Lock()
	var check []*heldInfo
	for id, h := range w.held {
		if h.answered && !h.lost && !w.excused[id] && !w.fullyDeliveredLocked(id, h.source) {
			check = append(check, h)
		}
	}
	w.mu.Unlock()
	out := map[[16]byte]*ackInfo{}
	for _, h := range check {
		if pv, err := n.st.ReadPen(h.ref); err != nil || pv != nil {
			continue // still held: a 202 may stay in the pen
		}
		out[h.ref.ID] = &h.ackInfo
	}
	return out
}

// checkPen: P. The pen's counters, kept by holds, releases (a taken row, a
// carried one settled later) and purges, equal a walk of its rows.
func (w *world) checkPen(n *node) {
	if w.cfg.release == 0 {
		return
	}
	records, bytes := n.pen.Stats()
	total, entries, err := n.pen.List(quarantine.Filter{Limit: quarantine.MaxListLimit})
	if err != nil || total > len(entries) {
		w.tracef("pen walk: %d rows, %v", total, err) // nothing to compare
		return
	}
	var sum int64
	for _, e := range entries {
		sum += e.Size
	}
	if records != total || bytes != sum {
		w.mu.Lock()
		refused := w.leftRows
		w.mu.Unlock()
		w.violate("P", "pen counters records=%d bytes=%d, rows records=%d bytes=%d (%d refused holds left their rows)", records, bytes, total, sum, refused)
	}
	w.tracef("pen at the end: %d held", total)
}

// checkCounters: rule 7.
func (w *world) checkCounters(n *node, final bool) {
	s := n.q.Stats()
	if s.Fenced {
		return
	}
	h, err1 := n.st.Count([]byte{store.PrefixHook})
	d, err2 := n.st.Count([]byte{store.PrefixDelivery})
	x, err3 := n.st.Count([]byte{store.PrefixDead})
	q, err4 := n.st.Count([]byte{store.PrefixDue})
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return
	}
	if s.Hooks != h || s.Deliveries != d {
		w.violate("7", "counters hooks=%d deliveries=%d, rows hooks=%d deliveries=%d", s.Hooks, s.Deliveries, h, d)
	}
	g := n.d.Gauges()
	if uint64(g.Dead) != x {
		w.violate("7", "dead gauge %d, dead rows %d", g.Dead, x)
	}
	// The store's due count (store.DueRows, kept by the batches, behind the
	// pending gauge) after every fault the schedule injected.
	if due, err := n.st.DueRows(); err == nil && due != q {
		w.violate("7", "due count %d, due rows %d", due, q)
	}
	// A delivery in flight is due in the store (the dispatcher's claim is in
	// memory) and counted in flight, not pending; so the gauges add up to
	// the due rows, once the drain is over. Before it, a claim read from a
	// write a store reopen then dropped (an unsynced dlq step, a resend
	// answered 503 whose batch Pebble had applied) holds no due row while
	// its attempt runs or waits for a worker (its outcome is then not
	// written, R1).
	if final && uint64(g.Pending+g.Inflight) != q {
		w.violate("7", "pending gauge %d + inflight %d, due rows %d", g.Pending, g.Inflight, q)
	}
	if w.cfg.history == "" {
		return
	}
	var hooks, bytes int64
	if err := n.st.ScanRetained(func(r store.RetainedRow) bool {
		hooks++
		bytes += r.Size
		return true
	}); err != nil {
		return
	}
	if g := n.d.Gauges(); g.HistoryHooks != hooks || g.HistoryBytes != bytes {
		w.violate("7", "history gauges %d hooks, %d bytes; retained rows %d, %d bytes", g.HistoryHooks, g.HistoryBytes, hooks, bytes)
	}
}

// checkMarks: rule 4, for the live marks and the stored ones.
func (w *world) checkMarks(n *node) {
	ds, _ := n.q.Dual()
	wms := []uint64{ds.Watermark}
	offs := []intake.Position{intake.Position(ds.Offset)}
	if v, _ := n.st.Get(store.KeyIntakeSeq); v != nil {
		if u, ok := store.ParseU64(v); ok {
			wms = append(wms, u)
		}
	}
	if v, _ := n.st.Get(store.KeyIntakeOffset); v != nil {
		if u, ok := store.ParseU64(v); ok {
			offs = append(offs, intake.Position(u))
		}
	}
	wm, off := wms[0], offs[0]
	for _, x := range wms {
		wm = max(wm, x)
	}
	for _, x := range offs {
		off = max(off, x)
	}
	type hook struct {
		seq uint64
		id  [16]byte
	}
	var below []hook
	_ = n.st.Scan(store.HookKey(1), store.HookKey(wm+1), func(k, v []byte) bool {
		if env, err := store.DecodeEnvelope(v); err == nil {
			below = append(below, hook{env.Seq, env.ID})
		}
		return true
	})
	// A record is missed by a replay from offset+1 when every copy of it
	// sits at or below the offset and the store does not hold it.
	earliest, _ := n.log.Earliest(context.Background())
	lastCopy := map[[16]byte]intake.Position{}
	for i, r := range n.log.Records() {
		if r.Node == nodeID {
			lastCopy[r.ID] = earliest + intake.Position(i)
		}
	}
	var missed [][16]byte
	for id, pos := range lastCopy {
		if pos > off {
			continue
		}
		if v, err := n.st.Get(store.HookIDKey(id)); err == nil && v == nil {
			missed = append(missed, id)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range below {
		if !w.landed[h.id] {
			w.violateLocked("4", "the watermark passed a hook the log never got%s", w.debugMarks(n, h.seq, wms))
			break
		}
	}
	for _, id := range missed {
		// Only a record the node knows is in the log (confirmed) or that a
		// provider was acked for counts: a lost confirm is unknowable.
		if (w.confirmed[id] || w.acks[id] != nil) && w.delivered[id] == nil && !w.excused[id] {
			w.violateLocked("4", "the offset passed a record that is only in the log")
			break
		}
	}
}

// undelivered: rule 1, after the drain. It returns the acked hooks some
// sink still owes, and why: "gone" (not in the store), "stale due" (a due
// row whose time passed long ago that the dispatcher never claims — the
// signature of a due key written behind its scan cursor), or "other".
func (w *world) undelivered(n *node) (reqs []int, why map[string]int) {
	return w.undeliveredOf(n, w.pendingAcks())
}

// undeliveredOf is undelivered over the given hooks.
func (w *world) undeliveredOf(n *node, owed map[[16]byte]*ackInfo) (reqs []int, why map[string]int) {
	why = map[string]int{}
	nowMs := time.Now().UnixMilli()
	for id, a := range owed {
		v, err := n.st.Get(store.HookIDKey(id))
		seq, ok := store.ParseU64(v)
		if err != nil || !ok {
			reqs = append(reqs, a.req)
			why["gone"]++
			continue
		}
		w.mu.Lock()
		got := w.delivered[id]
		w.mu.Unlock()
		reason := ""
		for _, sk := range sources[a.source] {
			if _, ok := got[sk]; ok {
				continue
			}
			dv, _ := n.st.Get(store.DeliveryKey(seq, n.nums[store.SinkRef{Source: a.source, Sink: sk}]))
			dl, err := store.DecodeDelivery(dv)
			switch {
			case dv != nil && err == nil && dl.State == store.StateDead:
				continue
			case dv != nil && err == nil && dl.State == store.StateDue && dl.NextAtMs < nowMs-30_000:
				reason = "stale due"
				if os.Getenv("SIM_DEBUG") != "" {
					dk, _ := n.st.Get(store.DueKey(dl.NextAtMs, seq, n.nums[store.SinkRef{Source: a.source, Sink: sk}]))
					reason = fmt.Sprintf("stale due (seq %d durable %d due %dms ago, due key present %v, attempts %d)",
						seq, n.q.Durable(), nowMs-dl.NextAtMs, dk != nil, dl.Attempts)
				}
			case dv == nil:
				reason = "no delivery row"
			case err != nil:
				reason = "bad delivery row"
			default:
				reason = fmt.Sprintf("state %d", dl.State)
			}
			break
		}
		if reason != "" {
			reqs = append(reqs, a.req)
			why[reason]++
		}
	}
	return reqs, why
}

// checkLive: after every fault healed, a new hook is answered 201 within
// 30 s (defect B: a wedged gate refuses for ever while /ready says up).
func (w *world) checkLive() {
	w.mu.Lock()
	w.reqs++
	r := request{n: w.reqs, tenant: "t1", source: "github", body: []byte(`{"liveness":"probe"}`)}
	w.mu.Unlock()
	var last string
	for range 30 {
		n := w.current()
		if n == nil {
			last = "node down"
			time.Sleep(time.Second)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := n.q.Submit(ctx, w.record(r, n))
		cancel()
		if err == nil {
			w.onAck(r, 1, res, n)
			return
		}
		last = refusal(err)
		time.Sleep(time.Second)
	}
	gate := "?"
	if n := w.current(); n != nil {
		if ds, ok := n.q.Dual(); ok {
			gate = fmt.Sprintf("gate open=%v, log ready=%v, pending=%d", ds.GateOpen, ds.Ready, ds.Pending.Records)
		}
	}
	w.violate("L", "no hook answered 201 for 30 s after every fault healed (last answer: 503 %s; %s)", last, gate)
}

// checkRecoveryIdempotent: rule 5. The node is stopped; boot recovery runs
// twice on the disk it left, and the second run must change no row.
func (w *world) checkRecoveryIdempotent() {
	first, err := w.recoverOnce()
	if err != nil {
		w.violate("5", "boot recovery after the drain failed: %v", err)
		return
	}
	second, err := w.recoverOnce()
	if err != nil {
		w.violate("5", "second boot recovery failed: %v", err)
		return
	}
	changed := 0
	for k, v := range second {
		if fv, ok := first[k]; !ok || !bytes.Equal(fv, v) {
			changed++
		}
	}
	for k := range first {
		if _, ok := second[k]; !ok {
			changed++
		}
	}
	if changed > 0 {
		w.violate("5", "a second boot recovery changed %d rows", changed)
	}
}

// recoverOnce opens the disk as a boot does, runs boot recovery and
// returns every hook, delivery, due and dedupe row.
func (w *world) recoverOnce() (map[string][]byte, error) {
	lg, err := memory.Open(memory.Options{Dir: w.logDir, Node: nodeID, MaxRecordBytes: logMaxRecord, Logger: discard})
	if err != nil {
		return nil, err
	}
	defer lg.Close()
	w.gen++
	n := &node{gen: w.gen, log: lg, deadCh: make(chan struct{})}
	n.in = &simIntake{Log: lg, w: w, n: n}
	st, err := store.Open(store.Options{Dir: storeDir, FS: vfs.FS(w.disk), MemTableSize: w.cfg.memtable, Logger: discard})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	nums, err := st.SinkNumbers(sinkRefs())
	if err != nil {
		return nil, err
	}
	if _, err := queue.Recover(context.Background(), st, queue.RecoverOptions{
		Intake: n.in, Node: nodeID, Origin: queue.OriginExisting, Resolve: w.route(nums), Logger: discard,
	}); err != nil {
		return nil, err
	}
	rows := map[string][]byte{}
	for _, p := range []byte{store.PrefixHook, store.PrefixHookID, store.PrefixDelivery, store.PrefixDue, store.PrefixDedupe, store.PrefixExpiry, store.PrefixDead} {
		err := st.Scan([]byte{p}, []byte{p + 1}, func(k, v []byte) bool {
			rows[string(k)] = append([]byte(nil), v...)
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
	}
	return rows, nil
}

func (w *world) debugMarks(n *node, seq uint64, wms []uint64) string {
	if os.Getenv("SIM_DEBUG") == "" {
		return ""
	}
	return fmt.Sprintf(" [seq %d marks %v attempted %d]", seq, wms, w.attempted[w.seqID[seq]])
}
