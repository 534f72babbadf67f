package store

import (
	"encoding/json"
	"fmt"
)

// Attempt is one finished delivery attempt, kept in the attempt log
// (w rows) so a hook's view shows its timeline, delivered hooks included.
type Attempt struct {
	AtMs      int64  `json:"at_ms"`
	Result    string `json:"result"` // delivered | retry | dead
	LatencyMs int64  `json:"latency_ms"`
	Error     string `json:"error,omitempty"`
	// ReplayID is set when the attempt belonged to a replay or a resend.
	ReplayID string `json:"replay_id,omitempty"`
}

// EncodeAttempt encodes a.
func EncodeAttempt(a *Attempt) []byte {
	b, _ := json.Marshal(a) // plain fields: cannot fail
	return b
}

// DecodeAttempt decodes an attempt row.
func DecodeAttempt(v []byte) (*Attempt, error) {
	var a Attempt
	if err := json.Unmarshal(v, &a); err != nil {
		return nil, fmt.Errorf("attempt: %w: %w", ErrCorrupt, err)
	}
	return &a, nil
}

// HookRowKeys lists every row of the hook env (at env.Seq) but its
// retained (g) row: the hook, its id index, its listing indexes, its
// delivery rows and its attempt log. Deleting them all removes the hook.
// The dedupe rows are not included: they live until their TTL.
func (s *Store) HookRowKeys(env *Envelope) ([][]byte, error) {
	keys := [][]byte{HookKey(env.Seq), HookIDKey(env.ID)}
	idx := HookIndexKeys(env.Tenant, env.Source, env.Seq)
	keys = append(keys, idx[0], idx[1])
	for _, p := range [][]byte{DeliveryPrefix(env.Seq), AttemptPrefix(env.Seq)} {
		err := s.Scan(p, PrefixEnd(p), func(k, _ []byte) bool {
			keys = append(keys, append([]byte(nil), k...))
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// DueSink is one delivery a restored hook owes: its sink number and id.
type DueSink = HookSink

// PutRestoredHook adds to b every row of a hook brought back from the
// archive (archive replay): the hook under its original seq (env.Seq,
// encoded as raw), its id index, its listing indexes, and one due delivery
// per sink at dueAtMs tagged with replayID. No dedupe rows: the hook's
// dedupe window closed long before it was archived.
func (b *Batch) PutRestoredHook(env *Envelope, raw []byte, sinks []DueSink, dueAtMs int64, replayID string) {
	_, _ = b.PutHook(&NewHook{Env: env, Value: raw, Sinks: sinks, DueAtMs: dueAtMs, ReplayID: replayID})
}
