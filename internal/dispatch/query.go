package dispatch

import (
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/store"
)

// DeadEntry is one dead-lettered delivery for GET /v1/dlq.
type DeadEntry struct {
	ID             string `json:"id"`
	SourceID       string `json:"source_id"`
	TenantID       string `json:"tenant_id"`
	Sink           string `json:"sink"`
	Seq            uint64 `json:"seq"`
	ReceivedAt     string `json:"received_at"`
	DeadLetteredAt string `json:"dead_lettered_at"`
	Size           int    `json:"size"`
	ContentType    string `json:"content_type"`
	Reason         string `json:"reason"`
}

// DLQFilter narrows GET /v1/dlq.
type DLQFilter struct {
	SourceID string
	Since    time.Time // dead-lettered at or after
	Limit    int
}

// DLQ lists dead rows oldest first, with the total matching the filter.
// It reads the store directly (not through the loop): a listing may lag a
// concurrent replay by one step, which an operator view tolerates.
func (d *Dispatcher) DLQ(f DLQFilter) (total int, entries []DeadEntry, err error) {
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 100
	}
	var rows []store.DeadRow
	var sinceMs int64
	if !f.Since.IsZero() {
		sinceMs = f.Since.UnixMilli()
	}
	err = d.st.ScanDead(nil, sinceMs, -1, func(r store.DeadRow) bool {
		rows = append(rows, r)
		return true
	})
	if err != nil {
		return 0, nil, err
	}
	for _, r := range rows {
		hv, err := d.st.ReadHook(r.Seq)
		if err != nil {
			return 0, nil, err
		}
		if hv == nil {
			continue
		}
		env, err := store.DecodeEnvelope(hv)
		if err != nil {
			continue
		}
		if f.SourceID != "" && env.Source != f.SourceID {
			continue
		}
		total++
		if len(entries) >= f.Limit {
			continue
		}
		sinkID := ""
		if t, ok := d.target(r.Sink); ok {
			sinkID = t.ID
		}
		entries = append(entries, DeadEntry{
			ID: uuid.UUID(env.ID).String(), SourceID: env.Source, TenantID: env.Tenant, Sink: sinkID,
			Seq: r.Seq, ReceivedAt: time.Unix(0, env.ReceivedAt).UTC().Format(time.RFC3339Nano),
			DeadLetteredAt: time.UnixMilli(r.AtMs).UTC().Format(time.RFC3339Nano),
			Size:           len(env.Body), ContentType: env.ContentType, Reason: r.Reason,
		})
	}
	return total, entries, nil
}

// OldestDueAge is how long the oldest due row not being attempted has
// been due (0 if none is due yet): the dispatch lag. The claimed rows are
// stepped over (K1): at most as many as are in flight.
func (d *Dispatcher) OldestDueAge(now time.Time) time.Duration {
	var at int64
	found := false
	s := &d.claims
	s.mu.RLock()
	_ = d.st.ScanDue(0, func(a int64, seq uint64, num uint16) bool {
		if c, ok := s.m[rowRef{seq, num}]; ok && c == a {
			return true
		}
		at, found = a, true
		return false
	})
	s.mu.RUnlock()
	if !found {
		return 0
	}
	return max(now.Sub(time.UnixMilli(at)), 0)
}

// Gauges for metrics.
type Gauges struct {
	Pending, Inflight, Dead int64
	OldestDueAge            time.Duration
	// HistoryHooks and HistoryBytes are the delivered hooks kept by
	// retention.delivered and the bytes of their bodies.
	HistoryHooks, HistoryBytes int64
	// ArchivedHooks counts hooks written to the archive since start;
	// ArchiveErrors the archive sweep passes that failed (hooks kept local).
	ArchivedHooks, ArchiveErrors int64
}

// Gauges reads the queue gauges. Pending is the store's due count, kept as
// batches apply (store.DueRows: no walk, but after a store fault the first
// read walks the due rows once), less the claimed rows (they are due in the
// store, K1); Inflight is the claims. OldestDueAge is one seek past them.
func (d *Dispatcher) Gauges() Gauges {
	n, _ := d.st.DueRows()
	inflight := int64(d.claims.count())
	return Gauges{
		Pending:      max(int64(n)-inflight, 0),
		Inflight:     inflight,
		Dead:         d.deadGauge.Load(),
		OldestDueAge: d.OldestDueAge(d.o.Now()),
		HistoryHooks: d.retainedHooks.Load(),
		HistoryBytes: d.retainedBytes.Load(),

		ArchivedHooks: d.archivedHooks.Load(),
		ArchiveErrors: d.archiveErrors.Load(),
	}
}
