package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/archive"
	"github.com/ankusa/ankusa/internal/store"
)

// replayTick is how often running replay jobs move rows.
const replayTick = 100 * time.Millisecond

// MaxJobs bounds replay jobs that are not finished.
const MaxJobs = 16

// Job states.
const (
	JobRunning   = "running"
	JobPaused    = "paused"
	JobCancelled = "cancelled"
	JobDone      = "done"
	JobFailed    = "failed"
)

// Errors the operator API maps to 4xx.
var (
	ErrTooManyJobs = errors.New("too many replay jobs")
	ErrNoJob       = errors.New("no such replay job")
	ErrBadJob      = errors.New("invalid replay job")
)

// Job is a replay job as stored (j + id) and shown by the API.
//
// A dlq job moves dead rows back to due at Rate rows per second while the
// dispatch lag (age of the oldest due row) stays under MaxLagMs, so a replay
// never buries fresh traffic. Each moved row keeps its hook id, dedupe key
// and idempotency key and gains the job id as its replay id. The cursor is
// written in the same batch as the rows it moved, so a crash neither skips
// nor repeats a row.
type Job struct {
	ID        string  `json:"id"`
	Kind      string  `json:"kind"`
	SourceID  string  `json:"source_id,omitempty"`
	Rate      float64 `json:"rate"`
	MaxLagMs  int64   `json:"max_lag_ms"`
	State     string  `json:"state"`
	Moved     int64   `json:"moved"`
	Skipped   int64   `json:"skipped"`
	UntilMs   int64   `json:"until_ms"`           // rows dead-lettered after the job was created are not replayed; archive: hooks received after it
	SinceMs   int64   `json:"since_ms,omitempty"` // archive: hooks received before it are not replayed
	Cursor    []byte  `json:"cursor,omitempty"`
	Error     string  `json:"error,omitempty"`
	CreatedAt string  `json:"created_at"`
	UpdatedAt string  `json:"updated_at"`
}

type job struct {
	Job
	tokens float64
	last   time.Time
	seg    *archive.Segment // archive jobs: the segment the cursor is in, once read
	segSHA string           // the sha256 of the catalogue entry seg was read under
	// quietBelow: hooks of seg below this index were passed before it was
	// written again, and are not counted again (archive.go invariant 5).
	quietBelow int
	// staleSHA, staleSince: the catalogue entry whose segment read back as
	// written again since, and when first (archive.go invariant 6).
	staleSHA   string
	staleSince time.Time
	// fetching: an archive read for this job runs off the loop; fetched is
	// what the last one read, for the next step (archive.go invariant 7).
	fetching bool
	fetched  *archiveRead
}

// Releaser releases quarantined hooks for a replay job of kind quarantine.
// It returns how many it committed and skipped, the new cursor (the last
// pen key it passed; it must be persisted before the next step), and
// whether the pen has nothing left after the cursor.
type Releaser interface {
	Release(ctx context.Context, sourceID string, cursor []byte, untilMs int64, n int) (moved, skipped int, next []byte, done bool, err error)
}

// JobSpec is what POST /v1/replays takes.
type JobSpec struct {
	Kind     string  `json:"kind"`
	SourceID string  `json:"source_id"`
	Rate     float64 `json:"rate"`
	MaxLagMs int64   `json:"max_lag_ms"`
	// Since and Until bound an archive job by received_at (zero Since: the
	// archive's start; zero Until: now).
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
}

func (d *Dispatcher) loadJobs() error {
	stored, err := d.storedJobs()
	for id, j := range stored {
		d.jobs[id] = &job{Job: j}
	}
	return err
}

// storedJobs reads every job row (a row that does not decode is skipped).
func (d *Dispatcher) storedJobs() (map[string]Job, error) {
	stored := map[string]Job{}
	err := d.st.ScanJobs(func(v []byte) bool {
		var j Job
		if json.Unmarshal(v, &j) == nil {
			stored[j.ID] = j
		}
		return true
	})
	return stored, err
}

// reloadJobs makes the jobs the stored ones after a store reopen (resync).
// A dlq or archive step writes its cursor in the unsynced batch that moves
// the rows it passed, so a reopen can drop both while the job went on from
// the cursor it kept: the rows it passed stayed dead-lettered (or
// unrestored) and the job counted them moved, done, until a restart
// reloaded it (TestReplay_AStepLostToAFailedWALWriteIsReplayedAgain). The
// stored job is where its rows are. A job's pace (its tokens) is kept, and
// an archive job's segment too (stepArchive reads another if the cursor's
// is another). A stored job not held (its synced write reported failed,
// yet landed) runs, as it would after a restart.
func (d *Dispatcher) reloadJobs() error {
	stored, err := d.storedJobs()
	if err != nil {
		return err
	}
	for id, sj := range stored {
		j, ok := d.jobs[id]
		if !ok {
			d.jobs[id] = &job{Job: sj, last: d.o.Now()}
			continue
		}
		j.Job = sj
	}
	return nil
}

// errStaleJobs refuses a job write made while the loop's jobs are not the
// store generation's (J1): the store is being reopened.
var errStaleJobs = fmt.Errorf("%w: replay jobs are being reloaded after a store reopen", store.ErrFailed)

// jobBatch keeps this invariant; runJobs and SetJobState make the loop's
// view current first:
//
// J1. A job is stepped or written only from the stored job of the store
// generation its write goes to. A reopen can drop a step's unsynced batch
// (its cursor rides in it), and the stored job is then behind the one the
// loop holds; resync reloads the jobs, but the loop checks the generation
// only at the top of a turn, and a job tick could come first after a
// reopen: a step from the held cursor counted the dropped step's rows
// moved and wrote a cursor past them, so they stayed dead-lettered for
// good (found by a helper's review). So the jobs are resynced first
// (Dispatcher.current), and every job write's batch is refused unless it
// is of d.gen (a reopen after that): jobBatch is a batch for a job write,
// or nil when it would not go to the generation the jobs were read from.
func (d *Dispatcher) jobBatch() *store.Batch {
	b := d.st.NewBatch()
	if b.Err() != nil || b.Generation() != d.gen {
		_ = b.Close()
		return nil
	}
	return b
}

// CreateJob validates spec and starts a job.
func (d *Dispatcher) CreateJob(ctx context.Context, spec JobSpec) (Job, error) {
	switch {
	case spec.Kind == "dlq":
	case spec.Kind == "quarantine" && d.o.Release != nil:
	case spec.Kind == "quarantine":
		return Job{}, fmt.Errorf("%w: no source uses on_verify_failure: quarantine", ErrBadJob)
	case spec.Kind == "archive" && d.o.Archive != nil:
		if !spec.Since.IsZero() && !spec.Until.IsZero() && spec.Until.Before(spec.Since) {
			return Job{}, fmt.Errorf("%w: until is before since", ErrBadJob)
		}
	case spec.Kind == "archive":
		return Job{}, fmt.Errorf("%w: the archive is off (archive.enabled)", ErrBadJob)
	default:
		return Job{}, fmt.Errorf("%w: kind must be dlq, quarantine or archive", ErrBadJob)
	}
	if spec.Kind != "archive" && (!spec.Since.IsZero() || !spec.Until.IsZero()) {
		return Job{}, fmt.Errorf("%w: since and until are for kind archive", ErrBadJob)
	}
	if spec.Rate == 0 {
		spec.Rate = 50
	}
	if spec.Rate < 0.1 || spec.Rate > 100_000 {
		return Job{}, fmt.Errorf("%w: rate must be between 0.1 and 100000 per second", ErrBadJob)
	}
	if spec.MaxLagMs == 0 {
		spec.MaxLagMs = 5_000
	}
	if spec.MaxLagMs < 0 || spec.MaxLagMs > 86_400_000 {
		return Job{}, fmt.Errorf("%w: max_lag_ms must be between 1 and 86400000", ErrBadJob)
	}
	var out Job
	var err error
	derr := d.do(ctx, func() {
		active := 0
		for _, j := range d.jobs {
			if j.State == JobRunning || j.State == JobPaused {
				active++
			}
		}
		if active >= MaxJobs {
			err = fmt.Errorf("%w: at most %d running or paused", ErrTooManyJobs, MaxJobs)
			return
		}
		now := d.o.Now()
		j := &job{Job: Job{
			ID: uuid.Must(uuid.NewV7()).String(), Kind: spec.Kind, SourceID: spec.SourceID,
			Rate: spec.Rate, MaxLagMs: spec.MaxLagMs, State: JobRunning, UntilMs: now.UnixMilli(),
			CreatedAt: now.UTC().Format(time.RFC3339Nano), UpdatedAt: now.UTC().Format(time.RFC3339Nano),
		}, last: now}
		if spec.Kind == "archive" {
			if !spec.Since.IsZero() {
				j.SinceMs = spec.Since.UnixMilli()
			}
			if !spec.Until.IsZero() {
				j.UntilMs = spec.Until.UnixMilli()
			}
		}
		b := d.st.NewBatch()
		defer b.Close()
		d.putJob(b, &j.Job)
		if err = d.apply(b, true); err != nil {
			return
		}
		d.jobs[j.ID] = j
		out = j.Job
	})
	if derr != nil {
		return Job{}, derr
	}
	return out, err
}

// Jobs lists every job, newest first.
func (d *Dispatcher) Jobs(ctx context.Context) ([]Job, error) {
	var out []Job
	err := d.do(ctx, func() {
		for _, j := range d.jobs {
			out = append(out, j.Job)
		}
	})
	sortJobs(out)
	return out, err
}

// GetJob returns one job.
func (d *Dispatcher) GetJob(ctx context.Context, id string) (Job, error) {
	var out Job
	var err error
	if derr := d.do(ctx, func() {
		j, ok := d.jobs[id]
		if !ok {
			err = ErrNoJob
			return
		}
		out = j.Job
	}); derr != nil {
		return Job{}, derr
	}
	return out, err
}

// SetJobState pauses, resumes or cancels a job.
func (d *Dispatcher) SetJobState(ctx context.Context, id, state string) (Job, error) {
	var out Job
	var err error
	derr := d.do(ctx, func() {
		if !d.current() {
			err = errStaleJobs
			return
		}
		j, ok := d.jobs[id]
		if !ok {
			err = ErrNoJob
			return
		}
		switch {
		case state != JobRunning && state != JobPaused && state != JobCancelled:
			err = fmt.Errorf("%w: state must be running, paused or cancelled", ErrBadJob)
			return
		case j.State == JobDone || j.State == JobCancelled || j.State == JobFailed:
			err = fmt.Errorf("%w: job is %s", ErrBadJob, j.State)
			return
		}
		upd := j.Job
		upd.State = state
		if err = d.saveJob(&upd, d.o.Now()); err != nil {
			return
		}
		j.Job, j.last, j.tokens = upd, d.o.Now(), 0
		out = j.Job
	})
	if derr != nil {
		return Job{}, derr
	}
	return out, err
}

func (d *Dispatcher) putJob(b *store.Batch, j *Job) {
	v, _ := json.Marshal(j) // plain fields only: cannot fail
	b.PutJob(j.ID, v)
}

// saveJob stamps upd with now and writes it alone, synced: the job's state
// and cursor survive a crash before the caller adopts upd.
func (d *Dispatcher) saveJob(upd *Job, now time.Time) error {
	upd.UpdatedAt = now.UTC().Format(time.RFC3339Nano)
	b := d.jobBatch()
	if b == nil {
		return errStaleJobs // J1
	}
	defer b.Close()
	d.putJob(b, upd)
	return d.apply(b, true)
}

func sortJobs(js []Job) {
	// UUIDv7 ids sort by creation time; newest first.
	sort.Slice(js, func(a, b int) bool { return js[a].ID > js[b].ID })
}

// runJobs advances every running job by its token bucket.
func (d *Dispatcher) runJobs() {
	if !d.current() {
		return // J1: the store is being reopened; the next tick steps
	}
	now := d.o.Now()
	for _, j := range d.jobs {
		if j.State != JobRunning {
			continue
		}
		elapsed := now.Sub(j.last).Seconds()
		j.last = now
		j.tokens = min(j.tokens+elapsed*j.Rate, max(j.Rate, 1))
		if j.tokens < 1 {
			continue
		}
		if lag := d.OldestDueAge(now); lag > time.Duration(j.MaxLagMs)*time.Millisecond {
			continue
		}
		d.stepJob(j, int(j.tokens), now)
	}
}

// stepJob advances j by up to n rows.
func (d *Dispatcher) stepJob(j *job, n int, now time.Time) {
	switch j.Kind {
	case "quarantine":
		d.stepRelease(j, n, now)
		return
	case "archive":
		if d.o.Archive == nil {
			return // archive.enabled was turned off: the job waits
		}
		d.stepArchive(j, n, now)
		return
	}
	d.stepDLQ(j, n, now)
}

// stepRelease releases up to n quarantined hooks. The release commits
// through the queue (durable before it returns), then the cursor is
// written: a crash between the two runs the step again, which finds no
// pen row for a hook already committed (it left the pen in its hook's
// batch, ack rule 7 of internal/queue), so nothing is committed twice.
func (d *Dispatcher) stepRelease(j *job, n int, now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	moved, skipped, next, done, err := d.o.Release.Release(ctx, j.SourceID, j.Cursor, j.UntilMs, n)
	upd := j.Job
	if err != nil {
		d.log.Warn("quarantine release step failed; retried next tick", "job", j.ID, "err", err)
		if moved == 0 && next == nil {
			return
		}
	}
	if next != nil {
		upd.Cursor = next
	}
	upd.Moved += int64(moved)
	upd.Skipped += int64(skipped)
	if done && err == nil {
		upd.State = JobDone
	}
	if aerr := d.saveJob(&upd, now); aerr != nil {
		d.log.Warn("replay cursor write failed", "job", j.ID, "err", aerr)
		return
	}
	j.Job = upd
	j.tokens -= float64(moved + skipped)
}

// stepDLQ moves up to n dead rows of j back to due.
func (d *Dispatcher) stepDLQ(j *job, n int, now time.Time) {
	b := d.jobBatch()
	if b == nil {
		return // J1
	}
	defer b.Close()
	var rows []store.DeadRow
	finished := true
	err := d.st.ScanDead(j.Cursor, 0, j.UntilMs, func(r store.DeadRow) bool {
		if len(rows) >= n {
			finished = false
			return false
		}
		rows = append(rows, r)
		return true
	})
	if err != nil {
		d.log.Warn("replay scan failed", "job", j.ID, "err", err)
		return
	}
	nowMs := now.UnixMilli()
	upd := j.Job
	moved, skipped, orphans := 0, 0, 0
	for _, r := range rows {
		upd.Cursor = r.Cursor()
		if j.SourceID != "" {
			hv, err := d.st.ReadHook(r.Seq)
			if err != nil {
				return
			}
			if hv == nil {
				skipped++
				continue
			}
			if env, derr := store.DecodeEnvelope(hv); derr != nil || env.Source != j.SourceID {
				skipped++
				continue
			}
		}
		dl, err := d.st.ReadDelivery(r.Seq, r.Sink)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return
		}
		if err != nil {
			skipped++
			continue
		}
		if dl == nil {
			b.DropDead(r)
			skipped++
			orphans++
			continue
		}
		d.hot.forget(r.Seq) // H1
		b.Revive(r, dl, nowMs, j.ID)
		d.noteDue(nowMs)
		moved++
	}
	upd.Moved += int64(moved)
	upd.Skipped += int64(skipped)
	if finished {
		upd.State = JobDone
	}
	upd.UpdatedAt = now.UTC().Format(time.RFC3339Nano)
	// The cursor rides in the batch that moves the rows it passed.
	d.putJob(b, &upd)
	if err := d.apply(b, false); err != nil {
		d.log.Warn("replay step failed", "job", j.ID, "err", err)
		return
	}
	j.Job = upd
	j.tokens -= float64(len(rows))
	d.deadGauge.Add(-int64(moved + orphans))
	if moved > 0 {
		d.Wake()
	}
}
