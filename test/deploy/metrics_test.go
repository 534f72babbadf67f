package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/app/apptest"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

// repoRoot is the module root: test/deploy is two levels down.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestDeploy_DashboardAndAlertsUseExportedSeries starts a node in-process
// with every optional family on (wal.type dual on the memory log, backups,
// one delivery done), scrapes its /metrics, and checks that every metric
// name in deploy/grafana/ankusa.json and deploy/prometheus/alerts.yml is
// one of the exported series (a histogram's _bucket, _sum and _count
// included).
func TestDeploy_DashboardAndAlertsUseExportedSeries(t *testing.T) {
	exported := scrapeSeries(t, startFullNode(t))

	used := map[string][]string{} // metric -> where
	root := repoRoot(t)
	for _, e := range dashboardExprs(t, filepath.Join(root, "deploy/grafana/ankusa.json")) {
		for _, m := range metricNames(e.expr) {
			used[m] = append(used[m], "dashboard: "+e.where)
		}
	}
	for _, e := range alertExprs(t, filepath.Join(root, "deploy/prometheus/alerts.yml")) {
		for _, m := range metricNames(e.expr) {
			used[m] = append(used[m], "alerts: "+e.where)
		}
	}
	if len(used) < 20 {
		t.Fatalf("found only %d metric names in the dashboard and alerts; the expression scan is broken: %v", len(used), used)
	}
	names := make([]string, 0, len(used))
	for m := range used {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		if !exported[m] {
			t.Errorf("%s is not exported by the binary; used by %v", m, used[m])
		}
	}
}

// startFullNode runs a node whose /metrics carries every family: dual on
// the memory intake log (the ankusa_intake_* series), backups on (the
// ankusa_backup_* series), and one hook delivered (the series labelled by
// source and sink appear once used).
func startFullNode(t *testing.T) string {
	t.Helper()
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(sink.Close)
	dir := t.TempDir()
	text := fmt.Sprintf(`
node: {instance: deploy-test, data_dir: %q}
http: {ip: 127.0.0.1, port: 0}
admin: {ip: 127.0.0.1, port: 0}
wal: {type: dual}
intake:
  type: memory
  node_id: deploy-test
  memory: {path: %q}
backup:
  enabled: true
  interval_ms: 3600000
  primary: "file://%s"
  signing_key: "0123456789abcdef-deploy-test"
sources:
  orders:
    verify: {type: none}
    sinks:
      - id: worker
        type: http
        http: {url: %q}
`, filepath.Join(dir, "data"), filepath.Join(dir, "intake"), filepath.Join(dir, "backups"), sink.URL+"/hooks")
	cfg, err := config.LoadBytes([]byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	in := apptest.Start(t, cfg, app.Options{})
	resp, err := http.Post("http://"+in.IngestAddr()+"/webhooks/orders", "application/json", strings.NewReader(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST = %d, want 201", resp.StatusCode)
	}
	metricsURL := "http://" + in.AdminAddr() + "/metrics"
	testutil.Eventually(t, 10*time.Second, "the delivery is counted", func() bool {
		return scrapeSeries(t, metricsURL)["ankusa_dispatch_deliveries_total"]
	})
	return metricsURL
}

// scrapeSeries returns every sample name /metrics can carry: each family
// from its "# TYPE" line, a histogram's or summary's with its suffixes.
func scrapeSeries(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d", url, resp.StatusCode)
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		name, typ := f[2], f[3]
		out[name] = true
		switch typ {
		case "histogram":
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case "summary":
			out[name+"_sum"], out[name+"_count"] = true, true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type expr struct{ where, expr string }

// dashboardExprs returns every panel target's expression and the
// templating queries.
func dashboardExprs(t *testing.T, path string) []expr {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []expr
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, expr{p.Title, tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				out = append(out, expr{"variable " + v.Name, s})
			}
		}
	}
	return out
}

func alertExprs(t *testing.T, path string) []expr {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []expr
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, expr{r.Alert, r.Expr})
		}
	}
	return out
}

var (
	// Removed before looking for names: string literals, label matchers
	// {…}, range and subquery brackets […], and the label lists of by,
	// without, on, ignoring, group_left and group_right.
	promStrings = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promBraces  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promLabels  = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promWords   = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true,
	}
)

// metricNames returns the metric names a PromQL expression (or Grafana's
// label_values(metric, label)) selects: identifiers that are not a
// function (followed by "("), a keyword, a label or a number's unit.
func metricNames(e string) []string {
	e = promStrings.ReplaceAllString(e, " ")
	e = promBraces.ReplaceAllString(e, " ")
	e = promLabels.ReplaceAllString(e, " ")
	// label_values(metric, label): drop the label argument.
	e = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_]+\s*\)`).ReplaceAllString(e, "label_values($1)")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		w := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.' || e[loc[0]-1] == '$') {
			continue // 5m, 1e3, $__rate_interval
		}
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promWords[strings.ToLower(w)] {
			continue
		}
		out = append(out, w)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{`sum by (outcome) (rate(a_total{instance=~"$instance"}[$__rate_interval]))`, "a_total"},
		{`histogram_quantile(0.99, sum by (le) (rate(b_bucket{x="y"}[5m])))`, "b_bucket"},
		{"x > 0", "x"},
		{"c == 0 and on (instance, job) (time() - d) > 3600", "c d"},
		{"e > 3 * 1e3", "e"},
		{`f{a="sum(g)"} or h offset 5m`, "f h"},
		{"label_values(i, instance)", "i"},
	} {
		if got := strings.Join(metricNames(tc.in), " "); got != tc.want {
			t.Errorf("metricNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
