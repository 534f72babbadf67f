package edge_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/testutil"
)

func budgetServer(t *testing.T, maxBody, budget int64) (string, *edge.Budget) {
	t.Helper()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	b := edge.NewBudget(budget)
	h := edge.New(edge.Options{
		Routing: "path", Prefix: "/webhooks", MaxBodyBytes: maxBody, Budget: b,
		Sources:   edge.NewRegistry(map[string]*edge.Source{"demo": {ID: "demo", Sinks: []queue.SinkRef{{Num: 0, ID: "log"}}}}),
		Committer: q, Observer: nopObserver{}, Logger: testutil.Logger(t),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), b
}

func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

func readStatus(t *testing.T, br *bufio.Reader, c net.Conn) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Header.Set("X-Test-Body", string(b))
	return resp
}

func isOverload(resp *http.Response) bool {
	return resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" &&
		strings.Contains(resp.Header.Get("X-Test-Body"), `"overload"`)
}

// A declared body that does not fit in what is left of the budget is
// refused before a byte of it is sent (the answer comes while the client
// would still be sending); once the holder is answered, the
// budget is back and the same upload is accepted.
func TestEdge_BodyBudgetRefusesDeclaredBodyUpFront(t *testing.T) {
	addr, b := budgetServer(t, 1000, 1500)
	holder, hbr := rawConn(t, addr)
	write(t, holder, "POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("a", 10))
	testutil.Eventually(t, 5*time.Second, "holder admitted", func() bool { return b.Used() == 1000 })

	other, obr := rawConn(t, addr)
	write(t, other, "POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n") // headers only
	if resp := readStatus(t, obr, other); !isOverload(resp) {
		t.Fatalf("second upload over the budget: %d %q, want 503 overload with Retry-After", resp.StatusCode, resp.Header.Get("X-Test-Body"))
	}
	_ = other.Close() // the provider gives up the body it was refused

	write(t, holder, strings.Repeat("a", 990))
	if resp := readStatus(t, hbr, holder); resp.StatusCode != http.StatusCreated {
		t.Fatalf("holder: %d, want 201", resp.StatusCode)
	}
	if u := b.Used(); u != 0 {
		t.Fatalf("budget used after every request was answered = %d, want 0", u)
	}
	again, abr := rawConn(t, addr)
	write(t, again, "POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("b", 1000))
	if resp := readStatus(t, abr, again); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload after the budget came back: %d, want 201", resp.StatusCode)
	}
}

// A chunked body is counted as it streams: it is refused the moment its
// buffer would outgrow what is left, not after it was read whole.
func TestEdge_BodyBudgetCountsChunkedBodies(t *testing.T) {
	addr, b := budgetServer(t, 100_000, 150_000)
	holder, hbr := rawConn(t, addr)
	write(t, holder, "POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nx")
	testutil.Eventually(t, 5*time.Second, "holder admitted", func() bool { return b.Used() == 100_000 })

	chunked, cbr := rawConn(t, addr)
	write(t, chunked, "POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	piece := strings.Repeat("c", 8192)
	sent := 0
	for sent < 40_000 { // past the first 32 KiB buffer, under max_body_bytes
		write(t, chunked, fmt.Sprintf("%x\r\n%s\r\n", len(piece), piece))
		sent += len(piece)
	}
	if resp := readStatus(t, cbr, chunked); !isOverload(resp) {
		t.Fatalf("chunked body outgrowing the budget after %d bytes: %d %q, want 503 overload", sent, resp.StatusCode, resp.Header.Get("X-Test-Body"))
	}
	_ = chunked.Close()
	if u := b.Used(); u > 150_000 {
		t.Fatalf("budget used = %d, over its 150000", u)
	}

	write(t, holder, strings.Repeat("x", 99_999))
	if resp := readStatus(t, hbr, holder); resp.StatusCode != http.StatusCreated {
		t.Fatalf("holder: %d, want 201", resp.StatusCode)
	}
	ok, obr := rawConn(t, addr)
	write(t, ok, "POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 5 {
		write(t, ok, fmt.Sprintf("%x\r\n%s\r\n", len(piece), piece))
	}
	write(t, ok, "0\r\n\r\n")
	if resp := readStatus(t, obr, ok); resp.StatusCode != http.StatusCreated {
		t.Fatalf("chunked body within the budget: %d %q, want 201", resp.StatusCode, resp.Header.Get("X-Test-Body"))
	}
}
