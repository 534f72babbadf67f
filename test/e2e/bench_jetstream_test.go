package e2e_test

// BenchmarkDualJetStreamVsDisk compares, in the same run, the ingest path
// of an in-process node under wal.type: disk with the same node under
// wal.type: dual on a JetStream R3 stream (three embedded nats-server
// instances clustered on loopback). It is a closed-loop load, not a timed
// test: benchConcurrency goroutines each post a 1 KiB body, wait for the
// answer and post again, for benchWindow after a short warm-up. b.N is
// ignored; run it with -benchtime 1x.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/app/apptest"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/testutil/natscluster"
)

const (
	benchConcurrency = 512
	benchBodySize    = 1 << 10
	benchWarmup      = time.Second
	benchWindow      = 5 * time.Second
	benchStream      = "ANKUSA_INTAKE_DEFAULT"
	benchNodeID      = "node-bench"
)

// benchResult is what one mode's window measured.
type benchResult struct {
	acked, refused, other, errs int
	reqPerSec                   float64
	p50, p99, max               time.Duration
}

func BenchmarkDualJetStreamVsDisk(b *testing.B) {
	results := map[string]benchResult{}
	modes := []string{"disk", "dual-jetstream"}
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			r := benchMode(b, mode)
			results[mode] = r
			b.ReportMetric(r.reqPerSec, "req/s")
			b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99_ms")
			b.ReportMetric(0, "ns/op") // one fixed window whatever b.N is: ns/op means nothing
			b.Logf("%s: %d acked in %s (%.0f req/s), p50 %s p99 %s max %s; 503 %d, other status %d, transport errors %d (C=%d, %d B bodies)",
				mode, r.acked, benchWindow, r.reqPerSec, r.p50, r.p99, r.max, r.refused, r.other, r.errs, benchConcurrency, benchBodySize)
			// The parent's log is not printed: the ratio goes with the
			// second mode, which runs after disk in the same process.
			if d, ok := results["disk"]; ok && mode != "disk" && d.reqPerSec > 0 {
				b.ReportMetric(r.reqPerSec/d.reqPerSec, "x_disk_req/s")
				b.Logf("%s / disk: throughput %.2f× (%.0f vs %.0f req/s), p50 %.2f× (%s vs %s), p99 %.2f× (%s vs %s)",
					mode, r.reqPerSec/d.reqPerSec, r.reqPerSec, d.reqPerSec,
					float64(r.p50)/float64(d.p50), r.p50, d.p50,
					float64(r.p99)/float64(d.p99), r.p99, d.p99)
			}
		})
	}
}

// benchMode starts a node in mode (and for dual its JetStream cluster and
// stream), runs the closed loop and stops everything.
func benchMode(b *testing.B, mode string) benchResult {
	b.StopTimer()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(rcv.Close)
	backups := b.TempDir()
	var tweak func(*config.Config)
	if mode == "dual-jetstream" {
		c := natscluster.Start(b, natscluster.Options{Name: "ankusa-e2e-bench", MaxStore: 4 << 30})
		c.CreateStream(b, natsjs.StreamConfig{
			Name:       benchStream,
			Subjects:   []string{"ankusa.intake.default.>"},
			Replicas:   3,
			Storage:    natsjs.FileStorage,
			Duplicates: 2 * time.Minute,
			MaxAge:     24 * time.Hour, // ≥ 2 × backup.max_age_ms (1 h)
			MaxMsgSize: -1,
		})
		c.WaitStreamLeader(b, benchStream)
		tweak = func(cfg *config.Config) {
			cfg.WAL.Type = "dual"
			cfg.Intake.Type = "jetstream"
			cfg.Intake.NodeID = benchNodeID
			cfg.Intake.JetStream = &config.IntakeJetStream{URL: c.URL(), Stream: benchStream}
			cfg.Intake.MaxRecordBytes = 1 << 20 // nats-server's default max_payload is 1 MiB
		}
	}
	in := startBenchInstance(b, rcv.URL+"/hooks", func(cfg *config.Config) {
		cfg.HTTP.MaxBodyBytes = 512 << 10 // the same edge limit in both modes
		cfg.Backup = intakeBackups(backups)
		if tweak != nil {
			tweak(cfg)
		}
	})
	b.Logf("%s: %s", mode, in.DurabilityLine())

	target := "http://" + in.IngestAddr() + "/webhooks/" + sourceID
	tr := &http.Transport{MaxIdleConnsPerHost: benchConcurrency, MaxConnsPerHost: benchConcurrency, DisableCompression: true}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	b.Cleanup(tr.CloseIdleConnections)
	body := bytes.Repeat([]byte("x"), benchBodySize)
	copy(body, `{"bench":"`)
	body[len(body)-2], body[len(body)-1] = '"', '}'

	var measuring atomic.Bool
	var refused, other, errs atomic.Int64
	lat := make([][]time.Duration, benchConcurrency)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range benchConcurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
				if err != nil {
					panic(err)
				}
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil && measuring.Load() {
						errs.Add(1)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := time.Since(t0)
				if !measuring.Load() {
					continue
				}
				switch resp.StatusCode {
				case http.StatusCreated:
					lat[w] = append(lat[w], d)
				case http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	warm := time.NewTimer(benchWarmup)
	<-warm.C
	measuring.Store(true)
	b.StartTimer()
	start := time.Now()
	window := time.NewTimer(benchWindow)
	<-window.C
	measuring.Store(false)
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	wg.Wait()

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	r := benchResult{acked: len(all), refused: int(refused.Load()), other: int(other.Load()), errs: int(errs.Load())}
	if len(all) == 0 {
		b.Fatalf("%s: no 201 in %s (503 %d, other %d, errors %d)", mode, benchWindow, r.refused, r.other, r.errs)
	}
	r.reqPerSec = float64(len(all)) / elapsed.Seconds()
	r.p50 = all[len(all)*50/100]
	r.p99 = all[min(len(all)-1, len(all)*99/100)]
	r.max = all[len(all)-1]
	return r
}

// startBenchInstance is startInstance for a benchmark: source "orders"
// with one http sink posting to sinkURL; only warnings are logged.
func startBenchInstance(b *testing.B, sinkURL string, tweak func(*config.Config)) *app.Instance {
	b.Helper()
	cfg := baseConfig("e2e-bench", b.TempDir(), sinkURL)
	tweak(cfg)
	if err := cfg.Validate(); err != nil {
		b.Fatalf("bench config is invalid: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(benchLogWriter{b}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	in := apptest.Start(b, cfg, app.Options{Logger: logger})
	// As a load balancer does: wait for GET /ready (under dual, the intake
	// adapter has seen the log answer).
	testutil.Eventually(b, waitFor, "GET /ready to answer 200", func() bool {
		resp, err := http.Get("http://" + in.IngestAddr() + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return in
}

type benchLogWriter struct{ b *testing.B }

func (w benchLogWriter) Write(p []byte) (int, error) {
	w.b.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
