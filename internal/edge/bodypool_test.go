package edge_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// keepingCommitter keeps every record it is given and answers from answer;
// it is a test double for the commit path's ownership of rec.Body, not for
// its durability. releasingCommitter adds the edge.BodyReleaser promise.
type keepingCommitter struct {
	mu     sync.Mutex
	kept   []*queue.Record
	copies [][]byte       // each body as it was when Submit was called
	recs   []queue.Record // each record as it was, its headers cloned
	answer func(ctx context.Context) error
}

func (c *keepingCommitter) Submit(ctx context.Context, rec *queue.Record) (queue.Result, error) {
	c.mu.Lock()
	c.kept = append(c.kept, rec)
	c.copies = append(c.copies, bytes.Clone(rec.Body))
	rc := *rec
	rc.Headers = slices.Clone(rec.Headers)
	c.recs = append(c.recs, rc)
	c.mu.Unlock()
	if err := c.answer(ctx); err != nil {
		return queue.Result{}, err
	}
	return queue.Result{ID: [16]byte{1}, Seq: 1}, nil
}

// intact fails t for every kept record whose body, or the record itself
// (its fields and headers: the pooled request state), changed since Submit.
func (c *keepingCommitter) intact(t *testing.T, which func(i int) bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.kept {
		if which(i) && !bytes.Equal(r.Body, c.copies[i]) {
			t.Fatalf("record %d: its body was overwritten after Submit returned (%.20q…, was %.20q…): a buffer still referenced went back to the pool",
				i, r.Body, c.copies[i])
		}
		if w := c.recs[i]; which(i) && (r.Tenant != w.Tenant || r.Source != w.Source || r.ReceivedAt != w.ReceivedAt || !slices.Equal(r.Headers, w.Headers)) {
			t.Fatalf("record %d changed after Submit returned (%v, was %v): its request state went back to the pool", i, r.Headers, w.Headers)
		}
	}
}

type releasingCommitter struct{ keepingCommitter }

func (*releasingCommitter) ReleasesBody() {}

func poolHandler(c edge.Committer) *edge.Handler {
	return edge.New(edge.Options{
		Routing: "path", Prefix: "/webhooks", MaxBodyBytes: 1 << 20,
		Sources:   edge.NewRegistry(map[string]*edge.Source{"demo": {ID: "demo", Sinks: []queue.SinkRef{{Num: 0, ID: "log"}}}}),
		Committer: c, Observer: nopObserver{},
	})
}

// serve runs one POST through h on the calling goroutine (so that the pool
// a request gives a buffer back to is the one the next request takes from).
func serve(h http.Handler, ctx context.Context, body string, hdr map[string]string) int {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/demo", strings.NewReader(body)).WithContext(ctx)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	return rr.Code
}

// Invariant B1 (bodypool.go): a body buffer is never given back while
// someone may still read it. Each case hands records to a committer that
// keeps them, then serves more requests of the same size (which would take
// a buffer given back too early and overwrite it), and checks that every
// body that may still be referenced is unchanged.
func TestIngest_BodyBufferNotReusedWhileReferenced(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ok := func(context.Context) error { return nil }
	tests := []struct {
		name string
		c    func() (edge.Committer, *keepingCommitter)
		// first is the context of the request whose record must stay intact.
		first context.Context
		// answer of the first Submit.
		answer func(context.Context) error
	}{
		{
			// The client left: the queue returns ctx.Err() while the record
			// may still be queued, and its writer reads the body later.
			name: "releasing committer, client gone",
			c: func() (edge.Committer, *keepingCommitter) {
				rc := &releasingCommitter{}
				return rc, &rc.keepingCommitter
			},
			first: cancelled, answer: func(ctx context.Context) error { return ctx.Err() },
		},
		{
			// No promise (wal.type none: a timed-out sink may still read).
			name: "committer without the promise, success",
			c: func() (edge.Committer, *keepingCommitter) {
				kc := &keepingCommitter{}
				return kc, kc
			},
			first: context.Background(), answer: ok,
		},
		{
			name: "committer without the promise, refusal",
			c: func() (edge.Committer, *keepingCommitter) {
				kc := &keepingCommitter{}
				return kc, kc
			},
			first: context.Background(), answer: func(context.Context) error { return queue.ErrOverload },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, k := tt.c()
			h := poolHandler(c)
			k.answer = tt.answer
			serve(h, tt.first, strings.Repeat("A", 4000), map[string]string{"X-Request": "first"})
			k.answer = ok
			for i := range 16 {
				if code := serve(h, context.Background(), strings.Repeat(string(rune('a'+i)), 4000), map[string]string{"X-Request": strconv.Itoa(i)}); code != http.StatusCreated {
					t.Fatalf("request %d: %d", i, code)
				}
			}
			k.intact(t, func(i int) bool { return i == 0 })
			if _, releasing := c.(edge.BodyReleaser); !releasing {
				k.intact(t, func(int) bool { return true })
			}
		})
	}
}

// TestIngest_PooledBodiesStoredIntact: through the real queue and store,
// bodies read into pooled buffers are stored byte for byte, also those of
// requests whose client left before the commit answered (their records are
// still committed by the writer after the handler returned, from the
// buffer the handler must not have given back). Every body carries its
// sha256 in a header (a header value is the request's own string, never a pooled buffer), so a stored hook whose
// body came from another request's bytes is found.
func TestIngest_PooledBodiesStoredIntact(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	h := poolHandler(q)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	const n = 300
	for i := range n {
		body := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat(string(rune('a'+i%26)), 900))
		sum := sha256.Sum256([]byte(body))
		ctx := context.Background()
		if i%2 == 0 {
			ctx = cancelled // Submit returns at once; the writer commits the record later
		}
		code := serve(h, ctx, body, map[string]string{"X-Body-Sha256": hex.EncodeToString(sum[:])})
		if i%2 == 1 && code != http.StatusCreated {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	// Every record was queued (none refused): wait until all are durable.
	testutil.Eventually(t, 10*time.Second, "all hooks durable", func() bool {
		s := q.Stats()
		return s.NextSeq >= n+1 && s.DurableSeq >= n
	})
	checked := 0
	err := st.Scan(store.HookKey(0), []byte{store.PrefixHook + 1}, func(_, v []byte) bool {
		env, err := store.DecodeEnvelope(v)
		if err != nil {
			t.Errorf("decode: %v", err)
			return false
		}
		want := ""
		for _, hd := range env.Headers {
			if hd.Name == "x-body-sha256" {
				want = hd.Value
			}
		}
		sum := sha256.Sum256(env.Body)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("hook %d: stored body %.30q… is not the body its request sent (sha256 %s, header %s)", env.Seq, env.Body, got, want)
		}
		// The stored checksum (hashed by the edge, queue.Record.BodySHA256)
		// is the stored body's.
		if env.SHA256 != sum {
			t.Errorf("hook %d: stored sha256 %x, its body's is %x", env.Seq, env.SHA256, sum)
		}
		checked++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked != n {
		t.Fatalf("checked %d hooks, want %d", checked, n)
	}
}
