// Package kafka is the Kafka intake log of wal.type: dual (intake.type:
// kafka; the ADR's Intake.Kafka, section 6 and amendment DUR-1.b.b), built
// on franz-go (kgo for producing and consuming, kadm for offsets and topic
// settings).
//
// # Client
//
// The adapter has its own kgo client, never a sink's: a sink's retries,
// batching and failures must not hold up a confirm, and the reverse. Open
// does not dial; a broker that is down shows up as failed publishes and as
// Ready false, not as a failed Open. The client never creates topics (kgo's
// AllowAutoTopicCreation is off and every metadata request asks for none):
// a missing topic is NotFound until an operator creates it.
//
// # The record
//
// One Kafka record per intake.Record: key = the node id, value =
// Record.Value byte for byte, and the eight intake.Header* headers (version,
// kind, node, seq in decimal, the hook id as a canonical UUID string,
// incarnation, tenant, source), the same text the memory log frames carry.
// The timestamp is left to the client (produce time), so retention counts
// from the publish, not from when the hook was received.
//
// # The partition
//
// The partition is explicit: Options.Partition, which the caller stamps once
// (m:intake_partition) from AssignPartition at the node's first dual boot
// and never recomputes. AssignPartition is PartitionFor(node, n): FNV-1a 32
// of the node id modulo the topic's partition count at that moment, so
// growing the topic later never remaps a node; the stamp, not the hash, is
// what the adapter uses. Options.Partition -1 means not yet stamped:
// PublishBatch and Earliest refuse, SetPartition stamps it, and Replay reads
// every partition (a node restored without its stamp still finds its
// records; the caller's seq-keyed idempotent apply absorbs the rest).
//
// # Confirm
//
// PublishBatch produces the batch to the node's partition with
// RequiredAcks all in-sync replicas, so a confirm means every in-sync
// replica has every record and the in-sync set was at least the topic's
// min.insync.replicas (which Verify requires to be at least 2). The
// position is the offset of the batch's last record; PublishBatchPositions
// returns every record's own offset, which the dual commit keeps.
//
// The records of one PublishBatch are enqueued under one lock, in order, so
// concurrent PublishBatch calls of one Intake never interleave: with the
// node as its partition's only writer (the usual case) a batch's offsets are
// contiguous, last-len(recs)+1 .. last. If another node's hash lands on the
// same partition, its records can fall between two produce requests of a
// large batch; nothing relies on contiguity (PublishBatchPositions and
// Replay report each record's own offset), and order within the node is
// kept either way.
//
// One attempt per call: kgo.RecordRetries(0) makes the client fail a record
// on the first error it gets instead of retrying inside the attempt, and ctx
// (intake.publish_timeout_ms) bounds the wait; PublishBatch returns when ctx
// ends even if the broker never answers. The reconciler owns every retry.
//
// The idempotent producer stays on. It removes the duplicates the client
// itself could create within one producer session: a produce request the
// client resends (a connection cut after the broker wrote it) is dropped by
// the broker by producer id and sequence. It does NOT remove a republish:
// when an attempt fails or times out after the broker stored the batch (a
// lost ack, NOT_ENOUGH_REPLICAS_AFTER_APPEND, ctx ending, which
// kgo.AllowIdempotentProduceCancellation lets fail an in-flight record),
// the reconciler's next PublishBatch is a new produce and the log holds the
// records twice; nor across restarts (a new producer id). The read side
// dedupes by (node, seq) and hook id, which is what makes that safe; Replay
// returns both copies.
//
// # Errors
//
// Failures are *intake.Error: NOT_ENOUGH_REPLICAS,
// NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended; the outcome is unknown and the
// republish resolves it), LEADER_NOT_AVAILABLE, NOT_LEADER_FOR_PARTITION,
// REQUEST_TIMED_OUT, network errors and ctx ending are Unavailable;
// THROTTLING_QUOTA_EXCEEDED is Throttled with RetryAfter 1s (Kafka names no
// delay); UNKNOWN_TOPIC_OR_PARTITION is NotFound; MESSAGE_TOO_LARGE
// (including the client's own check), RECORD_LIST_TOO_LARGE,
// INVALID_RECORD, TOPIC_AUTHORIZATION_FAILED and
// CLUSTER_AUTHORIZATION_FAILED are Permanent. Anything else is Unavailable,
// the safe assumption (retry, never drop). A produce response's
// throttle_time_ms is not surfaced: a throttled produce that succeeded is a
// confirm (reporting it as a failure would only cause a duplicate), and a
// quota that delays a produce shows up as confirm latency.
//
// # Verify, Ready, Describe
//
// Verify reads the topic's metadata and DescribeConfigs and refuses, naming
// the setting, its value and the rule: replication factor below 3,
// min.insync.replicas below 2 (or above the replication factor, where no
// acks=all produce can succeed), unclean.leader.election.enable not false,
// cleanup.policy compacting (the key is the node id, so compaction would
// keep one record per node; this rule is the adapter's own, not the ADR's),
// retention.ms below 2 x Options.BackupMaxAge (-1 = infinite is fine; no
// check when BackupMaxAge is 0), max.message.bytes below
// Options.MaxRecordBytes, and a stamped partition the topic does not have.
// A setting the broker does not report is refused too: unverifiable is not
// verified. Options.VerifyTopic false makes Verify a no-op; the caller then
// says UNVERIFIED in the startup line, as Describe does.
//
// Ready is an atomic flag, never I/O. A goroutine started by Open and
// stopped by Close refreshes it about every second from a metadata request
// for the node's partition (true when the partition has a leader), never a
// produce; a confirmed publish also sets it.
//
// # Testing
//
// The tests run against franz-go's pkg/kfake, an in-process Kafka-protocol
// cluster with fault injection, because no broker can run where they run.
// kfake does not replicate (acks=all is acknowledged at once and
// min.insync.replicas is reported, not enforced) and does not know
// unclean.leader.election.enable, so quorum behaviour is injected as broker
// answers and Verify's full answer is given by a control function; the
// ADR's three-broker KRaft cases (one broker down confirms, two down is
// NOT_ENOUGH_REPLICAS) need a real cluster.
package kafka
