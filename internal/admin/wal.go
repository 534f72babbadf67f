package admin

import (
	"net/http"
)

// walView is GET /v1/wal. Intake is null under wal.type: disk: there is no
// intake log to report.
type walView struct {
	Instance string    `json:"instance"`
	WAL      walDetail `json:"wal"`
	Intake   any       `json:"intake"`
}

type walDetail struct {
	Type       string `json:"type"`
	NextSeq    uint64 `json:"next_seq"`
	DurableSeq uint64 `json:"durable_seq"`
	Hooks      uint64 `json:"hooks"`
	Deliveries uint64 `json:"deliveries"`
	DiskBytes  uint64 `json:"disk_bytes"`
	StoreID    string `json:"store_id"`
}

func (a *api) wal(w http.ResponseWriter, _ *http.Request) {
	if a.d.Config.WAL.Type == "none" {
		writeJSON(w, http.StatusConflict, errorBody(errWALDisabled))
		return
	}
	s := a.d.Queue.Stats()
	var in any
	if ds, ok := a.d.Queue.Dual(); ok {
		state := "up"
		switch {
		case !ds.Ready:
			state = "down"
		case ds.GateOpen:
			state = "open"
		}
		var partition any // null until a partitioned adapter stamped one
		if n, ok, err := a.d.Store.IntakePartition(); err == nil && ok {
			partition = uint64(n)
		}
		in = map[string]any{
			"node": ds.Node, "partition": partition, "offset": ds.Offset, "watermark": ds.Watermark,
			"pending": ds.Pending.Records, "pending_bytes": ds.Pending.Bytes, "stuck": ds.Pending.Stuck,
			"state": state,
		}
	}
	writeJSON(w, http.StatusOK, walView{
		Intake:   in,
		Instance: a.d.Config.Node.Instance,
		WAL: walDetail{
			Type:       a.d.Config.WAL.Type,
			NextSeq:    s.NextSeq,
			DurableSeq: s.DurableSeq,
			Hooks:      s.Hooks,
			Deliveries: s.Deliveries,
			DiskBytes:  a.d.Store.DiskBytes(),
			StoreID:    a.d.Store.ID(),
		},
	})
}
