package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// The targets of issue 14, measured side by side with the load generator
// out of process. They are reported with the range over the repetitions
// and how many repetitions met them; none changes the exit status
// (performance is measured, not gated, except by the issue-2 -gate).
const (
	T14CPURatio       = 2.0       // disk server CPU per 201 <= 2x null's
	T14AllocsPerReq   = 40        // allocations per 201
	T14ExtraBytes     = 4096      // bytes allocated per 201 <= body + 4 KiB
	T14LargeBody      = 256 << 10 // the large-body target's body size
	T14LargeBodyRatio = 0.5       // 256 KiB bodies: disk MB/s >= 0.5x null's
)

// repSet is one repetition's runs at one (clients, body) level.
type repSet struct {
	rep                                 int
	null, nullsha, nullsync, disk, dual *Result
}

type levelKey struct{ clients, body int }

// repSets groups rs by level (in first-seen order) and, inside a level, by
// repetition. Where a repetition holds several runs of a mode (-retention),
// the first is used.
func repSets(rs []Result) ([]levelKey, map[levelKey][]repSet) {
	var keys []levelKey
	sets := map[levelKey][]repSet{}
	for i := range rs {
		r := &rs[i]
		k := levelKey{r.Clients, r.BodyBytes}
		if _, ok := sets[k]; !ok {
			keys = append(keys, k)
		}
		ss := sets[k]
		j := slices.IndexFunc(ss, func(s repSet) bool { return s.rep == r.Rep })
		if j < 0 {
			ss = append(ss, repSet{rep: r.Rep})
			j = len(ss) - 1
		}
		s := &ss[j]
		switch {
		case r.Mode == ModeNull && s.null == nil:
			s.null = r
		case r.Mode == ModeNullSHA && s.nullsha == nil:
			s.nullsha = r
		case r.Mode == ModeNullSync && s.nullsync == nil:
			s.nullsync = r
		case r.Mode == ModeDisk && s.disk == nil:
			s.disk = r
		case r.Mode == ModeDual && s.dual == nil:
			s.dual = r
		}
		sets[k] = ss
	}
	return keys, sets
}

// span is the range of a figure over the repetitions that measured it.
type span struct {
	lo, hi float64
	n      int // repetitions measured
	met    int // of which met the figure's target (when it has one)
}

func (s *span) add(v float64, met bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if s.n == 0 || v < s.lo {
		s.lo = v
	}
	if s.n == 0 || v > s.hi {
		s.hi = v
	}
	s.n++
	if met {
		s.met++
	}
}

// format prints lo–hi with f, or "-" when nothing was measured.
func (s span) format(f func(float64) string) string {
	if s.n == 0 {
		return "-"
	}
	if f(s.lo) == f(s.hi) {
		return f(s.lo)
	}
	return f(s.lo) + "–" + f(s.hi)
}

func (s span) metNote() string {
	if s.n == 0 {
		return "not measured"
	}
	return fmt.Sprintf("met in %d/%d", s.met, s.n)
}

func fx(v float64) string  { return fmt.Sprintf("%.2fx", v) }
func fus(v float64) string { return fmt.Sprintf("%.1fus", v) }
func f0(v float64) string  { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string  { return fmt.Sprintf("%.1f", v) }
func fms(v float64) string { return fmtDur(time.Duration(v * float64(time.Millisecond))) }

// cpuPerReqUs is r's bench-process CPU per 201 in µs; NaN when unknown.
func cpuPerReqUs(r *Result) float64 {
	if c, ok := cpuPerReq(*r); ok {
		return c.Seconds() * 1e6
	}
	return math.NaN()
}

// PrintRanges writes, per level, every figure and ratio issue 14's targets
// name, as its range over the repetitions (each ratio taken between runs
// of the same repetition), with how many repetitions met each target.
func PrintRanges(w io.Writer, rs []Result) {
	keys, sets := repSets(rs)
	if len(keys) == 0 {
		return
	}
	client := rs[0].Client
	fmt.Fprintln(w)
	fmt.Fprintf(w, "issue 14 figures: ranges (min–max) over the interleaved repetitions; each ratio pairs runs of the same repetition; load generator: %s\n", client)
	if client == ClientInProcess {
		fmt.Fprintln(w, "  NOTE: -client inproc: cpu/201, allocs/201 and bytes/201 include the load generator; the targets are for the server alone")
	}
	for _, k := range keys {
		ss := sets[k]
		fmt.Fprintf(w, "C=%d B=%d (%d reps)\n", k.clients, k.body, len(ss))
		type modeSpans struct {
			rps, mbps, cpu, allocs, bytes, p50, p99 span
		}
		const iDisk, iDual = 3, 4
		var per [5]modeSpans // null, nullsha, nullsync, disk, dual
		var diskNull, diskNullCPU, dualDisk, dualNull, dualP50, dualBound span
		// disk against each reference (nullsha, nullsync): req/s, CPU
		var diskRef [2][2]span
		// disk's CPU against nullsync paying disk's fsyncs per hook
		var diskSyncMatched span
		var have [5]bool
		for _, s := range ss {
			for i, r := range []*Result{s.null, s.nullsha, s.nullsync, s.disk, s.dual} {
				if r == nil || r.OK == 0 {
					continue
				}
				have[i] = true
				m := &per[i]
				m.rps.add(r.ReqPerSec, false)
				m.mbps.add(r.ReqPerSec*float64(r.BodyBytes)/1e6, false)
				m.cpu.add(cpuPerReqUs(r), false)
				m.allocs.add(r.AllocsPerReq, r.AllocsPerReq <= T14AllocsPerReq)
				m.bytes.add(r.AllocBytesPerReq, r.AllocBytesPerReq <= float64(r.BodyBytes+T14ExtraBytes))
				m.p50.add(r.P50.Seconds()*1e3, false)
				m.p99.add(r.P99.Seconds()*1e3, false)
			}
			if s.null != nil && s.null.ReqPerSec > 0 {
				if s.disk != nil {
					x := s.disk.ReqPerSec / s.null.ReqPerSec
					need := TargetRatio
					if k.body == T14LargeBody {
						need = T14LargeBodyRatio
					}
					diskNull.add(x, x >= need)
					cd, cn := cpuPerReqUs(s.disk), cpuPerReqUs(s.null)
					diskNullCPU.add(cd/cn, cd/cn <= T14CPURatio)
				}
				if s.dual != nil {
					dualNull.add(s.dual.ReqPerSec/s.null.ReqPerSec, false)
				}
			}
			for i, ref := range []*Result{s.nullsha, s.nullsync} {
				if ref != nil && ref.ReqPerSec > 0 && s.disk != nil {
					diskRef[i][0].add(s.disk.ReqPerSec/ref.ReqPerSec, false)
					diskRef[i][1].add(cpuPerReqUs(s.disk)/cpuPerReqUs(ref), false)
				}
			}
			if s.nullsync != nil && s.disk != nil {
				if m, ok := fsyncMatchedCPU(s.nullsync, s.disk); ok {
					diskSyncMatched.add(cpuPerReqUs(s.disk)/(m.Seconds()*1e6), false)
				}
			}
			if s.dual != nil && s.disk != nil && s.disk.ReqPerSec > 0 {
				x := s.dual.ReqPerSec / s.disk.ReqPerSec
				dualDisk.add(x, x >= DualGoalRatio)
			}
			if s.dual != nil && s.dual.OK > 0 && s.dual.MetricsError == "" {
				b := DualBound(*s.dual, DualGoalSlack)
				dualP50.add(s.dual.P50.Seconds()*1e3, s.dual.P50 <= b)
				dualBound.add(b.Seconds()*1e3, false)
			}
		}
		names := []string{"null", "nullsha", "nullsync", "disk", "dual"}
		row := func(label string, get func(*modeSpans) span, f func(float64) string, target string) {
			var parts []string
			for i := range per {
				if have[i] {
					parts = append(parts, names[i]+" "+get(&per[i]).format(f))
				}
			}
			fmt.Fprintf(w, "  %-16s %s%s\n", label, strings.Join(parts, "  "), target)
		}
		row("req/s", func(m *modeSpans) span { return m.rps }, f0, "")
		if k.body >= 64<<10 {
			row("MB/s", func(m *modeSpans) span { return m.mbps }, f1, "")
		}
		row("p50", func(m *modeSpans) span { return m.p50 }, fms, "")
		row("p99", func(m *modeSpans) span { return m.p99 }, fms, "")
		row("server cpu/201", func(m *modeSpans) span { return m.cpu }, fus, "")
		// metOf says how many repetitions of each instance mode met a target.
		metOf := func(get func(*modeSpans) span) string {
			var parts []string
			for j := iDisk; j <= iDual; j++ {
				if have[j] {
					parts = append(parts, names[j]+" "+get(&per[j]).metNote())
				}
			}
			return strings.Join(parts, ", ")
		}
		row("allocs/201", func(m *modeSpans) span { return m.allocs }, f1,
			fmt.Sprintf("   [target <= %d: %s]", T14AllocsPerReq, metOf(func(m *modeSpans) span { return m.allocs })))
		row("bytes/201", func(m *modeSpans) span { return m.bytes }, f0,
			fmt.Sprintf("   [target <= body+4KiB = %d: %s]", k.body+T14ExtraBytes, metOf(func(m *modeSpans) span { return m.bytes })))
		if diskNull.n > 0 {
			t := ""
			switch {
			case k.body == T14LargeBody:
				t = fmt.Sprintf("   [target MB/s >= %.1fx null: %s]", T14LargeBodyRatio, diskNull.metNote())
			case k.clients == TargetRatioClients && k.body == TargetBodyBytes:
				t = fmt.Sprintf("   [target >= %.1fx at C=%d: %s]", TargetRatio, TargetRatioClients, diskNull.metNote())
			}
			fmt.Fprintf(w, "  %-16s %s%s\n", "disk/null req/s", diskNull.format(fx), t)
			fmt.Fprintf(w, "  %-16s %s   [target <= %.0fx: %s]\n", "disk/null cpu", diskNullCPU.format(fx), T14CPURatio, diskNullCPU.metNote())
		}
		for i, ref := range []struct{ name, floor string }{{"nullsha", "the contract's floor"}, {"nullsync", "a minimal durable handler"}} {
			if d := diskRef[i]; d[0].n > 0 {
				fmt.Fprintf(w, "  %-16s %s   [reference: %s; no target]\n", "disk/"+ref.name+" req/s", d[0].format(fx), ref.floor)
				fmt.Fprintf(w, "  %-16s %s   [reference: %s; no target]\n", "disk/"+ref.name+" cpu", d[1].format(fx), ref.floor)
			}
			if i == 1 && diskSyncMatched.n > 0 {
				fmt.Fprintf(w, "  %-16s %s   [nullsync paying disk's fsyncs per hook at their calibrated CPU; no target]\n", "disk/nullsync cpu, fsync-matched", diskSyncMatched.format(fx))
			}
		}
		if dualNull.n > 0 {
			fmt.Fprintf(w, "  %-16s %s\n", "dual/null req/s", dualNull.format(fx))
		}
		if dualDisk.n > 0 {
			t := ""
			if k.clients == DualGoalClients && k.body == TargetBodyBytes {
				t = fmt.Sprintf("   [target >= %.1fx at C=%d: %s]", DualGoalRatio, DualGoalClients, dualDisk.metNote())
			}
			fmt.Fprintf(w, "  %-16s %s%s\n", "dual/disk req/s", dualDisk.format(fx), t)
		}
		if dualP50.n > 0 {
			t := ""
			if k.clients == DualLatencyClients && k.body == TargetBodyBytes {
				t = fmt.Sprintf("   [target at C=%d: %s]", DualLatencyClients, dualP50.metNote())
			}
			fmt.Fprintf(w, "  %-16s %s vs max(fsync p50, confirm) + 2ms = %s%s\n", "dual p50", dualP50.format(fms), dualBound.format(fms), t)
		}
		if have[iDual] && k.clients == DualGoalClients && k.body == TargetBodyBytes {
			var thr span
			for _, s := range ss {
				if s.dual != nil && s.dual.OK > 0 {
					thr.add(s.dual.ReqPerSec, s.dual.ReqPerSec >= DualGoalReqPerSec)
				}
			}
			fmt.Fprintf(w, "  %-16s %s   [target >= %d: %s]\n", "dual req/s", thr.format(f0), DualGoalReqPerSec, thr.metNote())
		}
	}
}
