package fleet

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ankusa/ankusa/internal/loadgen"
	"github.com/ankusa/ankusa/internal/queue"
)

// The drill excuses a key's extra hook ids only by the release lines: one
// released original sanctions one more id, never more.
func TestExcuseDuplicates(t *testing.T) {
	released := map[string]bool{"x1": true, "x2": true}
	cases := []struct {
		name      string
		dups      []loadgen.Duplicate
		excused   int
		unexcused []string
	}{
		{"none", nil, 0, nil},
		{"original released", []loadgen.Duplicate{{Key: "k", IDs: []string{"x1", "y"}}}, 1, nil},
		{"both released", []loadgen.Duplicate{{Key: "k", IDs: []string{"x1", "x2"}}}, 1, nil},
		{"nothing released", []loadgen.Duplicate{{Key: "k", IDs: []string{"a", "b"}}}, 0, []string{"k:[a b]"}},
		{"one release, two extra ids", []loadgen.Duplicate{{Key: "k", IDs: []string{"x1", "a", "b"}}}, 0, []string{"k:[x1 a b]"}},
		{"mixed", []loadgen.Duplicate{{Key: "k1", IDs: []string{"x2", "c"}}, {Key: "k2", IDs: []string{"d", "e"}}}, 1, []string{"k2:[d e]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			excused, unexcused := excuseDuplicates(c.dups, released)
			if excused != c.excused || !reflect.DeepEqual(unexcused, c.unexcused) {
				t.Fatalf("excused %d %v, want %d %v", excused, unexcused, c.excused, c.unexcused)
			}
		})
	}
}

// releasedClaims reads the ids off the node's own text log lines, as the
// binary writes them (slog's text handler), and no other line's.
func TestReleasedClaimsReadsTheNodeLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(f, nil)).With("component", "intake")
	log.Info(queue.LogClaimReleased, "id", "01a24523-3a76-714b-aefe-c899bbc1e1ac", "age", "20.05s")
	log.Info("something else", "id", "01a24523-0000-714b-aefe-c899bbc1e1ac")
	log.Info(queue.LogClaimReleased, "id", "01a24523-3a77-714b-aefe-c899bbc1e1ac")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got := releasedClaims(t, []string{path})
	want := map[string]bool{"01a24523-3a76-714b-aefe-c899bbc1e1ac": true, "01a24523-3a77-714b-aefe-c899bbc1e1ac": true}
	if !reflect.DeepEqual(got, want) {
		t.Fatal(fmt.Sprint(got))
	}
}
