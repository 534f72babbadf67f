package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The targets of the issue: disk mode keeps at least TargetRatio of the null
// handler's throughput at TargetRatioClients, and its p99 stays under
// TargetP99 at TargetP99Clients, both at TargetBodyBytes.
const (
	TargetRatio        = 0.6
	TargetRatioClients = 512
	TargetP99          = 50 * time.Millisecond
	TargetP99Clients   = 64
	TargetBodyBytes    = 1024
)

// NoisyOtherCPU is the host CPU (in cores) not billed to the bench process
// above which a run is flagged as disturbed. The kernel's loopback network
// work is partly billed outside the process, so a quiet host shows up to
// about 0.1.
const NoisyOtherCPU = 0.2

// TargetLine echoes the targets as the issue states them.
const TargetLine = "target: disk >= 0.6x null at C=512,B=1KiB; p99 < 50 ms at C=64"

// The dual-commit check and goals of its issue. At DualLatencyClients the
// dual p50 must not exceed max(fsync p50, confirm) + DualLatencySlack: the
// command fails whenever that level is measured in dual mode. The rest are
// goals, reported but never enforced.
const (
	DualLatencyClients = 64
	DualLatencySlack   = 5 * time.Millisecond
	DualGoalSlack      = 2 * time.Millisecond
	DualGoalRatio      = 0.8
	DualGoalClients    = 512
	DualGoalReqPerSec  = 10_000
)

// DualLine echoes the dual check and goals.
const DualLine = "dual: p50 <= max(fsync p50, confirm) + 5 ms at C=64 (enforced whenever dual runs at C=64); " +
	"goals: dual >= 0.8x disk at C=512, dual >= 10000 req/s at 1 KiB, p50 <= max(fsync p50, confirm) + 2 ms at C=64"

// Kind says what a check's outcome does to the command.
type Kind int

const (
	// KindTarget fails the command only under -gate (a miss, or not measured).
	KindTarget Kind = iota
	// KindEnforced fails the command whenever it was measured and missed;
	// under -gate also when not measured.
	KindEnforced
	// KindGoal is informational: it never fails the command.
	KindGoal
)

// Check is one target's outcome.
type Check struct {
	Name     string
	Kind     Kind
	Measured bool // false when the run did not include the needed level
	Pass     bool
	Detail   string
}

// Verdict is the outcome of every target.
type Verdict struct {
	Checks []Check
}

// Pass reports whether every target and enforced check was measured and
// met (goals do not count).
func (v Verdict) Pass() bool {
	n := 0
	for _, c := range v.Checks {
		if c.Kind == KindGoal {
			continue
		}
		n++
		if !c.Measured || !c.Pass {
			return false
		}
	}
	return n > 0
}

// Measured reports whether every target's level was run (goals do not
// count).
func (v Verdict) Measured() bool {
	for _, c := range v.Checks {
		if c.Kind != KindGoal && !c.Measured {
			return false
		}
	}
	return true
}

// Failed reports whether an enforced check was measured and missed: the
// command exits non-zero then, -gate or not.
func (v Verdict) Failed() bool {
	for _, c := range v.Checks {
		if c.Kind == KindEnforced && c.Measured && !c.Pass {
			return true
		}
	}
	return false
}

// find returns the result for (mode, clients) at the target body size.
func find(rs []Result, mode Mode, clients int) (Result, bool) {
	for _, r := range rs {
		if r.Mode == mode && r.Clients == clients && r.BodyBytes == TargetBodyBytes {
			return r, true
		}
	}
	return Result{}, false
}

// Ratio is disk req/s over null req/s at one level; ok is false when either
// is missing or the null run had no throughput.
func Ratio(rs []Result, clients, bodyBytes int) (float64, bool) {
	return ModeRatio(rs, ModeDisk, ModeNull, clients, bodyBytes)
}

// ModeRatio is num's req/s over den's at one level; ok is false when either
// is missing or den had no throughput.
func ModeRatio(rs []Result, num, den Mode, clients, bodyBytes int) (float64, bool) {
	var a, b *Result
	for i := range rs {
		r := &rs[i]
		if r.Clients != clients || r.BodyBytes != bodyBytes {
			continue
		}
		switch r.Mode {
		case num:
			a = r
		case den:
			b = r
		}
	}
	if a == nil || b == nil || b.ReqPerSec <= 0 {
		return 0, false
	}
	return a.ReqPerSec / b.ReqPerSec, true
}

// cpuPerReq is the process CPU per 201 of r; ok is false when unknown.
func cpuPerReq(r Result) (time.Duration, bool) {
	if r.CPU < 0 || r.OK == 0 {
		return 0, false
	}
	return time.Duration(r.CPU * r.Window.Seconds() / float64(r.OK) * float64(time.Second)), true
}

// cpuRatio is den's CPU per 201 over num's, formatted as a note: what the
// req/s ratio would be if both runs were bound by the same CPU. It is
// steadier than the req/s ratio on a shared host, where another process
// takes a different share of the CPU in each run; it assumes both runs are
// CPU-bound, which a run waiting on a log's confirm is not.
func cpuRatio(rs []Result, num, den Mode, clients, bodyBytes int) string {
	var a, b *Result
	for i := range rs {
		r := &rs[i]
		if r.Clients == clients && r.BodyBytes == bodyBytes {
			switch r.Mode {
			case num:
				a = r
			case den:
				b = r
			}
		}
	}
	if a == nil || b == nil {
		return ""
	}
	ca, ok1 := cpuPerReq(*a)
	cb, ok2 := cpuPerReq(*b)
	if !ok1 || !ok2 || ca <= 0 {
		return ""
	}
	return fmt.Sprintf(" (cpu/req %s %.0fus vs %s %.0fus: %.2fx if both CPU-bound)", num, ca.Seconds()*1e6, den, cb.Seconds()*1e6, float64(cb)/float64(ca))
}

// DualBound is max(fsync p50, confirm) + slack for a dual result.
func DualBound(r Result, slack time.Duration) time.Duration {
	return max(r.FsyncP50, r.Confirm) + slack
}

// rolesNote names non-default roles, e.g. " (roles=ingest)".
func rolesNote(r Result) string {
	if len(r.Roles) == 0 || hasDispatch(r.Roles) {
		return ""
	}
	return " (roles=" + strings.Join(r.Roles, ",") + ")"
}

// Evaluate checks the results against the targets. A target whose level or
// body size was not run is reported as not measured, never as a pass.
// With several repetitions every repetition is checked on its own runs and
// a check passes (or counts as measured) only if it does in every one.
func Evaluate(rs []Result) Verdict {
	groups := byRep(rs)
	if len(groups) <= 1 {
		return evaluateOne(rs)
	}
	var v Verdict
	for i, g := range groups {
		vi := evaluateOne(g)
		if i == 0 {
			v = vi
			for j := range v.Checks {
				if v.Checks[j].Measured {
					v.Checks[j].Detail = fmt.Sprintf("rep %d: %s", g[0].Rep, v.Checks[j].Detail)
				}
			}
			continue
		}
		for j := range v.Checks {
			if j >= len(vi.Checks) || vi.Checks[j].Name != v.Checks[j].Name {
				v.Checks[j].Measured = false
				continue
			}
			c, d := &v.Checks[j], vi.Checks[j]
			// A level that no repetition ran is said once, not per repetition.
			if c.Measured || d.Measured {
				c.Detail += fmt.Sprintf("; rep %d: %s", g[0].Rep, d.Detail)
			}
			c.Measured = c.Measured && d.Measured
			c.Pass = c.Pass && d.Pass
		}
	}
	return v
}

// byRep splits rs by repetition, in order of first appearance.
func byRep(rs []Result) [][]Result {
	var out [][]Result
	idx := map[int]int{}
	for _, r := range rs {
		i, ok := idx[r.Rep]
		if !ok {
			i = len(out)
			idx[r.Rep] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], r)
	}
	return out
}

// evaluateOne checks one repetition's results.
func evaluateOne(rs []Result) Verdict {
	var v Verdict

	thr := Check{Name: fmt.Sprintf("throughput C=%d B=%d", TargetRatioClients, TargetBodyBytes)}
	if ratio, ok := Ratio(rs, TargetRatioClients, TargetBodyBytes); ok {
		d, _ := find(rs, ModeDisk, TargetRatioClients)
		n, _ := find(rs, ModeNull, TargetRatioClients)
		thr.Measured = true
		thr.Pass = ratio >= TargetRatio && d.Errors == 0
		thr.Detail = fmt.Sprintf("disk/null = %.0f/%.0f req/s = %.2fx (need >= %.2fx)%s", d.ReqPerSec, n.ReqPerSec, ratio, TargetRatio, rolesNote(d))
		if d.Errors != 0 {
			thr.Detail += fmt.Sprintf(", disk errors=%d", d.Errors)
		}
	} else {
		thr.Detail = fmt.Sprintf("not measured (run -mode including disk with -c including %d and -b %d)", TargetRatioClients, TargetBodyBytes)
	}
	v.Checks = append(v.Checks, thr)

	lat := Check{Name: fmt.Sprintf("latency C=%d B=%d", TargetP99Clients, TargetBodyBytes)}
	if d, ok := find(rs, ModeDisk, TargetP99Clients); ok && d.OK > 0 {
		lat.Measured = true
		lat.Pass = d.P99 < TargetP99 && d.Errors == 0
		lat.Detail = fmt.Sprintf("disk p99 = %s (need < %s)%s", fmtDur(d.P99), fmtDur(TargetP99), rolesNote(d))
		if d.Errors != 0 {
			lat.Detail += fmt.Sprintf(", disk errors=%d", d.Errors)
		}
	} else {
		lat.Detail = fmt.Sprintf("not measured (run -mode including disk with -c including %d and -b %d)", TargetP99Clients, TargetBodyBytes)
	}
	v.Checks = append(v.Checks, lat)

	if slices.ContainsFunc(rs, func(r Result) bool { return r.Mode == ModeDual }) {
		v.Checks = append(v.Checks, evaluateDual(rs)...)
	}
	return v
}

// evaluateDual checks the dual results: the enforced latency bound at
// C=64 and the informational goals.
func evaluateDual(rs []Result) []Check {
	var out []Check
	d64, have64 := find(rs, ModeDual, DualLatencyClients)
	have64 = have64 && d64.OK > 0

	lat := Check{Name: fmt.Sprintf("dual latency C=%d B=%d", DualLatencyClients, TargetBodyBytes), Kind: KindEnforced}
	if have64 {
		lat.Measured = true
		bound := DualBound(d64, DualLatencySlack)
		lat.Pass = d64.P50 <= bound && d64.Errors == 0 && d64.MetricsError == ""
		lat.Detail = fmt.Sprintf("dual p50 = %s, bound max(fsync p50 ~%s, confirm %s) + %s = %s",
			fmtDur(d64.P50), fmtDur(d64.FsyncP50), fmtDur(d64.Confirm), fmtDur(DualLatencySlack), fmtDur(bound))
		if d64.MetricsError != "" {
			lat.Detail += ", fsync p50 unknown: " + d64.MetricsError
		}
		if d64.Errors != 0 {
			lat.Detail += fmt.Sprintf(", dual errors=%d", d64.Errors)
		}
	} else {
		lat.Detail = fmt.Sprintf("not measured (run with -c including %d and -b %d)", DualLatencyClients, TargetBodyBytes)
	}
	out = append(out, lat)

	ratio := Check{Name: fmt.Sprintf("dual/disk C=%d B=%d", DualGoalClients, TargetBodyBytes), Kind: KindGoal}
	if x, ok := ModeRatio(rs, ModeDual, ModeDisk, DualGoalClients, TargetBodyBytes); ok {
		d, _ := find(rs, ModeDual, DualGoalClients)
		k, _ := find(rs, ModeDisk, DualGoalClients)
		ratio.Measured = true
		ratio.Pass = x >= DualGoalRatio && d.Errors == 0
		ratio.Detail = fmt.Sprintf("dual/disk = %.0f/%.0f req/s = %.2fx (goal >= %.1fx)%s", d.ReqPerSec, k.ReqPerSec, x, DualGoalRatio, rolesNote(k))
	} else {
		ratio.Detail = fmt.Sprintf("not measured (run -mode disk,dual with -c including %d and -b %d)", DualGoalClients, TargetBodyBytes)
	}
	out = append(out, ratio)

	thr := Check{Name: fmt.Sprintf("dual req/s B=%d", TargetBodyBytes), Kind: KindGoal}
	var best *Result
	for i := range rs {
		r := &rs[i]
		if r.Mode == ModeDual && r.BodyBytes == TargetBodyBytes && (best == nil || r.ReqPerSec > best.ReqPerSec) {
			best = r
		}
	}
	if best != nil {
		thr.Measured = true
		thr.Pass = best.ReqPerSec >= DualGoalReqPerSec && best.Errors == 0
		thr.Detail = fmt.Sprintf("best dual = %.0f req/s at C=%d (goal >= %d)", best.ReqPerSec, best.Clients, DualGoalReqPerSec)
	} else {
		thr.Detail = fmt.Sprintf("not measured (run with -b %d)", TargetBodyBytes)
	}
	out = append(out, thr)

	tight := Check{Name: fmt.Sprintf("dual p50 C=%d B=%d", DualLatencyClients, TargetBodyBytes), Kind: KindGoal}
	if have64 && d64.MetricsError == "" {
		bound := DualBound(d64, DualGoalSlack)
		tight.Measured = true
		tight.Pass = d64.P50 <= bound && d64.Errors == 0
		tight.Detail = fmt.Sprintf("dual p50 = %s (goal <= max(fsync p50, confirm) + %s = %s)", fmtDur(d64.P50), fmtDur(DualGoalSlack), fmtDur(bound))
	} else {
		tight.Detail = fmt.Sprintf("not measured (run with -c including %d and -b %d)", DualLatencyClients, TargetBodyBytes)
	}
	out = append(out, tight)
	return out
}

// fsyncCPUNote is a calibrated run's group size and what one fdatasync of
// it costs this host ("~": measured beside the run, not in it).
func fsyncCPUNote(r Result) string {
	if r.FsyncCPU <= 0 {
		return ""
	}
	return fmt.Sprintf("  group_bytes=%.0f fsync_cpu~%.1fus", r.GroupBytes, r.FsyncCPU.Seconds()*1e6)
}

// FormatResult is the one-line form of a result, e.g.
//
//	disk  C=512 B=1024  req/s=12345  p50=3.1ms  p99=12.4ms  fsyncs/s=400  mean_group=30.8  fsync_p50~0.42ms  delivered/s=12300  errors=0  cpu=1.55 other_cpu=0.02 cpu/req=107us
//	dual  C=64 B=1024  req/s=...  fsyncs/s=...  mean_group=...  fsync_p50~...  recs/publish=12.3 publish_p50~6.1ms confirm=5ms  delivered/s=...  errors=0 ...
//
// cpu is the cores this process used during the window, other_cpu the host
// CPU used by anything else (a disturbed run), cpu/req the process CPU per
// 201 (load generator included, so comparable only between modes). A "~"
// marks an estimate from histogram buckets.
func FormatResult(r Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-4s  C=%d B=%d", r.Mode, r.Clients, r.BodyBytes)
	if r.Rep > 0 {
		fmt.Fprintf(&b, " rep=%d", r.Rep)
	}
	if note := rolesNote(r); note != "" {
		fmt.Fprintf(&b, " roles=%s", strings.Join(r.Roles, ","))
	}
	if r.Retention != "" {
		fmt.Fprintf(&b, " retention=%s", r.Retention)
	}
	fmt.Fprintf(&b, "  req/s=%.0f  p50=%s  p99=%s", r.ReqPerSec, fmtDur(r.P50), fmtDur(r.P99))
	if r.Mode == ModeNullSync || !isReference(r.Mode) {
		fmt.Fprintf(&b, "  fsyncs/s=%.0f  mean_group=%.1f", r.FsyncsPerSec, r.MeanGroup)
		b.WriteString(fsyncCPUNote(r))
	}
	if !isReference(r.Mode) {
		if r.MetricsError == "" {
			fmt.Fprintf(&b, "  fsync_p50~%s", fmtDur(r.FsyncP50))
		}
		if r.Mode == ModeDual {
			if r.MetricsError == "" {
				fmt.Fprintf(&b, "  recs/publish=%.1f publish_p50~%s", r.RecsPerPublish, fmtDur(r.PublishP50))
				if r.PublishFailures > 0 {
					fmt.Fprintf(&b, " publish_failures=%d", r.PublishFailures)
				}
			}
			fmt.Fprintf(&b, " confirm=%s", fmtDur(r.Confirm))
		}
		if r.MetricsError == "" && hasDispatch(r.Roles) {
			fmt.Fprintf(&b, "  delivered/s=%.0f", r.DeliveredPerSec)
		}
	}
	fmt.Fprintf(&b, "  errors=%d", r.Errors)
	if r.CPU >= 0 {
		fmt.Fprintf(&b, "  cpu=%.2f", r.CPU)
		if r.ClientCPU >= 0 {
			fmt.Fprintf(&b, " client_cpu=%.2f", r.ClientCPU)
		}
		fmt.Fprintf(&b, " other_cpu=%.2f", r.OtherCPU)
		if r.OK > 0 {
			fmt.Fprintf(&b, " cpu/req=%.1fus", r.CPU*r.Window.Seconds()/float64(r.OK)*1e6)
		}
		if r.GCCPU >= 0 {
			fmt.Fprintf(&b, " gc_cpu=%.2f", r.GCCPU)
		}
	}
	if r.OK > 0 {
		fmt.Fprintf(&b, "  allocs/req=%.1f bytes/req=%.0f", r.AllocsPerReq, r.AllocBytesPerReq)
		if r.FaultsPerReq >= 0 {
			fmt.Fprintf(&b, " faults/req=%.3f", r.FaultsPerReq)
		}
	}
	if !isReference(r.Mode) {
		if r.Warm {
			fmt.Fprintf(&b, "  primed=%s", r.Primed.Round(100*time.Millisecond))
		} else {
			fmt.Fprintf(&b, "  cold (primed %s, not warm)", r.Primed.Round(100*time.Millisecond))
		}
	}
	if r.Errors > 0 {
		var parts []string
		for _, code := range sortedCodes(r.Statuses) {
			parts = append(parts, fmt.Sprintf("%d=%d", code, r.Statuses[code]))
		}
		if r.TransportErrors > 0 {
			parts = append(parts, fmt.Sprintf("transport=%d", r.TransportErrors))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, " "))
		if r.FirstError != "" {
			fmt.Fprintf(&b, " first: %s", r.FirstError)
		}
	}
	if r.MetricsError != "" {
		fmt.Fprintf(&b, "  (no /metrics figures: %s)", r.MetricsError)
	}
	return b.String()
}

// PrintResults writes one line per result.
func PrintResults(w io.Writer, rs []Result) {
	for _, r := range rs {
		fmt.Fprintln(w, FormatResult(r))
	}
}

// PrintSummary writes the disk/null ratio of every level, the p99 at the
// target level (with one repetition), issue 14's figures as ranges over
// the repetitions, and the targets with PASS/MISS. It returns the verdict.
func PrintSummary(w io.Writer, rs []Result) Verdict {
	if len(byRep(rs)) <= 1 {
		printRatios(w, rs)
	}
	PrintRanges(w, rs)
	return printVerdict(w, rs)
}

// printRatios writes the ratio lines of one repetition's results.
func printRatios(w io.Writer, rs []Result) {
	fmt.Fprintln(w)
	seen := map[[2]int]bool{}
	for _, r := range rs {
		k := [2]int{r.Clients, r.BodyBytes}
		if seen[k] {
			continue
		}
		seen[k] = true
		suffix := ""
		if r.BodyBytes != TargetBodyBytes {
			suffix = fmt.Sprintf(" B=%d", r.BodyBytes)
		}
		if ratio, ok := Ratio(rs, r.Clients, r.BodyBytes); ok {
			note := ""
			if d, ok := find(rs, ModeDisk, r.Clients); ok {
				note = rolesNote(d)
			}
			fmt.Fprintf(w, "ratio disk/null C=%d%s: %.2fx%s%s\n", r.Clients, suffix, ratio, note, cpuRatio(rs, ModeDisk, ModeNull, r.Clients, r.BodyBytes))
		}
		if ratio, ok := ModeRatio(rs, ModeDual, ModeDisk, r.Clients, r.BodyBytes); ok {
			fmt.Fprintf(w, "ratio dual/disk C=%d%s: %.2fx%s", r.Clients, suffix, ratio, cpuRatio(rs, ModeDual, ModeDisk, r.Clients, r.BodyBytes))
			if rn, ok := ModeRatio(rs, ModeDual, ModeNull, r.Clients, r.BodyBytes); ok {
				fmt.Fprintf(w, " (dual/null %.2fx)", rn)
			}
			fmt.Fprintln(w)
		} else if rn, ok := ModeRatio(rs, ModeDual, ModeNull, r.Clients, r.BodyBytes); ok {
			fmt.Fprintf(w, "ratio dual/null C=%d%s: %.2fx\n", r.Clients, suffix, rn)
		}
	}
	if d, ok := find(rs, ModeDisk, TargetP99Clients); ok {
		fmt.Fprintf(w, "p99 disk C=%d: %s (p50 %s, max %s)\n", TargetP99Clients, fmtDur(d.P99), fmtDur(d.P50), fmtDur(d.Max))
	}
	if d, ok := find(rs, ModeDual, DualLatencyClients); ok {
		fmt.Fprintf(w, "p50 dual C=%d: %s (p99 %s, max %s; fsync p50 ~%s, publish p50 ~%s, confirm %s)\n", DualLatencyClients,
			fmtDur(d.P50), fmtDur(d.P99), fmtDur(d.Max), fmtDur(d.FsyncP50), fmtDur(d.PublishP50), fmtDur(d.Confirm))
	}
}

// printVerdict writes the disturbed-run warning and the targets.
func printVerdict(w io.Writer, rs []Result) Verdict {
	fmt.Fprintln(w)
	var noisy []string
	for _, r := range rs {
		if r.OtherCPU > NoisyOtherCPU {
			noisy = append(noisy, fmt.Sprintf("%s C=%d rep %d (other_cpu=%.2f)", r.Mode, r.Clients, r.Rep, r.OtherCPU))
		}
	}
	if len(noisy) > 0 {
		fmt.Fprintf(w, "WARNING: other work on the host took CPU during %s; those figures are disturbed, run again on a quiet host\n", strings.Join(noisy, ", "))
	}
	var cold []string
	for _, r := range rs {
		if !r.Warm {
			cold = append(cold, fmt.Sprintf("%s C=%d rep %d", r.Mode, r.Clients, r.Rep))
		}
	}
	if len(cold) > 0 {
		fmt.Fprintf(w, "WARNING: the store was not warm when %s began (-prime too short, or negative): those figures include its memtables' first-touch page faults (faults/req)\n", strings.Join(cold, ", "))
	}
	v := Evaluate(rs)
	fmt.Fprintln(w, TargetLine)
	dualShown := false
	for _, c := range v.Checks {
		if c.Kind != KindTarget && !dualShown {
			fmt.Fprintln(w, DualLine)
			dualShown = true
		}
		mark := "MISS"
		switch {
		case !c.Measured:
			mark = "N/A "
		case c.Pass:
			mark = "PASS"
		case c.Kind == KindEnforced:
			mark = "FAIL"
		}
		name := c.Name
		switch c.Kind {
		case KindEnforced:
			name += " (enforced)"
		case KindGoal:
			name = "goal " + name
		}
		fmt.Fprintf(w, "  %s  %s: %s\n", mark, name, c.Detail)
	}
	overall := "MISS"
	switch {
	case v.Pass():
		overall = "PASS"
	case v.Failed():
		overall = "FAIL (an enforced check was missed: the command exits 1)"
	case !v.Measured():
		overall = "MISS (not every target was measured)"
	}
	fmt.Fprintf(w, "overall: %s (goals are informational)\n", overall)
	return v
}

func printHeader(w io.Writer, o *Options, root string) {
	order := []string{string(ModeNull)}
	for _, m := range o.Refs {
		order = append(order, string(m))
	}
	for _, m := range o.Modes {
		order = append(order, string(m))
	}
	fmt.Fprintf(w, "ankusa bench: closed loop, %s warmup + %s window per run; order per C: %s\n", o.Warmup, o.Duration, strings.Join(order, ", "))
	gen := "load generator in a child process (`ankusa bench client`): cpu, allocs/req and bytes/req are the server's alone"
	if o.Client == ClientInProcess {
		gen = "load generator IN-PROCESS (-client inproc): cpu, allocs/req and bytes/req include the client side"
	}
	fmt.Fprintf(w, "%s %s/%s  NumCPU=%d GOMAXPROCS=%d  %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), gen)
	if o.Reps > 1 {
		fmt.Fprintf(w, "%d repetitions, interleaved (rep 1: every level and mode, then rep 2, ...)\n", o.Reps)
	}
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(w, "load average at start: %s\n", strings.Join(strings.Fields(string(l))[:3], " "))
	}
	fs := dataDirFS(root)
	fmt.Fprintf(w, "data dir: %s (%s), a fresh store per run, default config (demo source, log sink)\n", absOr(root), fs)
	if len(o.Modes) > 0 {
		if o.Prime >= 0 {
			fmt.Fprintf(w, "each instance's store is primed (about %s at most, outside every figure) until warm: its memtables at full size, so the window is the steady state, not the page faults of a fresh store's first ~200 MiB\n", o.Prime)
		} else {
			fmt.Fprintln(w, "no priming (-prime 0): each instance's window starts on a cold store, page faults of its memtables' growth included")
		}
	}
	if slices.Contains(o.Refs, ModeNullSHA) {
		fmt.Fprintln(w, "nullsha: the null handler that also computes the body's SHA-256, as every stored hook's envelope must: the floor the contract sets under any design (a reference; issue 14's targets stay against null)")
	}
	if slices.Contains(o.Refs, ModeNullSync) {
		fmt.Fprintln(w, "nullsync: nullsha that answers only once the body is fdatasync'd in a group-committed log beside the stores: a minimal durable handler (a reference, not a floor: its naive group commit syncs more often than Ankusa's, so its fsyncs and disk's are priced after each run, fsync_cpu~, and the summary adds disk against it charged disk's fsyncs; nothing indexed, delivered or removed)")
	}
	if slices.Contains(o.Modes, ModeDisk) {
		fmt.Fprintf(w, "disk: wal.type=disk, node.roles=%s", strings.Join(o.Roles, ","))
		if !hasDispatch(o.Roles) {
			fmt.Fprint(w, " (no dispatcher: hooks stay in the store)")
		}
		fmt.Fprintln(w)
	}
	if slices.Contains(o.Modes, ModeDual) {
		fmt.Fprintf(w, "dual: wal.type=dual, intake.type=memory (TEST ONLY: %s), confirm latency %d ms, node.roles=%s\n",
			intakeWhere(intakeRoot(o.IntakeDir)), o.ConfirmMs, strings.Join(DefaultRoles, ","))
	}
	if fs == "tmpfs" || fs == "ramfs" {
		fmt.Fprintln(w, "WARNING: the data dir is in memory; fsync costs nothing there and disk figures are meaningless. Use -dir on a real disk.")
	}
}

// fmtDur prints a latency in milliseconds with a useful precision.
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0fms", ms)
	case ms >= 1:
		return fmt.Sprintf("%.1fms", ms)
	default:
		return fmt.Sprintf("%.2fms", ms)
	}
}
