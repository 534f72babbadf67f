// Package memory is the file-backed, in-process intake log (intake.type:
// memory; the ADR's Intake.Memory): the test double every dual-commit test,
// drill and local demo drives, with injectable confirm latency and per-call
// faults.
//
// TEST ONLY: it is not a production mode. Nothing is replicated: the log is
// one directory on one disk, so a host that loses that disk loses every
// record in it, which is exactly the loss wal.type: dual exists to prevent.
// Describe says so in the startup sentence.
//
// What it does model faithfully:
//
//   - A confirm means durable in the log: PublishBatch appends every frame of
//     the batch and fsyncs the file (the directory was fsynced when the file
//     was created) before it returns the last position.
//   - One partition per node: each node appends to its own file,
//     <dir>/<node>.log, and a record's Position is its 0-based index in that
//     file. Several Logs (different nodes, or a second process after a crash)
//     may open the same directory, so the directory can live outside a node's
//     data dir and outlive the "host" in a drill. At most one Log per (dir,
//     node) may be open at a time; node ids are unique in a fleet, and a
//     replacement opens the file only after its predecessor died.
//   - A crash mid-append leaves a torn tail: it is ignored when the file is
//     opened and truncated before the next append, so the next record
//     follows the last good one.
//   - Retention: Truncate drops a prefix of the log (logically, recorded in a
//     sidecar file) and Earliest moves, for the truncation checks of boot
//     recovery.
//   - Lost acks: a publish can land and still report failure
//     (TimeoutAfterAppendNext, or ctx ending during the confirm latency), so a
//     log can hold records the caller believes failed, and a republish writes
//     them twice. Replay returns both; dedupe is the reader's job.
//
// The file format is described on appendFrame (format.go) and is frozen.
package memory
