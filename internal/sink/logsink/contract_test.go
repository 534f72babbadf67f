package logsink_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/sink/logsink"
	"github.com/ankusa/ankusa/internal/sink/sinktest"
)

// TestSink_Contract runs the sink contract suite against the log sink; its
// "target" is the log, read back through a recording handler. It carries
// only the hook's metadata (never the body or header values), does no I/O
// and refuses nothing.
func TestSink_Contract(t *testing.T) {
	sinktest.Run(t, sinktest.Target{
		New: func(t *testing.T) sinktest.Instance {
			rec := &recorder{}
			return sinktest.Instance{
				Sink: logsink.New(slog.New(rec)),
				Received: func(t *testing.T, id uuid.UUID) sinktest.Received {
					t.Helper()
					if !rec.logged(id.String()) {
						t.Fatalf("no log line for hook %s", id)
					}
					return sinktest.Received{ID: id.String()}
				},
			}
		},
	})
}

// recorder is a slog handler keeping the id attribute of every record.
type recorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "id" {
			r.mu.Lock()
			r.ids = append(r.ids, a.Value.String())
			r.mu.Unlock()
		}
		return true
	})
	return nil
}

func (r *recorder) logged(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, got := range r.ids {
		if got == id {
			return true
		}
	}
	return false
}
