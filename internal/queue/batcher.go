package queue

import (
	"sync"
	"sync/atomic"
	"time"
)

// item is one caller waiting in the batcher. Items are pooled (issue 14:
// the item and its reply channel were two allocations per hook):
//
//	P1. An item goes back to the pool only from Submit, after it received
//	    the item's one answer. Answering is the last thing the writer,
//	    syncer or dual join does with an item (batcher.answer sends last),
//	    and each item is answered once, so nothing reads or sends to it
//	    again. An item whose caller left (ctx done) is never pooled: its
//	    answer may still be on its way.
type item struct {
	rec      *Record
	id       [16]byte
	size     int64
	enqueued time.Time
	reply    chan outcome // buffered(1): the writer and syncer never block on it
}

type outcome struct {
	res Result
	err error
}

// batcher is the bounded queue in front of the writer: partitions (by hook
// id) keep callers from contending on one lock, and the records/bytes bounds
// turn overload into an immediate 503 instead of unbounded memory.
type batcher struct {
	opts  *Options
	parts []*partition

	records atomic.Int64 // queued + awaiting reply
	bytes   atomic.Int64
	closed  atomic.Bool

	wake chan struct{} // capacity 1: "something was added"

	items sync.Pool // *item, each with its reply channel (P1)
	ids   idMinter
}

type partition struct {
	mu    sync.Mutex
	items []*item // REQUIRES: mu held
}

func newBatcher(opts *Options) *batcher {
	b := &batcher{opts: opts, wake: make(chan struct{}, 1)}
	b.parts = make([]*partition, opts.Partitions)
	for i := range b.parts {
		b.parts[i] = &partition{}
	}
	return b
}

// add reserves room for rec and queues it. The hook id is minted here
// (UUIDv7, so ids sort by arrival) and chooses the partition.
func (b *batcher) add(rec *Record, fenced bool) (*item, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if fenced {
		// Refuse before queueing: nothing can be acked until the fence lifts.
		return nil, ErrStoreUnavailable
	}
	size := rec.size()
	if n := b.records.Add(1); n > int64(b.opts.MaxQueue) {
		b.records.Add(-1)
		return nil, ErrOverload
	}
	if n := b.bytes.Add(size); n > b.opts.MaxQueueBytes {
		b.bytes.Add(-size)
		b.records.Add(-1)
		return nil, ErrOverload
	}
	now := b.opts.Now()
	id := rec.ID
	if id == ([16]byte{}) {
		id = b.ids.mint(now)
	}
	it, _ := b.items.Get().(*item)
	if it == nil {
		it = &item{reply: make(chan outcome, 1)}
	}
	it.rec, it.id, it.size, it.enqueued = rec, id, size, now
	p := b.parts[int(id[15])%len(b.parts)]
	p.mu.Lock()
	p.items = append(p.items, it)
	p.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return it, nil
}

// recycle pools it once its caller received its answer (P1).
func (b *batcher) recycle(it *item) {
	it.rec = nil
	b.items.Put(it)
}

func (b *batcher) release(size int64) {
	b.bytes.Add(-size)
	b.records.Add(-1)
}

// answer replies to one caller and gives its room back.
func (b *batcher) answer(it *item, o outcome) {
	b.release(it.size)
	it.reply <- o
}

// drain takes up to MaxBatch items from every partition: one group merges
// what every partition has queued (group commit across partitions).
// It reports whether any partition still holds items.
func (b *batcher) drain(dst []*item) ([]*item, bool) {
	more := false
	for _, p := range b.parts {
		p.mu.Lock()
		n := len(p.items)
		if n > b.opts.MaxBatch {
			n = b.opts.MaxBatch
			more = true
		}
		dst = append(dst, p.items[:n]...)
		rest := copy(p.items, p.items[n:])
		clear(p.items[rest:])
		p.items = p.items[:rest]
		p.mu.Unlock()
	}
	return dst, more
}

// queued counts items waiting for the writer (not those awaiting an fsync).
func (b *batcher) queued() int {
	n := 0
	for _, p := range b.parts {
		p.mu.Lock()
		n += len(p.items)
		p.mu.Unlock()
	}
	return n
}

func (b *batcher) close() { b.closed.Store(true) }
