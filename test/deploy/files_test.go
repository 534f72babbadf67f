package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/goccy/go-yaml"
)

// TestDeploy_EveryAlertHasUnitTests: promtool runs alerts_test.yml (make
// test); this checks that it covers every rule both ways, one case that
// must fire and one that must not, so a new alert cannot ship untested.
func TestDeploy_EveryAlertHasUnitTests(t *testing.T) {
	root := repoRoot(t)
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name  string `yaml:"name"`
			Cases []struct {
				Alert string `yaml:"alertname"`
				Exp   []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatal(err)
	}
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != "alerts.yml" {
		t.Fatalf("alerts_test.yml tests %v, want alerts.yml", tests.RuleFiles)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, c := range tc.Cases {
			if len(c.Exp) > 0 {
				fires[c.Alert] = true
			} else {
				silent[c.Alert] = true
			}
		}
	}
	alerts := alertExprs(t, filepath.Join(root, "deploy/prometheus/alerts.yml"))
	if len(alerts) == 0 {
		t.Fatal("no alerts in alerts.yml")
	}
	for _, a := range alerts {
		if !fires[a.where] {
			t.Errorf("%s: no unit test case where it fires", a.where)
		}
		if !silent[a.where] {
			t.Errorf("%s: no unit test case where it stays silent", a.where)
		}
	}
}

// TestDeploy_DashboardLayout: panel ids are unique and no two panels
// overlap on Grafana's 24-column grid (Grafana would move them).
func TestDeploy_DashboardLayout(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/grafana/ankusa.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			GridPos struct {
				H, W, X, Y int
			} `json:"gridPos"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard has uid %q and %d panels", d.UID, len(d.Panels))
	}
	ids := map[int]string{}
	for i, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%q: gridPos %+v is off the 24-column grid", p.Title, g)
		}
		for _, q := range d.Panels[:i] {
			h := q.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("%q %+v overlaps %q %+v", p.Title, g, q.Title, h)
			}
		}
	}
}
