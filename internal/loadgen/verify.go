package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Report is verify's answer.
//
//   - Acked: distinct hook ids the provider was given a 201 for.
//   - Delivered: distinct hook ids the consumer received.
//   - Missing: acked ids never delivered — the promise broken.
//   - ExtraDeliveries: deliveries beyond the first of a hook id (at-least-once
//     redelivery, e.g. after a restore replays what a dead node delivered).
//   - DuplicateHooks: event keys that ended up under more than one hook id
//     (a dedupe failure: the provider's retry became a second hook).
//   - SHAMismatches: deliveries of an acked id whose body differs from the
//     body the provider posted.
type Report struct {
	Acked, Delivered, Missing, ExtraDeliveries, DuplicateHooks, SHAMismatches int
	// MissingIDs lists up to 20 missing ids for the operator.
	MissingIDs []string
	// Duplicates are the keys DuplicateHooks counts, each with its hook
	// ids, for a caller that must say why each key has them (the fleet
	// drill excuses the second hook of a claim released past
	// intake.reconcile_deadline_ms, and nothing else). Sorted by key.
	Duplicates []Duplicate
}

// Duplicate is one event key under more than one hook id.
type Duplicate struct {
	Key string
	IDs []string // sorted
}

func (r Report) String() string {
	return fmt.Sprintf("acked=%d delivered=%d missing=%d extra_deliveries=%d duplicate_hooks=%d sha_mismatches=%d",
		r.Acked, r.Delivered, r.Missing, r.ExtraDeliveries, r.DuplicateHooks, r.SHAMismatches)
}

// OK is verify's exit rule: nothing missing, no key under two hook ids, no
// body changed. Extra deliveries are allowed (delivery is at-least-once);
// callers that bound them check the figure.
func (r Report) OK() bool {
	return r.Missing == 0 && r.DuplicateHooks == 0 && r.SHAMismatches == 0
}

// ReadAcks parses an acked file.
func ReadAcks(rd io.Reader) ([]Ack, error) {
	var out []Ack
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var a Ack
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			return nil, fmt.Errorf("loadgen: acked line %d: %w", line, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("loadgen: read acked: %w", err)
	}
	return out, nil
}

// eventKey recovers the provider's event id from the idempotency key Ankusa
// sends (<tenant>:<source>:<dedupe_key>); loadgen's keys hold no colon.
func eventKey(idem string) string {
	if i := strings.LastIndexByte(idem, ':'); i >= 0 {
		return idem[i+1:]
	}
	return idem
}

// Compare computes the report from the acks and the deliveries.
func Compare(acks []Ack, dels []Delivery) Report {
	var r Report
	ackedSHA := map[string]string{}
	idsByKey := map[string]map[string]struct{}{}
	addKey := func(key, id string) {
		m := idsByKey[key]
		if m == nil {
			m = map[string]struct{}{}
			idsByKey[key] = m
		}
		m[id] = struct{}{}
	}
	for _, a := range acks {
		ackedSHA[a.ID] = a.SHA256
		addKey(a.Key, a.ID)
	}
	seen := map[string]int{}
	for _, d := range dels {
		seen[d.ID]++
		if want, ok := ackedSHA[d.ID]; ok && want != d.SHA256 {
			r.SHAMismatches++
		}
		addKey(eventKey(d.IdempotencyKey), d.ID)
	}
	r.Acked = len(ackedSHA)
	r.Delivered = len(seen)
	for _, n := range seen {
		r.ExtraDeliveries += n - 1
	}
	for id := range ackedSHA {
		if seen[id] == 0 {
			r.Missing++
			if len(r.MissingIDs) < 20 {
				r.MissingIDs = append(r.MissingIDs, id)
			}
		}
	}
	for key, ids := range idsByKey {
		if len(ids) > 1 {
			r.DuplicateHooks++
			r.Duplicates = append(r.Duplicates, Duplicate{Key: key, IDs: slices.Sorted(maps.Keys(ids))})
		}
	}
	slices.SortFunc(r.Duplicates, func(a, b Duplicate) int { return strings.Compare(a.Key, b.Key) })
	return r
}

// Verify reads the acked file and the deliveries table and compares them.
func Verify(ctx context.Context, acked io.Reader, postgres, table string) (Report, error) {
	if table == "" {
		table = DefaultTable
	}
	acks, err := ReadAcks(acked)
	if err != nil {
		return Report{}, err
	}
	pool, err := pgxpool.New(ctx, postgres)
	if err != nil {
		return Report{}, fmt.Errorf("loadgen: postgres: %w", err)
	}
	defer pool.Close()
	dels, err := Deliveries(ctx, pool, table)
	if err != nil {
		return Report{}, err
	}
	return Compare(acks, dels), nil
}
