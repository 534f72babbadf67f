package fleet

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/testutil/services"
)

// The three loadgen commands of the binary, wired together: loadgen posts
// to an ingest stand-in that forwards each accepted hook to `loadgen
// consume` (as Ankusa's HTTP sink would), and `loadgen verify` reads both.
// A second verify over an acked line nobody delivered must exit non-zero.
func TestLoadgenCommands(t *testing.T) {
	_, table := services.PGTable(t)
	work := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	consume := exec.Command(binPath, "loadgen", "consume", "--listen", addr, "--postgres", services.PostgresURL(), "--table", table)
	testutil.DiesWithTest(consume)
	var clog bytes.Buffer
	consume.Stdout, consume.Stderr = &clog, &clog
	if err := consume.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consume.Process.Kill(); _ = consume.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consume never listened: %s", clog.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a port: no event to wait on
	}
	// The stand-in ingest: 201 with an id, after handing the body to the
	// consumer the way the HTTP sink does (x-ankusa-id, idempotency key).
	var n atomic.Int64
	ingest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(r.Body)
		id := fmt.Sprintf("01000000-0000-7000-8000-%012d", n.Add(1))
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+"/", bytes.NewReader(body.Bytes()))
		req.Header.Set("X-Ankusa-Id", id)
		req.Header.Set("X-Ankusa-Idempotency-Key", "default:drill:"+r.Header.Get("X-Loadgen-Id"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		resp.Body.Close()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"status":"accepted","id":%q}`, id)
	}))
	defer ingest.Close()

	acked := filepath.Join(work, "acked.jsonl")
	out, err := exec.Command(binPath, "loadgen", "--url", ingest.URL, "--concurrency", "4", "--count", "30", "--out", acked).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "acked=30") {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	out, err = exec.Command(binPath, "loadgen", "verify", "--acked", acked, "--postgres", services.PostgresURL(), "--table", table).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "acked=30 delivered=30 missing=0 extra_deliveries=0 duplicate_hooks=0 sha_mismatches=0") {
		t.Fatalf("verify of a clean run: %v\n%s", err, out)
	}
	// An acked hook that never arrived: verify says so and exits 1.
	f, err := os.OpenFile(acked, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, `{"id":"01000000-0000-7000-8000-999999999999","key":"lost","sha256":"00"}`)
	f.Close()
	cmd := exec.Command(binPath, "loadgen", "verify", "--acked", acked, "--postgres", services.PostgresURL(), "--table", table)
	out, err = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(string(out), "missing=1") {
		t.Fatalf("verify with a missing hook: exit %d (%v)\n%s", code, err, out)
	}
}
