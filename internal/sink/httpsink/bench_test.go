package httpsink_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/sink/httpsink"
)

// BenchmarkDeliver: parallel deliveries of a 1 KiB hook to a loopback
// receiver that answers 200 at once, as the dispatcher's workers make
// them (one attempt deadline on every call). The receiver runs in the same
// process, so ns/op and allocs/op include its side; compare builds, not
// absolute figures.
func BenchmarkDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	s, err := httpsink.New(httpsink.Options{URL: srv.URL + "/hook", Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	body := make([]byte, 1024)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		m := message(body)
		for pb.Next() {
			// The dispatcher's one deadline: the sink's bound, as it is
			// shorter than dispatch.attempt_timeout_ms.
			ctx, cancel := context.WithTimeout(context.Background(), min(30*time.Second, s.AttemptBound()))
			err := s.Deliver(ctx, m)
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
