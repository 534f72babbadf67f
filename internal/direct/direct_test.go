package direct_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/direct"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/httpsink"
)

func httpSink(t *testing.T, h http.HandlerFunc) sink.Sink {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s, err := httpsink.New(httpsink.Options{URL: srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func rec() *queue.Record {
	return &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "demo", Body: []byte(`{}`),
		Sinks: []queue.SinkRef{{Num: 0, ID: "ok"}, {Num: 1, ID: "other"}}}
}

func TestSubmit(t *testing.T) {
	okSink := func(t *testing.T) sink.Sink { return httpSink(t, func(w http.ResponseWriter, _ *http.Request) {}) }
	tests := []struct {
		name    string
		other   func(t *testing.T) sink.Sink
		wantErr error
	}{
		{"every sink confirms", okSink, nil},
		{"one sink answers 500", func(t *testing.T) sink.Sink {
			return httpSink(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) })
		}, direct.ErrSinkUnavailable},
		{"one sink is slower than the deadline", func(t *testing.T) sink.Sink {
			return httpSink(t, func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-time.After(time.Second):
				}
			})
		}, direct.ErrSinkUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := direct.New(direct.Options{Sinks: map[uint16]sink.Sink{0: okSink(t), 1: tt.other(t)}, Deadline: 300 * time.Millisecond})
			start := time.Now()
			res, err := c.Submit(context.Background(), rec())
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if err == nil && res.ID == ([16]byte{}) {
				t.Fatal("no id minted")
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("took %s: the deadline did not bound the delivery", time.Since(start))
			}
		})
	}
}

func TestSubmitOverload(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 2)
	slow := httpSink(t, func(w http.ResponseWriter, r *http.Request) { arrived <- struct{}{}; <-release })
	c := direct.New(direct.Options{Sinks: map[uint16]sink.Sink{0: slow, 1: slow}, Deadline: 5 * time.Second, MaxInflight: 1})
	done := make(chan error, 1)
	go func() { _, err := c.Submit(context.Background(), rec()); done <- err }()
	<-arrived // the first hook holds the only slot, at its sink
	if _, err := c.Submit(context.Background(), rec()); !errors.Is(err, queue.ErrOverload) {
		t.Fatalf("second hook: %v, want overload", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("first hook: %v", err)
	}
}
