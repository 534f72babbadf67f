package store

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// AuditEntry is one operator action: who did what, when, and how it ended.
// The operator API writes one per mutating call; `ankusa recover
// --allow-gap` writes one when it accepts a gap in the intake log.
type AuditEntry struct {
	// At is when the action started; AppendAudit makes it unique in the
	// store (it names the row).
	At time.Time `json:"at"`
	// Actor is the token name, "anonymous" (no tokens configured), or the
	// command ("ankusa recover").
	Actor string `json:"actor"`
	// Action names what was done: "<METHOD> <route>" for the API
	// ("POST /v1/replays"), a dotted name for commands.
	Action string `json:"action"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Remote string `json:"remote,omitempty"`
	// Status is the HTTP status answered; 0 while the call runs, and
	// after a crash before it answered.
	Status int            `json:"status,omitempty"`
	Detail map[string]any `json:"detail,omitempty"`
}

// ErrBadCursor is returned for a cursor this store did not hand out.
var ErrBadCursor = errors.New("store: bad cursor")

// AppendAudit writes e as a new row and waits for its fsync: an action
// that is not on disk must not run (callers refuse the action when this
// fails). e.At is moved forward by at most a few nanoseconds when another
// row holds the same instant, so two actions never share a key.
func (s *Store) AppendAudit(e *AuditEntry) error {
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	at := e.At.UnixNano()
	if at <= s.lastAuditNs {
		at = s.lastAuditNs + 1
	}
	if s.lastAuditNs == 0 {
		// First row of this process: start above whatever an earlier
		// process wrote (one seek), so a clock that stepped back cannot
		// overwrite an old row.
		k, err := s.LastKey([]byte{PrefixAudit}, []byte{PrefixAudit + 1})
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		if last, _, ok := ParseAuditKey(k); ok && at <= last {
			at = last + 1
		}
	}
	e.At = time.Unix(0, at).UTC()
	if err := s.putAudit(e, true); err != nil {
		return err
	}
	s.lastAuditNs = at
	return nil
}

// FinishAudit rewrites the row AppendAudit wrote for e (same At and
// Action), typically with its Status. It does not wait for an fsync: the
// action is already on disk, and a crash loses only its outcome.
func (s *Store) FinishAudit(e *AuditEntry) error { return s.putAudit(e, false) }

func (s *Store) putAudit(e *AuditEntry, sync bool) error {
	v, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	b := s.NewBatch()
	defer b.Close()
	_ = b.Set(AuditKey(e.At.UnixNano(), e.Action), v, nil)
	if sync {
		err = s.ApplySync(b)
	} else {
		err = s.Apply(b)
	}
	if err != nil {
		return fmt.Errorf("write audit row %s: %w", e.Action, err)
	}
	return nil
}

// AuditPage is one page of the audit trail, newest first. Next, when not
// empty, is the cursor of the following (older) page.
type AuditPage struct {
	Entries []AuditEntry
	Next    string
}

// Audit lists up to limit rows older than cursor ("" = the newest), newest
// first, and not older than since (zero = no bound). One seek and limit
// steps: cost does not grow with the trail.
func (s *Store) Audit(cursor string, since time.Time, limit int) (AuditPage, error) {
	upper := []byte{PrefixAudit + 1}
	if cursor != "" {
		k, err := base64.RawURLEncoding.DecodeString(cursor)
		if _, _, ok := ParseAuditKey(k); err != nil || !ok {
			return AuditPage{}, ErrBadCursor
		}
		upper = k
	}
	lower := []byte{PrefixAudit}
	if !since.IsZero() {
		lower = AuditKey(since.UnixNano(), "")
	}
	var page AuditPage
	var decodeErr error
	var last []byte
	err := s.ScanReverse(lower, upper, func(k, v []byte) bool {
		if len(page.Entries) == limit {
			page.Next = base64.RawURLEncoding.EncodeToString(last)
			return false
		}
		var e AuditEntry
		if err := json.Unmarshal(v, &e); err != nil {
			decodeErr = fmt.Errorf("audit row %x: %w: %w", k, ErrCorrupt, err)
			return false
		}
		at, action, _ := ParseAuditKey(k)
		e.At, e.Action = time.Unix(0, at).UTC(), action // the key is the truth
		page.Entries = append(page.Entries, e)
		last = append(last[:0], k...)
		return true
	})
	if err != nil {
		return AuditPage{}, err
	}
	return page, decodeErr
}
