package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather returns the family called name.
func gather(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("series %s not gathered", name)
	return nil
}

// counterVec maps the label values of each series, joined by "/" in
// label-name order (as the registry sorts them), to its value.
func counterVec(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range gather(t, reg, name).GetMetric() {
		vals := make([]string, 0, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			vals = append(vals, l.GetValue())
		}
		out[strings.Join(vals, "/")] = m.GetCounter().GetValue()
	}
	return out
}

// counterValue returns the value of the unlabelled counter called name.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mf := gather(t, reg, name)
	if len(mf.GetMetric()) != 1 {
		t.Fatalf("%s has %d series, want 1", name, len(mf.GetMetric()))
	}
	return mf.GetMetric()[0].GetCounter().GetValue()
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	return gather(t, reg, name).GetMetric()[0].GetHistogram().GetSampleCount()
}

func histogramSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return gather(t, reg, name).GetMetric()[0].GetHistogram().GetSampleSum()
}
