// Package sim is the deterministic fault simulator of the commit pipeline
// (issue 11). Everything lives in its tests: `go test ./internal/sim` runs
// seeded schedules that drive the real queue (batcher, writer, syncer,
// fence, pending set, gate, reconciler), boot recovery, backup/restore, the
// dispatcher with its delivery history and archive, and an operator's
// resends and dlq and archive replay jobs, under virtual time
// (testing/synctest), with the store on a
// crashable in-memory disk wrapped in errorfs and the memory intake log
// behind a fault-injecting wrapper. See docs/testing.md, "Simulation".
package sim
