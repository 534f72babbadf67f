package edge_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/ratelimit"
	"github.com/ankusa/ankusa/internal/testutil"
)

// Under tenant_path routing the tenant of an unbound source is request
// input: 100 posts under 100 made-up tenants against a 5/s limit (burst 5)
// must not each get a fresh bucket. A tenant with a limit of its own keeps
// its own bucket.
func TestEdge_UnlistedTenantsShareTheSourcesBucket(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	frozen := time.Now()
	g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: 5, Burst: 5}, Now: func() time.Time { return frozen }})
	g.SetLimit("acme", ratelimit.Limit{Rate: 5, Burst: 5})
	h := edge.New(edge.Options{
		Routing: "tenant_path", Prefix: "/webhooks", MaxBodyBytes: 1000, Limiter: g,
		Sources:   edge.NewRegistry(map[string]*edge.Source{"demo": {ID: "demo", Sinks: []queue.SinkRef{{Num: 0, ID: "log"}}}}),
		Committer: q, Observer: nopObserver{}, Logger: testutil.Logger(t),
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(tenant string) int {
		resp, err := http.Post(srv.URL+"/webhooks/"+tenant+"/demo", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	admitted := 0
	for i := range 100 {
		if post(fmt.Sprintf("t%03d", i)) == http.StatusCreated {
			admitted++
		}
	}
	if admitted > 5 {
		t.Fatalf("100 posts under 100 unlisted tenants against 5/s burst 5: %d admitted, want at most 5", admitted)
	}
	for i := range 5 {
		if code := post("acme"); code != http.StatusCreated {
			t.Fatalf("listed tenant acme post %d: %d, want 201 (its own bucket)", i, code)
		}
	}
	if code := post("acme"); code != http.StatusTooManyRequests {
		t.Fatalf("acme past its burst: %d, want 429", code)
	}
}

// sources.<id>.tenants lists the tenants an unbound source answers under
// tenant_path: any other tenant in the URL is 404 unknown_source, refused
// before its body is read.
func TestEdge_TenantAllowlist(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	h := edge.New(edge.Options{
		Routing: "tenant_path", Prefix: "/webhooks", MaxBodyBytes: 1000,
		Sources: edge.NewRegistry(map[string]*edge.Source{"demo": {ID: "demo", Sinks: []queue.SinkRef{{Num: 0, ID: "log"}},
			Tenants: map[string]bool{"acme": true, "globex": true}}}),
		Committer: q, Observer: nopObserver{}, Logger: testutil.Logger(t),
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for tenant, want := range map[string]int{"acme": 201, "globex": 201, "initech": 404, "t042": 404} {
		resp, err := http.Post(srv.URL+"/webhooks/"+tenant+"/demo", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("tenant %s: %d, want %d", tenant, resp.StatusCode, want)
		}
	}
}
