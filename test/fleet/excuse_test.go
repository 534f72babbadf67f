package fleet

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/loadgen"
	"github.com/ankusa/ankusa/internal/queue"
)

// v7 is a UUIDv7 string minted at ms (Unix milliseconds), its last byte n.
func v7(ms int64, n byte) string {
	var u uuid.UUID
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6], u[8], u[15] = 0x70, 0x80, n
	return u.String()
}

// The drill excuses a key's extra hook ids only by the release lines and
// the deadline: one released id sanctions one more id minted at least the
// deadline after it, never more, and never an id admitted while an earlier
// one was younger than the deadline.
func TestExcuseDuplicates(t *testing.T) {
	const t0, deadline = int64(1_796_450_000_000), 20 * time.Second
	orig, orig2 := v7(t0, 1), v7(t0+5, 2)
	released := map[string]bool{orig: true, orig2: true}
	after, after2, before := v7(t0+20_000, 3), v7(t0+20_100, 4), v7(t0+19_999, 5)
	late := v7(t0+40_005, 8)
	other1, other2 := v7(t0+1, 6), v7(t0+2, 7)
	key := func(k string, ids ...string) string { return fmt.Sprintf("%s:%v", k, ids) }
	cases := []struct {
		name      string
		dups      []loadgen.Duplicate
		excused   int
		unexcused []string
	}{
		{"none", nil, 0, nil},
		{"retry at the deadline", []loadgen.Duplicate{{Key: "k", IDs: []string{orig, after}}}, 1, nil},
		{"retry before the deadline", []loadgen.Duplicate{{Key: "k", IDs: []string{orig, before}}}, 0, []string{key("k", orig, before)}},
		{"second id early, though released too", []loadgen.Duplicate{{Key: "k", IDs: []string{orig, orig2}}}, 0, []string{key("k", orig, orig2)}},
		{"original not released", []loadgen.Duplicate{{Key: "k", IDs: []string{other1, late}}}, 0, []string{key("k", other1, late)}},
		{"one release, two extra ids", []loadgen.Duplicate{{Key: "k", IDs: []string{orig, after, after2}}}, 0, []string{key("k", orig, after, after2)}},
		{"a chain: the second released and a third past its deadline", []loadgen.Duplicate{{Key: "k", IDs: []string{orig2, after2, late}}},
			0, []string{key("k", orig2, after2, late)}}, // after2 is not named by a release line
		{"not a UUIDv7", []loadgen.Duplicate{{Key: "k", IDs: []string{orig, "x"}}}, 0, []string{key("k", orig, "x") + " (x is not a UUIDv7)"}},
		{"mixed", []loadgen.Duplicate{{Key: "k1", IDs: []string{orig2, after2}}, {Key: "k2", IDs: []string{other1, other2}}},
			1, []string{key("k2", other1, other2)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			excused, unexcused := excuseDuplicates(c.dups, released, deadline)
			if excused != c.excused || !reflect.DeepEqual(unexcused, c.unexcused) {
				t.Fatalf("excused %d %v, want %d %v", excused, unexcused, c.excused, c.unexcused)
			}
		})
	}
	// A chain whose every link is released and past the deadline is excused.
	chain := map[string]bool{orig: true, after: true}
	if n, bad := excuseDuplicates([]loadgen.Duplicate{{Key: "k", IDs: []string{orig, after, late}}}, chain, deadline); n != 1 || bad != nil {
		t.Fatalf("a released chain: excused %d %v, want 1 []", n, bad)
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
