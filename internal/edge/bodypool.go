package edge

import (
	"sort"
	"sync"
)

// Body buffers of declared length are taken from size-classed pools and
// given back once nothing references them, so a steady stream of hooks
// reads into the same few buffers instead of allocating (and zeroing) one
// per request: at 256 KiB that allocation was a tenth of the request's CPU.
//
// Invariants (kept here and in Handler.ServeHTTP):
//
//	B1. A buffer goes back to its pool only when no one else can still read
//	    it: the request was answered without handing the body to anything
//	    but synchronous checks (verification, dedupe key, handshake), or the
//	    committer promised to keep nothing (BodyReleaser) and Submit did not
//	    return the context's error (the record may then still be queued and
//	    read by the writer later). Otherwise the buffer is left to the GC.
//	B2. The budget is charged the body's length, as without pooling (a
//	    buffer is at most 25 % longer than the length it was taken for, and
//	    buffers above maxPooledBody are never pooled), so the bytes of body
//	    buffers held stay under 1.25 × the budget. Idle buffers are the
//	    sync.Pool's: the garbage collector empties it.
const (
	minPooledBody = 256
	maxPooledBody = 1 << 20
)

// bodyBuf is one pooled buffer; pooled by pointer so that Put does not
// allocate.
type bodyBuf struct{ b []byte }

// bodyPool holds one sync.Pool per size class.
type bodyPool struct {
	sizes []int // ascending: 256, then quarter steps of each power of two up to maxPooledBody
	pools []sync.Pool
}

func newBodyPool() *bodyPool {
	p := &bodyPool{sizes: []int{minPooledBody}}
	for base := minPooledBody; base < maxPooledBody; base *= 2 {
		for q := 5; q <= 8; q++ {
			p.sizes = append(p.sizes, base*q/4)
		}
	}
	p.pools = make([]sync.Pool, len(p.sizes))
	return p
}

// get returns a buffer of at least n bytes, or nil when n is outside the
// pooled sizes (the caller allocates exactly then).
func (p *bodyPool) get(n int64) *bodyBuf {
	if n <= 0 || n > maxPooledBody {
		return nil
	}
	i := sort.SearchInts(p.sizes, int(n))
	if 4*int64(p.sizes[i]) > 5*n {
		// Small bodies (under about 205 bytes): B2's 25 % would not hold,
		// and an exact allocation that small costs little.
		return nil
	}
	if b, ok := p.pools[i].Get().(*bodyBuf); ok {
		return b
	}
	return &bodyBuf{b: make([]byte, p.sizes[i])}
}

// put gives b back to its class (B1 is the caller's).
func (p *bodyPool) put(b *bodyBuf) {
	i := sort.SearchInts(p.sizes, cap(b.b))
	if i < len(p.sizes) && p.sizes[i] == cap(b.b) {
		p.pools[i].Put(b)
	}
}
