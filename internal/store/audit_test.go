package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// Rows written at the same instant, or with a clock that stepped back,
// each get their own key; the trail pages newest first.
func TestAuditAppendAndPage(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 5 {
		e := &store.AuditEntry{At: at, Actor: "ops", Action: "POST /v1/replays", Detail: map[string]any{"n": i}}
		if i == 4 {
			e.At = at.Add(-time.Hour) // clock stepped back
		}
		if err := st.AppendAudit(e); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := st.Audit(cursor, time.Time{}, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Entries {
			got = append(got, fmt.Sprint(e.Detail["n"]))
		}
		if p.Next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("cursor does not advance")
		}
		cursor = p.Next
	}
	if fmt.Sprint(got) != "[4 3 2 1 0]" {
		t.Fatalf("rows newest first = %v, want [4 3 2 1 0]", got)
	}
	if _, err := st.Audit("not-a-cursor!", time.Time{}, 2); !errors.Is(err, store.ErrBadCursor) {
		t.Fatalf("bad cursor: err = %v, want ErrBadCursor", err)
	}
}

// A row is on disk when AppendAudit returns: a power cut right after keeps
// it, and a reopened store writes its next row after it, not over it.
func TestAuditRowSurvivesPowerCut(t *testing.T) {
	fs := vfs.NewCrashableMem()
	st := testutil.OpenStore(t, "/store", fs)
	at := time.Now()
	if err := st.AppendAudit(&store.AuditEntry{At: at, Actor: "ops", Action: "DELETE /v1/quarantine"}); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = st.Close()

	after := testutil.OpenStore(t, "/store", crashed)
	if err := after.AppendAudit(&store.AuditEntry{At: at, Actor: "ops2", Action: "DELETE /v1/quarantine"}); err != nil {
		t.Fatal(err)
	}
	p, err := after.Audit("", time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 2 || p.Entries[0].Actor != "ops2" || p.Entries[1].Actor != "ops" {
		t.Fatalf("after the cut: %+v, want ops2 then ops", p.Entries)
	}
}
