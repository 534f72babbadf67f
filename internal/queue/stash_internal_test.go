package queue

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/ankusa/ankusa/internal/store"
)

func TestStash_TakesTheSmallestClassThatFits(t *testing.T) {
	var st stash[[]int]
	for _, n := range []int{1, 6, 8, 40, 64, 300} {
		putSlice(&st, make([]int, min(3, n), n))
	}
	tests := []struct {
		need     int
		wantCap  int
		wantMade bool
	}{
		{need: 5, wantCap: 8},    // class 3 (8..15): 8; 6 is in class 2, not sure to fit
		{need: 5, wantCap: 40},   // class 3 is empty now; class 5 (32..63) holds 40
		{need: 33, wantCap: 64},  // class 6
		{need: 65, wantCap: 300}, // class 8
		{need: 1, wantCap: 1},
		{need: 300, wantCap: 512, wantMade: true}, // nothing kept fits: made with room rounded up
		{need: 4, wantCap: 6},
		{need: 4, wantCap: 4, wantMade: true},
	}
	for i, tc := range tests {
		before := st.bytes
		s := takeSlice(&st, tc.need)
		if len(s) != 0 || cap(s) != tc.wantCap {
			t.Fatalf("take %d (need %d): len %d cap %d, want 0 and %d", i, tc.need, len(s), cap(s), tc.wantCap)
		}
		if made := st.bytes == before; made != tc.wantMade {
			t.Fatalf("take %d (need %d): made %v, want %v", i, tc.need, made, tc.wantMade)
		}
	}
	if st.bytes != 0 {
		t.Fatalf("empty stash accounts %d bytes", st.bytes)
	}
}

func TestStash_BoundedByBytes(t *testing.T) {
	var st stash[[]byte]
	kept := 0
	for range 3 * maxSpareBytes / 4096 {
		putSlice(&st, make([]byte, 0, 4096))
		if st.bytes > maxSpareBytes {
			t.Fatalf("stash holds %d bytes, bound %d", st.bytes, maxSpareBytes)
		}
	}
	for {
		if _, ok := st.take(4096); !ok {
			break
		}
		kept++
	}
	entry := 4096 + int(unsafe.Sizeof(stashed[[]byte]{}))
	if want := maxSpareBytes / entry; kept != want {
		t.Fatalf("kept %d slices of 4 KiB, want %d (the bound's worth, each entry's header counted)", kept, want)
	}
	// An array larger than the whole bound is never kept.
	putSlice(&st, make([]byte, 0, maxSpareBytes))
	if _, ok := st.take(1); ok {
		t.Fatal("an array over the bound was kept")
	}
	// A nil or empty slice is never kept: it would be handed out as room.
	putSlice(&st, nil)
	putSlice(&st, make([]byte, 0))
	if _, ok := st.take(0); ok {
		t.Fatal("an empty slice was kept")
	}
}

func TestSpareRoom(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{0, 1}, {1, 1}, {2, 2}, {3, 4}, {47, 64}, {64, 64}, {65, 128}} {
		if got := spareRoom(tc.n); got != tc.want {
			t.Errorf("spareRoom(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// A stash filled by a burst of small groups still keeps a large group's
// slice: it drops small ones to make room, and the next large group finds
// it (take never hands out a smaller class).
func TestStash_FullOfSmallKeepsALargerOne(t *testing.T) {
	var st stash[[]pendingReply]
	for st.bytes+int(unsafe.Sizeof(pendingReply{})+unsafe.Sizeof(stashed[[]pendingReply]{})) <= maxSpareBytes {
		putSlice(&st, make([]pendingReply, 0, 1))
	}
	big := make([]pendingReply, 0, 64)
	putSlice(&st, big)
	if st.bytes > maxSpareBytes {
		t.Fatalf("stash holds %d bytes, bound %d", st.bytes, maxSpareBytes)
	}
	got := takeSlice(&st, 64)
	if unsafe.SliceData(got) != unsafe.SliceData(big) {
		t.Fatal("a group of 64 did not get the kept slice of 64: the stash full of small ones refused it")
	}
	// And a small slice is not kept at the price of a larger one.
	putSlice(&st, big)
	for range 8 {
		putSlice(&st, make([]pendingReply, 0, 1))
	}
	if got := takeSlice(&st, 64); unsafe.SliceData(got) != unsafe.SliceData(big) {
		t.Fatal("small slices put into a full stash displaced the large one")
	}
}

// Within a class the newest is handed out, and the slot it leaves keeps
// nothing alive.
func TestStash_NewestOfAClassAndNothingLeftBehind(t *testing.T) {
	var st stash[[]int]
	older, newer := make([]int, 0, 8), make([]int, 0, 9)
	putSlice(&st, older)
	putSlice(&st, newer)
	if got := takeSlice(&st, 8); unsafe.SliceData(got) != unsafe.SliceData(newer) {
		t.Fatal("take handed out the older slice of the class")
	}
	c := st.classes[3]
	if vacated := c[:len(c)+1][len(c)]; vacated.e != nil || vacated.size != 0 {
		t.Fatal("the vacated slot still references the slice handed out")
	}
}

// The writer keeps a covered group's rows and arena, with nothing in them,
// and hands them to the next group that fits; a group larger than any
// kept gets new ones, rounded up.
func TestGroupMemory_ReusesACoveredGroups(t *testing.T) {
	w := &writer{s: &syncer{}}
	key, val := []byte("k"), []byte("v")
	var arena store.RowArena
	arena.Grow(3000) // a size class of 3 072 bytes: not a power of two
	if arena.Cap() >= 4096 {
		t.Fatalf("arena cap %d: the test needs one under 4 096", arena.Cap())
	}
	rows := make([]store.Row, 0, 64)
	rows = append(rows, store.Row{Key: key, Value: val}, store.Row{Key: key})
	w.unsynced = []appliedGroup{
		{maxSeq: 3, rows: rows, arena: arena},
		{maxSeq: 9, rows: make([]store.Row, 1, 64), restore: make([]store.Row, 1)},
	}
	w.s.durable.Store(5)
	w.pruneUnsynced()
	if len(w.unsynced) != 1 || w.unsynced[0].maxSeq != 9 {
		t.Fatalf("unsynced after durable 5: %+v, want only the group up to 9", w.unsynced)
	}
	for i, r := range rows[:cap(rows)] {
		if r.Key != nil || r.Value != nil {
			t.Fatalf("kept rows slice still references row %d's key or value", i)
		}
	}
	gotRows, gotArena := w.groupMemory(40, 2100, false)
	if len(gotRows) != 0 || unsafe.SliceData(gotRows) != unsafe.SliceData(rows) {
		t.Fatalf("group of 40 rows: len %d, same array %v; want the covered group's, empty",
			len(gotRows), unsafe.SliceData(gotRows) == unsafe.SliceData(rows))
	}
	if gotArena.Cap() != arena.Cap() {
		t.Fatalf("arena cap %d, want the covered group's %d (it has room for 2 100)", gotArena.Cap(), arena.Cap())
	}
	gotRows, gotArena = w.groupMemory(40, 2100, false)
	if cap(gotRows) != 64 || unsafe.SliceData(gotRows) == unsafe.SliceData(rows) || gotArena.Cap() < 4096 {
		t.Fatalf("second group: rows cap %d (new: %v), arena cap %d; want new ones of 64 rows and >= 4 096 bytes",
			cap(gotRows), unsafe.SliceData(gotRows) != unsafe.SliceData(rows), gotArena.Cap())
	}
	if _, a := w.groupMemory(1, 100, true); a.Cap() != 0 {
		t.Fatalf("dual group got an arena of %d bytes; its rows are the entries' own", a.Cap())
	}
}

// A group that writes no hook (every record answered at once, under dual
// only duplicates, under disk only stored duplicates) gives back what it
// took and hands nobody: its rows slice and arena, and its replies and
// committed slices unless the syncer took them to answer the duplicates.
func TestApply_AGroupThatWritesNothingGivesItsMemoryBack(t *testing.T) {
	for _, tc := range []struct {
		name          string
		dual          bool
		replies, dups int  // disk's stored duplicates wait in replies; dual's in dups
		handed        bool // the replies and committed slices went to the syncer
	}{
		{name: "every record answered at once"},
		{name: "dual, only duplicates", dual: true, dups: 2},
		{name: "disk, only stored duplicates", replies: 2, handed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &writer{s: &syncer{}, opts: &Options{Observer: NopObserver{}}}
			w.s.cond = sync.NewCond(&w.s.mu)
			w.nextSeq = 7
			g := &commitGroup{
				dual:      tc.dual,
				firstSeq:  7,
				replies:   takeSlice(&w.spareReplies, 4),
				committed: takeSlice(&w.spareCommitted, 4),
				dups:      make([]pendingReply, tc.dups),
			}
			g.replies = g.replies[:tc.replies]
			g.rows, _ = w.groupMemory(12, 0, true)
			g.arena.Grow(3000) // 3 000 bytes: a new arena would be 4 096
			replies, committed, rows := unsafe.SliceData(g.replies), unsafe.SliceData(g.committed), unsafe.SliceData(g.rows)
			if !w.apply(g, 3, false) {
				t.Fatal("apply of a group that wrote nothing reported failure")
			}
			gotRows, gotArena := w.groupMemory(12, 3000, false)
			if unsafe.SliceData(gotRows) != rows || gotArena.Cap() != 3000 {
				t.Errorf("next group's rows (same array %v) and arena (cap %d): want the group's own (cap 3 000)",
					unsafe.SliceData(gotRows) == rows, gotArena.Cap())
			}
			kept := unsafe.SliceData(takeSlice(&w.spareReplies, 4)) == replies
			keptC := unsafe.SliceData(takeSlice(&w.spareCommitted, 4)) == committed
			if kept == tc.handed || keptC == tc.handed {
				t.Errorf("replies slice kept %v, committed kept %v; want both %v (handed to the syncer: %v)", kept, keptC, !tc.handed, tc.handed)
			}
			w.s.mu.Lock()
			handoffs := len(w.s.queue)
			w.s.mu.Unlock()
			want := 0
			if tc.dups > 0 || tc.replies > 0 {
				want = 1
			}
			if handoffs != want {
				t.Errorf("handoffs to the syncer: %d, want %d (the duplicates' answers only)", handoffs, want)
			}
		})
	}
}
