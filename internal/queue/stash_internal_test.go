package queue

import "testing"

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
	if want := maxSpareBytes / 4096; kept != want {
		t.Fatalf("kept %d slices of 4 KiB, want %d (the bound's worth)", kept, want)
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
