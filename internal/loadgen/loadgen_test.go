package loadgen_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/loadgen"
	"github.com/ankusa/ankusa/internal/testutil/services"
)

// provider is a stand-in ingest (named as such: loadgen is what is under
// test here; the fleet drill drives the real binary). Each event id is
// refused twice (503 then 409, both with Retry-After: 0) before a 201; it
// remembers every body it was sent.
type provider struct {
	mu       sync.Mutex
	attempts map[string]int
	bodies   map[string][]byte // hook id -> body
	ids      map[string]string // event id -> hook id
}

func newProvider() *provider {
	return &provider{attempts: map[string]int{}, bodies: map[string][]byte{}, ids: map[string]string{}}
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get(loadgen.DefaultDedupeHeader)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts[key]++
	w.Header().Set("Retry-After", "0")
	switch p.attempts[key] {
	case 1:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":"intake_unavailable"}`)
		return
	case 2:
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"error":"dedupe_pending"}`)
		return
	}
	id := fmt.Sprintf("hook-%d", len(p.ids)+1)
	p.ids[key] = id
	p.bodies[id] = body
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"status":"accepted","id":%q}`, id)
}

func TestRunRetriesUntilAckedAndRecordsEveryAck(t *testing.T) {
	for _, mode := range []struct {
		name string
		o    loadgen.Options
	}{
		{"closed_loop", loadgen.Options{Concurrency: 4}},
		{"fixed_rate", loadgen.Options{Rate: 500}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			p := newProvider()
			a, b := httptest.NewServer(p), httptest.NewServer(p)
			defer a.Close()
			defer b.Close()
			var out bytes.Buffer
			var mu sync.Mutex
			urls := map[string]int{}
			o := mode.o
			o.URLs, o.Count, o.Out = []string{a.URL, b.URL}, 40, &out
			o.OnResponse = func(r loadgen.Response) { mu.Lock(); urls[r.URL]++; mu.Unlock() }
			st, err := loadgen.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if st.Acked != 40 || st.Attempts != 120 || st.GaveUp != 0 {
				t.Fatalf("stats %v, want 40 acked in 120 attempts", st)
			}
			if st.ByStatus[503] != 40 || st.ByStatus[409] != 40 || st.ByStatus[201] != 40 {
				t.Fatalf("statuses %v", st.ByStatus)
			}
			if urls[a.URL] == 0 || urls[b.URL] == 0 {
				t.Fatalf("attempts per URL %v: both must be used", urls)
			}
			acks, err := loadgen.ReadAcks(&out)
			if err != nil {
				t.Fatal(err)
			}
			if len(acks) != 40 {
				t.Fatalf("%d ack lines, want 40", len(acks))
			}
			for _, ack := range acks {
				body := p.bodies[ack.ID]
				sum := sha256.Sum256(body)
				if hex.EncodeToString(sum[:]) != ack.SHA256 {
					t.Fatalf("ack %s: sha256 %s is not the posted body's", ack.ID, ack.SHA256)
				}
				if p.ids[ack.Key] != ack.ID {
					t.Fatalf("ack key %s -> %s, provider gave %s", ack.Key, ack.ID, p.ids[ack.Key])
				}
			}
		})
	}
}

func TestRunGivesUpOnA4xx(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	var out bytes.Buffer
	st, err := loadgen.Run(context.Background(), loadgen.Options{URLs: []string{srv.URL}, Count: 5, Concurrency: 2, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if st.Acked != 0 || st.GaveUp != 5 || st.Attempts != 5 || out.Len() != 0 {
		t.Fatalf("stats %v, out %q: a 401 is final", st, out.String())
	}
}

// TestConsumeThenVerify drives the consumer over HTTP into a real Postgres
// table and checks every figure of the report against a known history.
func TestConsumeThenVerify(t *testing.T) {
	pool, table := services.PGTable(t)
	ctx := context.Background()
	c, err := loadgen.NewConsumer(ctx, loadgen.ConsumerOptions{Postgres: services.PostgresURL(), Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sink := httptest.NewServer(c)
	defer sink.Close()
	deliver := func(id, key, body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, sink.URL, strings.NewReader(body))
		req.Header.Set("X-Ankusa-Id", id)
		req.Header.Set("X-Ankusa-Idempotency-Key", "default:src:"+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("consumer answered %d", resp.StatusCode)
		}
	}
	sha := func(s string) string { x := sha256.Sum256([]byte(s)); return hex.EncodeToString(x[:]) }
	acks := []loadgen.Ack{
		{ID: "h1", Key: "k1", SHA256: sha("b1")}, // delivered twice: one extra
		{ID: "h2", Key: "k2", SHA256: sha("b2")}, // never delivered: missing
		{ID: "h3", Key: "k3", SHA256: sha("b3")}, // delivered with another body
		{ID: "h4", Key: "k4", SHA256: sha("b4")}, // its key also delivered under h5
		{ID: "h6", Key: "k6", SHA256: sha("b6")}, // fine
	}
	deliver("h1", "k1", "b1")
	deliver("h1", "k1", "b1")
	deliver("h3", "k3", "tampered")
	deliver("h4", "k4", "b4")
	deliver("h5", "k4", "b4")
	deliver("h6", "k6", "b6")
	var file bytes.Buffer
	for _, a := range acks {
		fmt.Fprintf(&file, `{"id":%q,"key":%q,"sha256":%q}`+"\n", a.ID, a.Key, a.SHA256)
	}
	rep, err := loadgen.Verify(ctx, &file, services.PostgresURL(), table)
	if err != nil {
		t.Fatal(err)
	}
	want := "acked=5 delivered=5 missing=1 extra_deliveries=1 duplicate_hooks=1 sha_mismatches=1"
	if rep.String() != want {
		t.Fatalf("report\n got %s\nwant %s", rep, want)
	}
	if rep.OK() || len(rep.MissingIDs) != 1 || rep.MissingIDs[0] != "h2" {
		t.Fatalf("OK %v missing %v", rep.OK(), rep.MissingIDs)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil || rows != 6 {
		t.Fatalf("rows %d err %v", rows, err)
	}
}

func TestConsumerAnswers503WhenPostgresFails(t *testing.T) {
	pool, table := services.PGTable(t)
	ctx := context.Background()
	c, err := loadgen.NewConsumer(ctx, loadgen.ConsumerOptions{Postgres: services.PostgresURL(), Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := pool.Exec(ctx, "DROP TABLE "+table); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x"))
	req.Header.Set("X-Ankusa-Id", "h1")
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("got %d %v: a delivery not written must be retried by the sender", rec.Code, rec.Header())
	}
}

func TestCompareCleanRun(t *testing.T) {
	acks := []loadgen.Ack{{ID: "a", Key: "1", SHA256: "s1"}, {ID: "b", Key: "2", SHA256: "s2", Duplicate: false}}
	dels := []loadgen.Delivery{{ID: "a", IdempotencyKey: "t:s:1", SHA256: "s1", ReceivedAt: time.Now()}, {ID: "b", IdempotencyKey: "t:s:2", SHA256: "s2"}}
	rep := loadgen.Compare(acks, dels)
	if !rep.OK() || rep.String() != "acked=2 delivered=2 missing=0 extra_deliveries=0 duplicate_hooks=0 sha_mismatches=0" {
		t.Fatalf("%s", rep)
	}
}

// A key under two hook ids is counted and named with both ids, whether the
// second id reached the provider (acked) or only the consumer (delivered).
func TestCompareNamesEachDuplicateKey(t *testing.T) {
	cases := []struct {
		name string
		acks []loadgen.Ack
		dels []loadgen.Delivery
		want []loadgen.Duplicate
	}{
		{"none", []loadgen.Ack{{ID: "a", Key: "1"}}, []loadgen.Delivery{{ID: "a", IdempotencyKey: "t:s:1"}, {ID: "a", IdempotencyKey: "t:s:1"}}, nil},
		{"second id delivered only",
			[]loadgen.Ack{{ID: "b", Key: "1"}, {ID: "c", Key: "2"}},
			[]loadgen.Delivery{{ID: "a", IdempotencyKey: "t:s:1"}, {ID: "b", IdempotencyKey: "t:s:1"}, {ID: "c", IdempotencyKey: "t:s:2"}},
			[]loadgen.Duplicate{{Key: "1", IDs: []string{"a", "b"}}}},
		{"two keys, sorted",
			[]loadgen.Ack{{ID: "z", Key: "9"}, {ID: "y", Key: "3"}},
			[]loadgen.Delivery{{ID: "x", IdempotencyKey: "t:s:9"}, {ID: "w", IdempotencyKey: "t:s:3"}, {ID: "v", IdempotencyKey: "t:s:3"}},
			[]loadgen.Duplicate{{Key: "3", IDs: []string{"v", "w", "y"}}, {Key: "9", IDs: []string{"x", "z"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := loadgen.Compare(c.acks, c.dels)
			if rep.DuplicateHooks != len(c.want) || !reflect.DeepEqual(rep.Duplicates, c.want) {
				t.Fatalf("duplicate_hooks %d %v, want %v", rep.DuplicateHooks, rep.Duplicates, c.want)
			}
		})
	}
}

func TestValidTableRefusesInjection(t *testing.T) {
	for _, name := range []string{"x; DROP TABLE y", "Upper", "", "1abc"} {
		if loadgen.ValidTable(name) == nil {
			t.Errorf("%q accepted", name)
		}
	}
}
