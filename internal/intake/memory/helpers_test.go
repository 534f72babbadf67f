package memory_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/memory"
)

func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(tlog{t}, nil))
}

type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// open opens node's log in dir and closes it when the test ends.
func open(t testing.TB, dir, node string) *memory.Log {
	t.Helper()
	l, err := memory.Open(memory.Options{Dir: dir, Node: node, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("open %s in %s: %v", node, dir, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func rec(node string, seq uint64) intake.Record { return intaketest.NewRecord(node, seq) }

func mustPublish(t testing.TB, l *memory.Log, recs ...intake.Record) intake.Position {
	t.Helper()
	p, err := l.PublishBatch(ctxT(t), recs)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return p
}

// wantClass fails the test unless err is an *intake.Error of class c.
func wantClass(t testing.TB, err error, c intake.Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want class %s", c)
	}
	if got, _ := intake.ClassOf(err); got != c {
		t.Fatalf("error %v has class %s, want %s", err, got, c)
	}
}

func equalRecords(t testing.TB, got, want []intake.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if !intaketest.RecordsEqual(got[i], want[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}
