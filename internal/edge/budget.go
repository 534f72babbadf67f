package edge

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
)

// Budget bounds the bytes of request bodies the edge holds, across all
// connections: a body is admitted before it is read (its Content-Length up
// front, a chunked body as it streams), and released when its request has
// been answered. So the memory spent on bodies is bounded whatever the
// concurrency; a request that does not fit is answered 503 overload.
//
// Invariant: used ≤ max at every instant; TryAcquire never blocks. A
// declared body is charged its length while its buffer may be a pooled
// one up to 25 % longer (bodypool.go, B2).
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// TryAcquire takes n bytes if they fit.
func (b *Budget) TryAcquire(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Release returns n bytes.
func (b *Budget) Release(n int64) { b.used.Add(-n) }

// Used is the bytes held now.
func (b *Budget) Used() int64 { return b.used.Load() }

// errBudget: the body does not fit in the budget.
var errBudget = errors.New("body budget spent")

// chunkStart is the first buffer of a body without a Content-Length.
const chunkStart = 32 << 10

// readBody reads r's body within max bytes, holding its length in b; *held
// is what the caller must release. A declared body is read into a buffer
// from pool (returned as pb, nil when not pooled); the caller gives pb back
// under invariant B1 (bodypool.go). It returns errBudget when the budget
// cannot cover the body, or the reader's error (a *http.MaxBytesError past
// max).
func readBody(w http.ResponseWriter, r *http.Request, b *Budget, pool *bodyPool, max int64, held *int64) ([]byte, *bodyBuf, error) {
	if n := r.ContentLength; n >= 0 {
		// Declared: the whole length is admitted before a byte is read, and
		// read into one buffer of that length. n ≤ max was checked by the
		// caller and the server's body reader stops at the declared length,
		// so no MaxBytesReader is needed.
		if !b.TryAcquire(n) {
			return nil, nil, errBudget
		}
		*held = n
		var buf []byte
		pb := pool.get(n)
		if pb != nil {
			buf = pb.b[:n:n]
		} else {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return nil, pb, err
		}
		// Closed once read (the server's reader saw its end with the last
		// bytes): otherwise net/http probes the body again after the handler
		// for unread bytes, at an allocation and a read per request.
		_ = r.Body.Close()
		return buf, pb, nil
	}
	body := http.MaxBytesReader(w, r.Body, max)
	// Chunked: the buffer grows by doubling, each growth admitted first;
	// one byte past max is read to tell "exactly max" from "too large".
	limit := max + 1
	size := min(int64(chunkStart), limit)
	if !b.TryAcquire(size) {
		return nil, nil, errBudget
	}
	*held = size
	buf := make([]byte, 0, size)
	for {
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if len(buf) == cap(buf) {
			next := min(2*int64(cap(buf)), limit)
			if next == int64(cap(buf)) {
				// Full at max+1: the MaxBytesReader reports it on the next read.
				continue
			}
			if !b.TryAcquire(next - int64(cap(buf))) {
				return nil, nil, errBudget
			}
			*held += next - int64(cap(buf))
			nb := make([]byte, len(buf), next)
			copy(nb, buf)
			buf = nb
		}
	}
}
