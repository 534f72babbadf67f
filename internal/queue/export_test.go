package queue

// HoldMax is holdMax, for the external tests.
const HoldMax = holdMax

// AddSummary is addSummary: a test that runs Recover again after a failed
// run adds the runs' counts as RecoverNode does.
var AddSummary = addSummary

// FenceReportsPending is how many store failure reports wait for the
// writer (0 or 1).
func (q *Queue) FenceReportsPending() int { return len(q.writer.fenceCh) }
