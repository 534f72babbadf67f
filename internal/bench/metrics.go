package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Series of the instance's /metrics that the bench reads. They are scraped
// from the admin port at the start and the end of the measured window, and
// only their deltas are used.
const (
	metricSync     = "ankusa_wal_sync_duration_seconds"
	metricPublish  = "ankusa_intake_publish_duration_seconds"
	metricDelivery = "ankusa_dispatch_deliveries_total"
)

// sample is one series of a Prometheus text exposition: its name, labels
// and value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metricSnap is one scrape.
type metricSnap []sample

// scrapeMetrics reads the text exposition at url.
func scrapeMetrics(ctx context.Context, url string) (metricSnap, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// Plain text: the protobuf and OpenMetrics forms are not parsed here.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the Prometheus text format (version 0.0.4): comments
// are skipped, every other line is `name{labels} value [timestamp]`.
func parseMetrics(r io.Reader) (metricSnap, error) {
	var out metricSnap
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics: %w in %q", err, line)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	var s sample
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		labels, n, err := parseLabels(rest)
		if err != nil {
			return s, err
		}
		s.labels = labels
		rest = rest[n:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// parseLabels reads `{k="v",...}` at the start of s and returns the labels
// and how many bytes it consumed.
func parseLabels(s string) (map[string]string, int, error) {
	m := map[string]string{}
	i := 1 // past '{'
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated labels")
		}
		if s[i] == '}' {
			return m, i + 1, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return nil, 0, fmt.Errorf("bad label")
		}
		key := strings.TrimSpace(s[i : i+eq])
		i += eq + 2
		var b strings.Builder
		for ; i < len(s) && s[i] != '"'; i++ {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					c = '\n'
				default:
					c = s[i]
				}
			}
			b.WriteByte(c)
		}
		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated label value")
		}
		i++ // closing quote
		m[key] = b.String()
	}
}

// matches reports whether s carries every label of want.
func (s sample) matches(want map[string]string) bool {
	for k, v := range want {
		if s.labels[k] != v {
			return false
		}
	}
	return true
}

// sum adds the values of every series called name that carries the labels
// of want (nil: every series of that name).
func (m metricSnap) sum(name string, want map[string]string) float64 {
	var t float64
	for _, s := range m {
		if s.name == name && s.matches(want) {
			t += s.value
		}
	}
	return t
}

// bucket is one cumulative histogram bucket: count observations <= le.
type bucket struct {
	le    float64
	count float64
}

// buckets returns the cumulative buckets of histogram name, summed over
// every series that carries the labels of want, in ascending le (+Inf last).
func (m metricSnap) buckets(name string, want map[string]string) []bucket {
	byLE := map[float64]float64{}
	for _, s := range m {
		if s.name != name+"_bucket" || !s.matches(want) {
			continue
		}
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			continue
		}
		byLE[le] += s.value
	}
	out := make([]bucket, 0, len(byLE))
	for le, c := range byLE {
		out = append(out, bucket{le, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	return out
}

// histDelta is the histogram of the observations made between two scrapes:
// end minus start, bucket by bucket.
func histDelta(start, end metricSnap, name string, want map[string]string) []bucket {
	a := start.buckets(name, want)
	b := end.buckets(name, want)
	prev := map[float64]float64{}
	for _, x := range a {
		prev[x.le] = x.count
	}
	out := make([]bucket, len(b))
	for i, x := range b {
		out[i] = bucket{x.le, max(0, x.count-prev[x.le])}
	}
	return out
}

// histCount is the number of observations in cumulative buckets.
func histCount(bs []bucket) float64 {
	if len(bs) == 0 {
		return 0
	}
	return bs[len(bs)-1].count
}

// histQuantile estimates the q-quantile (0..1) of cumulative buckets the
// way PromQL's histogram_quantile does: find the bucket holding the rank
// and interpolate linearly inside it (the lowest bucket from 0). A rank in
// the +Inf bucket returns the highest finite bound. ok is false with no
// observations. The estimate is only as fine as the buckets: with the
// sync buckets (0.1, 0.25, 0.5, 1, 2.5, 5 ms, ...) a p50 of 0.7 ms means
// "between 0.5 and 1 ms".
func histQuantile(q float64, bs []bucket) (time.Duration, bool) {
	total := histCount(bs)
	if total <= 0 || len(bs) == 0 || !math.IsInf(bs[len(bs)-1].le, +1) {
		return 0, false
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range bs {
		if b.count >= rank && b.count > below {
			if math.IsInf(b.le, +1) {
				if i == 0 {
					return 0, false
				}
				return secs(bs[i-1].le), true
			}
			v := lower + (b.le-lower)*(rank-below)/(b.count-below)
			return secs(v), true
		}
		lower, below = b.le, b.count
	}
	return secs(lower), true
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
