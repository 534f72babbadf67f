package queue

import (
	"math/bits"
	"unsafe"
)

// maxSpareBytes bounds each of the writer's stashes by the bytes of the
// arrays it keeps, not by their count. One fsync covers every group
// applied while the last one ran: often dozens of one-record groups, now
// and then one of hundreds. A bound of 64 slices dropped the small
// groups' memory when many were covered at once, and a sixth of the
// groups under dual then found the stash empty (issue 14); a count large
// enough for those would let as many large groups' slices stay pinned.
const maxSpareBytes = 1 << 20

// stashClasses is one class per power of two a slice's capacity can have.
const stashClasses = 40

// stash keeps emptied per-group memory (a slice, or a group's rows and
// arena) for the next groups, by size class: class k holds what has room
// for at least 2^k elements and, below the last class, less than 2^(k+1).
// Owned by the writer's run goroutine.
//
// Before, a stash handed out its newest slice, and dropped it when it was
// too small for the group: with group sizes that vary from one record to
// hundreds, a large group threw away a small group's slice and made one of
// exactly its own size, which the next larger group threw away again.
type stash[E any] struct {
	classes [stashClasses][]stashed[E]
	bytes   int
}

type stashed[E any] struct {
	e    E
	size int
}

// put keeps e, with room for room elements in arrays of size bytes, when
// the stash can stay within maxSpareBytes (which counts each entry's own
// header too); otherwise e is left to the GC. A full stash makes room by
// dropping smaller classes' memory, smallest first: a large slice serves
// every group and a small one only small groups, and take never hands out
// a smaller class, so a burst of small groups must not fill the stash for
// good and leave every larger group after it to make its own.
// REQUIRES: e references nothing the stash must not keep alive.
func (st *stash[E]) put(e E, room, size int) {
	if room <= 0 {
		return
	}
	size += int(unsafe.Sizeof(stashed[E]{}))
	if size > maxSpareBytes {
		return
	}
	k := min(bits.Len(uint(room))-1, stashClasses-1)
	for st.bytes+size > maxSpareBytes {
		if !st.dropBelow(k) {
			return
		}
	}
	st.classes[k] = append(st.classes[k], stashed[E]{e, size})
	st.bytes += size
}

// dropBelow drops the newest entry of the smallest non-empty class below
// k, reporting false when there is none.
func (st *stash[E]) dropBelow(k int) bool {
	for j := range k {
		if len(st.classes[j]) > 0 {
			st.pop(j)
			return true
		}
	}
	return false
}

// pop removes and returns the newest entry of class k (not empty).
func (st *stash[E]) pop(k int) E {
	c := st.classes[k]
	last := len(c) - 1
	s := c[last]
	c[last] = stashed[E]{} // the vacated slot keeps nothing alive
	st.classes[k] = c[:last]
	st.bytes -= s.size
	return s.e
}

// take returns kept memory with room for n elements, the newest of the
// smallest class sure to have it, or false when none is kept.
func (st *stash[E]) take(n int) (E, bool) {
	for k := spareClass(n); k < stashClasses; k++ {
		if len(st.classes[k]) > 0 {
			return st.pop(k), true
		}
	}
	var zero E
	return zero, false
}

// spareClass is the smallest class whose every member has room for n.
func spareClass(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// spareRoom is the room a new group slice for n elements is made with: n
// rounded up to a power of two, so that the sizes the stash keeps settle
// on a few classes and a group a little larger than the last finds one.
func spareRoom(n int) int { return 1 << spareClass(n) }

// sliceBytes is the size of s's backing array.
func sliceBytes[T any](s []T) int {
	var z T
	return cap(s) * int(unsafe.Sizeof(z))
}

// putSlice keeps s, emptied, in st (nil is ignored).
func putSlice[T any](st *stash[[]T], s []T) {
	if s != nil {
		st.put(s[:0], cap(s), sliceBytes(s))
	}
}

// takeSlice returns an empty slice with room for n: a kept one, or a new
// one of spareRoom(n).
func takeSlice[T any](st *stash[[]T], n int) []T {
	if s, ok := st.take(n); ok {
		return s
	}
	return make([]T, 0, spareRoom(n))
}
