package ratelog_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/ratelog"
	"github.com/ankusa/ankusa/internal/testutil"
)

func TestHandler_OneLinePerIntervalWithACount(t *testing.T) {
	rec := testutil.NewLogRecorder()
	now := time.Unix(1_000, 0)
	log := slog.New(ratelog.New(rec, 10*time.Second, func() time.Time { return now })).With("component", "store")
	for i := range 1000 {
		log.Error("[JOB "+string(rune('0'+i%10))+"] flush error", "err", "no space left on device")
		log.Info("steady", "i", i)
		now = now.Add(5 * time.Millisecond) // 1000 lines in 5 s
	}
	if got := len(rec.Matching("flush error")); got != 1 {
		t.Fatalf("%d flush error lines in 5 s, want 1", got)
	}
	if got := len(rec.Matching("steady")); got != 1000 {
		t.Fatalf("info lines: %d, want all 1000", got)
	}
	now = now.Add(10 * time.Second)
	log.Error("[JOB 12] flush error", "err", "no space left on device")
	lines := rec.Matching("flush error")
	if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=999") {
		t.Fatalf("after the interval: %v, want a second line with suppressed=999", lines)
	}
	log.Warn("another warning")
	if len(rec.Matching("another warning")) != 1 {
		t.Fatal("a different message was suppressed")
	}
}
