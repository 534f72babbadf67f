package dispatch

// Archive: with Options.Archive set, hooks the history sweep removes are
// first written to the archive, which is then their durable copy, and
// replay jobs of kind "archive" bring them back.
//
// Invariants:
//
//  1. The sweep deletes a hook's local rows only after archive.Write
//     returned for a segment holding it (the segment and its catalogue
//     entry are durable in the object store). A crash or an error between
//     the two leaves the rows; the next pass picks the same oldest hooks
//     and writes the same segment key, which the catalogue lists once.
//  2. An archive replay writes a hook back under its original seq and id
//     (so its idempotency key is unchanged) with one due delivery per sink
//     of its source's current configuration, in the batch that moves the
//     job's cursor past it: a crash neither skips nor doubles a hook. It
//     does not publish to the intake log (ADR section 1: the archive is the
//     hook's durable copy). A hook whose id is still local is skipped.
//  3. The rows a segment is built from are made durable (a WAL sync of the
//     store generation they were read from) before it is written: a power
//     cut after the segment cannot bring back an older state of them (a
//     delivery not yet recorded, so delivered and archived again under
//     another key), and neither can a store reopen between the reads and
//     the sync (the pass then writes nothing; found by a helper's review).
//  4. A segment that fails its signature or hash fails the job; nothing
//     from it is written (but see 6).
//  5. A job does not stop at the end of a segment that was written again.
//     A sweep whose removal did not happen (a crash, a failed write, a
//     reopen that dropped it) writes the same key again with the hooks due
//     since (A2 in internal/archive); a hook resent meanwhile leaves it and
//     may come back at its end. So the cursor keeps the sha256 of the
//     catalogue entry its index counts in, and when the entry's sha256
//     differs the job passes the segment from its start again: what it
//     wrote back is local now and skipped (invariant 2), a hook it had
//     passed as local and that has been archived since is written back
//     now, and nothing passed before is counted twice. Before, a job that
//     held the first version stopped at that version's end for good, the
//     catalogue's entry counting more hooks (found by a helper's review).
//  6. A segment met between its rewrite and the catalogue's
//     (archive.ErrStale: it verifies, but is not the catalogue entry's
//     bytes) is read again at the next tick; the job fails on it, as on a
//     tampered one, only if one entry stays stale past archiveTimeout, the
//     bound of the write that would have replaced it (an older signed copy
//     put back in place verifies too). Before, the job failed at once with
//     "sha256 differs from the catalogue", a tamper alarm for an ordinary
//     rewrite (found by a helper's review).
//  7. An archive job's reads (the catalogue, a segment: an object store's
//     round trips, up to archiveTimeout each) run off the loop
//     (fetchArchive), one per job at a time, and a step uses only what was
//     read for its job's cursor as it stands. Before, they ran on the loop,
//     and a slow or unreachable object store held every delivery, outcome
//     and operator call behind the job's read for up to a minute a tick
//     (found by a helper's review).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/archive"
	"github.com/ankusa/ankusa/internal/store"
)

// Archiver is the archive the sweep writes to and replay reads from
// (*archive.Archive). Errors: archive.ErrBadSignature and ErrCorrupt are
// permanent for that object; anything else is worth retrying later.
type Archiver interface {
	Write(ctx context.Context, hooks []archive.Hook) (archive.Entry, error)
	Catalogue(ctx context.Context) (archive.Catalogue, error)
	ReadSegment(ctx context.Context, e archive.Entry) (archive.Segment, error)
}

// archiveTimeout bounds one archive write or read.
const archiveTimeout = time.Minute

// archiveLoop sweeps through the archive until ctx ends: pick, write,
// then remove on the loop (invariant 1). It runs off the loop so an
// upload never holds dispatch.
func (d *Dispatcher) archiveLoop(ctx context.Context) {
	t := time.NewTimer(d.o.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		more, err := d.archivePass(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("archive sweep failed; the hooks stay local and are retried at the next pass", "err", err)
			d.archiveErrors.Add(1)
		}
		if more && err == nil {
			t.Reset(time.Millisecond)
		} else {
			t.Reset(d.o.SweepInterval)
		}
	}
}

// archivePass archives and removes one segment's worth of due hooks.
func (d *Dispatcher) archivePass(ctx context.Context) (more bool, err error) {
	// Invariant 3 holds only if the sync below is of the generation the
	// pass reads from: a reopen in between drops unsynced rows it read.
	gen := d.st.Generation()
	vs, more, err := d.pick(d.o.SegmentBytes)
	if err != nil || len(vs) == 0 {
		return false, err
	}
	hooks := make([]archive.Hook, 0, len(vs))
	for _, v := range vs {
		h, ok, err := d.archived(v)
		if err != nil {
			return false, err
		}
		if ok { // else its hook is gone or unreadable: the row is just dropped
			hooks = append(hooks, h)
		}
	}
	if len(hooks) > 0 {
		if d.beforeArchiveSync != nil {
			d.beforeArchiveSync()
		}
		if err := d.st.SyncWAL(); err != nil { // invariant 3
			return false, fmt.Errorf("sync before archiving: %w", err)
		}
		if g := d.st.Generation(); g != gen {
			return false, fmt.Errorf("sync before archiving: the store was reopened during the pass (generation %d, read from %d)", g, gen)
		}
		wctx, cancel := context.WithTimeout(ctx, archiveTimeout)
		e, err := d.o.Archive.Write(wctx, hooks)
		cancel()
		if err != nil {
			return false, err
		}
		d.archivedHooks.Add(int64(len(hooks)))
		d.log.Debug("archived a segment", "key", e.Key, "hooks", e.Count, "bytes", e.Bytes)
	}
	if d.afterArchive != nil {
		if err := d.afterArchive(); err != nil {
			return false, err
		}
	}
	var rerr error
	if err := d.do(ctx, func() { rerr = d.remove(vs, true) }); err != nil {
		return false, err
	}
	return more, rerr
}

// archived builds the archive record of victim v; ok is false when its
// hook is gone or unreadable (the retained row is then just dropped).
func (d *Dispatcher) archived(v victim) (archive.Hook, bool, error) {
	hv, err := d.st.ReadHook(v.Seq)
	if err != nil {
		return archive.Hook{}, false, fmt.Errorf("read hook %d: %w", v.Seq, err)
	}
	if hv == nil {
		return archive.Hook{}, false, nil
	}
	env, err := store.DecodeEnvelope(hv)
	if err != nil {
		d.log.Error("archive: corrupt hook is not archived", "seq", v.Seq, "err", err)
		return archive.Hook{}, false, nil
	}
	sinks := map[uint16]string{}
	err = d.st.ScanDeliveries(v.Seq, func(num uint16, val []byte) bool {
		if dl, derr := store.DecodeDelivery(val); derr == nil {
			sinks[num] = dl.SinkID
		}
		return true
	})
	if err != nil {
		return archive.Hook{}, false, fmt.Errorf("read deliveries of %d: %w", v.Seq, err)
	}
	log, err := Attempts(d.st, v.Seq, sinks)
	if err != nil {
		return archive.Hook{}, false, fmt.Errorf("read attempts of %d: %w", v.Seq, err)
	}
	h := archive.Hook{Seq: v.Seq, ID: uuid.UUID(env.ID).String(), Tenant: env.Tenant, Source: env.Source,
		ReceivedAtNs: env.ReceivedAt, DeliveredAtMs: v.AtMs, Envelope: hv, Attempts: make([]archive.Attempt, 0, len(log))}
	for _, a := range log {
		at, _ := time.Parse(time.RFC3339Nano, a.At)
		h.Attempts = append(h.Attempts, archive.Attempt{Sink: a.Sink, N: a.N, AtMs: at.UnixMilli(), Result: a.Result,
			LatencyMs: a.LatencyMs, Error: a.Error, ReplayID: a.ReplayID})
	}
	return h, true, nil
}

// archiveCursor is where an archive job goes on: the segment key, the
// index of the next hook in it, and the sha256 of the catalogue entry the
// index counts in ("" in a cursor written before it was kept).
func archiveCursor(c []byte) (key string, idx int, sha string) {
	k, rest, ok := strings.Cut(string(c), "\n")
	if !ok {
		return "", 0, ""
	}
	i, sha, _ := strings.Cut(rest, "\n")
	n, _ := strconv.Atoi(i)
	return k, n, sha
}

// formatArchiveCursor is archiveCursor's inverse.
func formatArchiveCursor(key string, idx int, sha string) []byte {
	c := key + "\n" + strconv.Itoa(idx)
	if sha != "" {
		c += "\n" + sha
	}
	return []byte(c)
}

// receivedRange is an archive job's received_at bounds in nanoseconds, both
// inclusive: its millisecond bounds, the last millisecond whole.
func receivedRange(sinceMs, untilMs int64) (sinceNs, untilNs int64) {
	return sinceMs * int64(time.Millisecond), (untilMs+1)*int64(time.Millisecond) - 1
}

// archivePos is where an archive job's next step reads: the catalogue
// entry (nil: the job is done), and the cursor's key, index and sha256 as
// that step counts them.
type archivePos struct {
	entry     *archive.Entry
	key       string
	idx       int
	sha       string
	rewritten bool // the cursor's segment, written again since (invariant 5)
}

// nextSegment finds j's next segment in cat from cursor, given the segment
// the job holds (seg, read under segSHA; nil for none). Pure: the loop and
// the read off it (fetchArchive) both call it.
func nextSegment(cat archive.Catalogue, cursor []byte, seg *archive.Segment, segSHA string, sinceMs, untilMs int64) archivePos {
	key, idx, sha := archiveCursor(cursor)
	if sha == "" && seg != nil && seg.Key == key {
		sha = segSHA // a cursor written before the sha256 was kept
	}
	sinceNs, untilNs := receivedRange(sinceMs, untilMs)
	p := archivePos{key: key, idx: idx, sha: sha}
	for i := range cat.Segments {
		e := &cat.Segments[i]
		if e.Key < p.key {
			continue
		}
		if e.Key == p.key {
			p.rewritten = p.idx > 0 && p.sha != "" && p.sha != e.SHA256
			if p.idx >= e.Count && !p.rewritten {
				continue
			}
		}
		if e.Key > p.key {
			p.key, p.idx, p.sha, p.rewritten = e.Key, 0, "", false
		}
		if e.MaxReceivedNs < sinceNs || e.MinReceivedNs > untilNs {
			continue // nothing of the range in it
		}
		p.entry = e
		break
	}
	return p
}

// archiveRead is what fetchArchive read for a job, for the cursor it read
// from: the catalogue, and the segment the next step needs unless the job
// held it (seg nil).
type archiveRead struct {
	cursor []byte
	cat    archive.Catalogue
	catErr error
	seg    *archive.Segment
	segSHA string
	segErr error
}

// fetchArchive reads, off the loop, what j's next step needs (invariant
// 7), and hands it to the loop for the next tick; one read per job at a
// time. Its goroutine is the Dispatcher's (bg): Stop cancels and waits
// for it.
func (d *Dispatcher) fetchArchive(j *job) {
	if j.fetching || d.loopCtx == nil || d.loopCtx.Err() != nil {
		return // Stop has begun: no goroutine is started past its Wait
	}
	j.fetching = true
	cursor := slices.Clone(j.Cursor)
	seg, segSHA, sinceMs, untilMs := j.seg, j.segSHA, j.SinceMs, j.UntilMs
	ctx := d.loopCtx
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		rctx, cancel := context.WithTimeout(ctx, archiveTimeout)
		defer cancel()
		r := &archiveRead{cursor: cursor}
		r.cat, r.catErr = d.o.Archive.Catalogue(rctx)
		if r.catErr == nil {
			p := nextSegment(r.cat, cursor, seg, segSHA, sinceMs, untilMs)
			if e := p.entry; e != nil && (seg == nil || seg.Key != e.Key || segSHA != e.SHA256) {
				s, err := d.o.Archive.ReadSegment(rctx, *e)
				r.seg, r.segSHA, r.segErr = &s, e.SHA256, err
			}
		}
		select {
		case d.cmds <- func() { j.fetching, j.fetched = false, r }:
		case <-ctx.Done():
		}
	}()
}

// stepArchive re-drives up to n archived hooks of j (invariant 2). It reads
// at most one segment per step, and keeps it for the next steps; the reads
// are fetchArchive's, off the loop (invariant 7).
func (d *Dispatcher) stepArchive(j *job, n int, now time.Time) {
	r := j.fetched
	j.fetched = nil
	if r == nil || !bytes.Equal(r.cursor, j.Cursor) {
		// Nothing read yet, or read for a cursor a reopen or a pause
		// has moved since (J1).
		d.fetchArchive(j)
		return
	}
	upd := j.Job
	fail := func(err error) {
		upd.State, upd.Error = JobFailed, err.Error()
		if aerr := d.saveJob(&upd, now); aerr != nil {
			d.log.Warn("replay job write failed", "job", j.ID, "err", aerr)
			return
		}
		j.Job = upd
		d.log.Error("archive replay failed", "job", j.ID, "err", err)
	}
	permanent := func(err error) bool {
		return errors.Is(err, archive.ErrBadSignature) || errors.Is(err, archive.ErrCorrupt)
	}
	if err := r.catErr; err != nil {
		if permanent(err) {
			fail(err)
		} else {
			d.log.Warn("archive replay: catalogue unreadable; retried next tick", "job", j.ID, "err", err)
		}
		return
	}
	p := nextSegment(r.cat, j.Cursor, j.seg, j.segSHA, j.SinceMs, j.UntilMs)
	entry, key, idx, sha := p.entry, p.key, p.idx, p.sha
	sinceNs, untilNs := receivedRange(j.SinceMs, j.UntilMs)
	if entry == nil {
		upd.State = JobDone
		upd.Cursor = formatArchiveCursor(key, idx, sha)
		if err := d.saveJob(&upd, now); err != nil {
			d.log.Warn("replay job write failed", "job", j.ID, "err", err)
			return
		}
		j.Job, j.seg, j.segSHA = upd, nil, ""
		return
	}
	if j.seg == nil || j.seg.Key != entry.Key {
		j.quietBelow = 0
	}
	if j.seg == nil || j.seg.Key != entry.Key || j.segSHA != entry.SHA256 {
		if r.seg == nil || r.segSHA != entry.SHA256 {
			d.fetchArchive(j) // read for another segment than this step's
			return
		}
		seg, err := *r.seg, r.segErr
		if errors.Is(err, archive.ErrStale) {
			// Invariant 6: written again since the catalogue was read.
			if j.staleSHA != entry.SHA256 {
				j.staleSHA, j.staleSince = entry.SHA256, now
			}
			if now.Sub(j.staleSince) < archiveTimeout {
				d.log.Warn("archive replay: the segment was written again since the catalogue was read; retried next tick", "job", j.ID, "key", entry.Key)
				return
			}
			err = fmt.Errorf("%w: %w", archive.ErrBadSignature, err)
		}
		if err != nil {
			if permanent(err) {
				fail(err) // the error names the segment
			} else {
				d.log.Warn("archive replay: segment unreadable; retried next tick", "job", j.ID, "key", entry.Key, "err", err)
			}
			return
		}
		j.seg, j.segSHA = &seg, entry.SHA256
	}
	if p.rewritten {
		// Invariant 5: from the start again; what the job passed before
		// (in this version or an earlier one: a segment can be written
		// again while the job is in the quiet part) is passed again
		// without being counted a second time.
		j.quietBelow, idx = max(j.quietBelow, idx), 0
	}
	nowMs := now.UnixMilli()
	b := d.jobBatch()
	if b == nil {
		return // J1: the store was reopened while the segment was read
	}
	defer b.Close()
	moved, skipped, deliveries, used := 0, 0, 0, 0
	seen := map[[16]byte]bool{}
	for ; idx < len(j.seg.Hooks) && used < n; idx++ {
		h := j.seg.Hooks[idx]
		if h.ReceivedAtNs < sinceNs || h.ReceivedAtNs > untilNs {
			continue
		}
		// Invariant 5: a hook passed before the segment was written again
		// is passed again at no cost to the rate and not counted again,
		// unless it is written back now. (At the rate's cost, a sweep that
		// keeps writing the segment again, its removal failing, held the
		// job at the segment's first hooks for as long as it did.)
		quiet := idx < j.quietBelow
		if !quiet {
			used++
		}
		env, err := store.DecodeEnvelope(h.Envelope)
		if err != nil || env.Seq != h.Seq || (j.SourceID != "" && env.Source != j.SourceID) {
			if !quiet {
				skipped++
			}
			continue
		}
		// Skipped, never written twice (a malformed id row counts too).
		local, err := d.st.HookIDStored(env.ID)
		if err != nil {
			return
		}
		occupied, err := d.st.ReadHook(env.Seq)
		if err != nil {
			return
		}
		if local || occupied != nil || seen[env.ID] {
			if !quiet {
				skipped++ // still in local history: resend it instead
			}
			continue
		}
		if quiet {
			used++ // written back now: that is the rate's
		}
		sinks, ok := d.o.Route(env.Source)
		if !ok || len(sinks) == 0 {
			d.log.Warn("archive replay: the hook's source has no sinks now; skipped", "job", j.ID, "id", h.ID, "source", env.Source)
			skipped++
			continue
		}
		seen[env.ID] = true
		d.hot.forget(env.Seq) // H1
		b.PutRestoredHook(env, h.Envelope, sinks, nowMs, j.ID)
		moved++
		deliveries += len(sinks)
	}
	upd.Cursor = formatArchiveCursor(entry.Key, idx, entry.SHA256)
	upd.Moved += int64(moved)
	upd.Skipped += int64(skipped)
	upd.UpdatedAt = now.UTC().Format(time.RFC3339Nano)
	// The cursor rides in the batch that writes the hooks it passed.
	d.putJob(b, &upd)
	if err := d.apply(b, false); err != nil {
		d.log.Warn("archive replay step failed", "job", j.ID, "err", err)
		return
	}
	j.Job = upd
	j.tokens -= float64(used)
	if moved > 0 {
		d.noteDue(nowMs)
		d.o.OnRestore(moved, deliveries)
		d.Wake()
	}
}
