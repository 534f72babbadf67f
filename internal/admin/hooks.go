package admin

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/store"
)

// hookView is GET /v1/hooks/{id}.
type hookView struct {
	ID          string         `json:"id"`
	Seq         uint64         `json:"seq"`
	Tenant      string         `json:"tenant"`
	Source      string         `json:"source"`
	ReceivedAt  string         `json:"received_at"`
	ContentType string         `json:"content_type"`
	Size        int            `json:"size"`
	SHA256      string         `json:"sha256"`
	Flagged     bool           `json:"flagged"`
	DedupeKey   *string        `json:"dedupe_key"`
	Headers     []headerView   `json:"headers"`
	Durable     bool           `json:"durable"`
	Deliveries  []deliveryView `json:"deliveries"`
	// Attempts is the attempt log, oldest first: every finished attempt
	// with its time, sink, result, latency and error.
	Attempts   []dispatch.AttemptView `json:"attempts_log"`
	BodyBase64 *string                `json:"body_base64,omitempty"`
}

type headerView struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type deliveryView struct {
	Sink      string  `json:"sink"`
	State     string  `json:"state"`
	Attempts  uint32  `json:"attempts"`
	NextAt    *string `json:"next_at"`
	LastError string  `json:"last_error"`
}

// credentialHeaders have their values hidden in the hook view: they carry
// the provider's credentials, not facts about the hook, and an operator
// view is read by more people than should hold them. Signature headers are
// shown: they are MACs of this body, not secrets, and are what an operator
// compares when verification fails. The stored hook keeps every value.
var credentialHeaders = map[string]bool{
	"authorization":       true,
	"proxy-authorization": true,
	"cookie":              true,
}

const redacted = "[REDACTED]"

// hook serves one stored hook and its deliveries.
//
// A hook above the durable seq is shown, with "durable": false. Pebble
// makes an applied group readable before its fsync returns, so for a moment
// a hook can be read that was not acked and that the fence would delete if
// the fsync failed. Dispatch must not act on such a row, but an operator
// asking "did this id arrive?" is better served by seeing it and being told
// it is not yet safe than by a 404 that a second later turns into a 200.
func (a *api) hook(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(errInvalidID))
		return
	}
	// Read durable before the rows. Durable rises either after a successful
	// fsync or when the fence resumes, and the fence resumes only after it
	// deleted the groups no fsync covered. Reading it first means a row we
	// then find is called durable only if it really is; the reverse order
	// could call an undone row durable.
	durable := a.d.Queue.Durable()

	env, err := a.lookup(id)
	switch {
	case errors.Is(err, errNoHook):
		writeJSON(w, http.StatusNotFound, errorBody(errNotFound))
		return
	case errors.Is(err, store.ErrCorrupt):
		a.log.Error("hook view: corrupt record", "id", id.String(), "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody(errCorrupt))
		return
	case err != nil:
		a.log.Warn("hook view: store read failed", "id", id.String(), "err", err)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorBody(errStoreUnavailable))
		return
	}
	deliveries, sinks, err := a.deliveries(env.Seq)
	if err == nil && len(deliveries) == 0 {
		// Every hook has at least one sink; no rows means dispatch reclaimed
		// it between the two reads.
		writeJSON(w, http.StatusNotFound, errorBody(errNotFound))
		return
	}
	if err != nil {
		if errors.Is(err, store.ErrCorrupt) {
			a.log.Error("hook view: corrupt delivery", "id", id.String(), "err", err)
			writeJSON(w, http.StatusInternalServerError, errorBody(errCorrupt))
			return
		}
		a.log.Warn("hook view: store read failed", "id", id.String(), "err", err)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorBody(errStoreUnavailable))
		return
	}

	v := hookView{
		ID:          uuid.UUID(env.ID).String(),
		Seq:         env.Seq,
		Tenant:      env.Tenant,
		Source:      env.Source,
		ReceivedAt:  time.Unix(0, env.ReceivedAt).UTC().Format(time.RFC3339Nano),
		ContentType: env.ContentType,
		Size:        len(env.Body),
		SHA256:      hex.EncodeToString(env.SHA256[:]),
		Flagged:     env.Flagged,
		Headers:     make([]headerView, 0, len(env.Headers)),
		Durable:     env.Seq <= durable,
		Deliveries:  deliveries,
	}
	if v.Attempts, err = dispatch.Attempts(a.d.Store, env.Seq, sinks); err != nil {
		a.log.Warn("hook view: attempt log unreadable", "id", id.String(), "err", err)
		v.Attempts = []dispatch.AttemptView{}
	}
	if env.DedupeKey != "" {
		v.DedupeKey = &env.DedupeKey
	}
	for _, h := range env.Headers {
		val := h.Value
		if credentialHeaders[strings.ToLower(h.Name)] {
			val = redacted
		}
		v.Headers = append(v.Headers, headerView{Name: h.Name, Value: val})
	}
	if q := r.URL.Query().Get("body"); q == "1" || q == "true" {
		b := base64.StdEncoding.EncodeToString(env.Body)
		v.BodyBase64 = &b
	}
	writeJSON(w, http.StatusOK, v)
}

var errNoHook = errors.New("no such hook")

// lookup follows the id index to the envelope.
func (a *api) lookup(id uuid.UUID) (*store.Envelope, error) {
	seq, found, err := a.d.Store.LookupHookID(id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errNoHook
	}
	raw, err := a.d.Store.ReadHook(seq)
	if err != nil {
		return nil, err
	}
	if raw == nil {
		// The index and the hook are written and deleted in one batch, so
		// this is a row that vanished between the two reads (the fence
		// removed an undone group): the hook is not there.
		return nil, errNoHook
	}
	return store.DecodeEnvelope(raw)
}

// deliveries reads every delivery row of the hook at seq, in sink order,
// and the sink ids by number.
func (a *api) deliveries(seq uint64) ([]deliveryView, map[uint16]string, error) {
	out := []deliveryView{}
	sinks := map[uint16]string{}
	var decodeErr error
	err := a.d.Store.ScanDeliveries(seq, func(num uint16, val []byte) bool {
		d, err := store.DecodeDelivery(val)
		if err != nil {
			decodeErr = err
			return false
		}
		sinks[num] = d.SinkID
		state := store.StateName(d.State)
		if a.d.Dispatch != nil {
			// A delivery being attempted is due in the store; the
			// dispatcher holds its claim.
			state = a.d.Dispatch.ViewState(seq, num, d)
		}
		dv := deliveryView{
			Sink:      d.SinkID,
			State:     state,
			Attempts:  d.Attempts,
			LastError: d.LastError,
		}
		// A finished delivery has no next attempt, whatever the row kept.
		if d.NextAtMs != 0 && d.State != store.StateDelivered && d.State != store.StateDead {
			s := time.UnixMilli(d.NextAtMs).UTC().Format(time.RFC3339Nano)
			dv.NextAt = &s
		}
		out = append(out, dv)
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	if decodeErr != nil {
		return nil, nil, fmt.Errorf("delivery of seq %d: %w", seq, decodeErr)
	}
	return out, sinks, nil
}
