package dispatch

import (
	"testing"

	"github.com/ankusa/ankusa/internal/store"
)

// The hot cache's memory stays bounded whatever the commit path hands over
// (hot.go): waiting hand-overs keep at most hotMaxBytes of envelopes and
// hotSlots hooks, the ring at most hotMaxBytes; what is past a bound is
// kept without its value, or not at all, never refused to the commit path.
func TestHot_MemoryIsBounded(t *testing.T) {
	var d Dispatcher
	d.hot.open.Store(true)
	val := make([]byte, 64<<10)
	n := 2 * hotMaxBytes / len(val) // twice the byte bound
	cs := make([]store.Committed, n)
	for i := range cs {
		cs[i] = store.Committed{Seq: uint64(i + 1), Sinks: []store.HookSink{{Num: 0, ID: "s"}}, Value: val}
	}
	d.Committed(cs)
	if got := d.hot.pendingBytes; got > hotMaxBytes {
		t.Fatalf("waiting hand-overs hold %d bytes of envelopes, bound %d", got, hotMaxBytes)
	}
	if l := len(d.hot.pending); l != n {
		t.Fatalf("%d hooks waiting, want all %d (past the byte bound they wait without a value)", l, n)
	}
	d.Committed(make([]store.Committed, hotSlots)) // past the count bound: not kept
	if l := len(d.hot.pending); l != n {
		t.Fatalf("%d hooks waiting after a hand-over past hotSlots, want %d", l, n)
	}
	d.hot.take()
	if d.hot.bytes > hotMaxBytes {
		t.Fatalf("the ring holds %d bytes of envelopes, bound %d", d.hot.bytes, hotMaxBytes)
	}
	withValue := 0
	for seq := uint64(1); seq <= uint64(n); seq++ {
		e := d.hot.lookup(seq)
		if e == nil {
			t.Fatalf("hook %d not held", seq)
		}
		if e.c.Value != nil {
			withValue++
		}
	}
	if withValue != hotMaxBytes/len(val) {
		t.Fatalf("%d hooks held with their envelope, want %d", withValue, hotMaxBytes/len(val))
	}
	if len(d.hot.spare) != 0 || cap(d.hot.spare) == 0 {
		t.Fatalf("the taken buffer is not kept for reuse")
	}
	for _, c := range d.hot.spare[:cap(d.hot.spare)] {
		if c.Value != nil {
			t.Fatal("the reused buffer still holds an envelope")
		}
	}
}
