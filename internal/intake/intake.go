// Package intake defines the replicated intake log of wal.type: dual: the
// Intake interface every adapter implements (memory, Kafka, JetStream), the
// record that carries one hook, and the four error classes.
//
// Under dual a 2xx means the hook is fsynced locally AND confirmed by the
// log at quorum. The commit itself (both halves in parallel, the pending
// set, the reconciler, the gate) lives in the queue package, which owns the
// writer; this package is what the queue talks to.
package intake

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Record versions and kinds (ADR section 4). A reader skips, and counts, a
// version or kind it does not know; it never fails a replay on one.
const (
	RecordVersion = "1"
	KindHook      = "hook"
)

// Header names carried by every record (FROZEN: readers filter on them).
const (
	HeaderVersion     = "ankusa_intake_v"
	HeaderKind        = "ankusa_intake_kind"
	HeaderNode        = "ankusa_intake_node"
	HeaderSeq         = "ankusa_intake_seq"
	HeaderID          = "ankusa_intake_id"
	HeaderIncarnation = "ankusa_intake_incarnation"
	HeaderTenant      = "ankusa_intake_tenant"
	HeaderSource      = "ankusa_intake_source"
)

// Record is one hook in the log: the exact stored envelope bytes plus the
// metadata its headers carry.
type Record struct {
	Version     string // RecordVersion when publishing
	Kind        string // KindHook when publishing
	Node        string
	Seq         uint64
	ID          [16]byte
	Incarnation string
	Tenant      string
	Source      string
	Value       []byte // store.EncodeEnvelope of the hook
}

// Position is a record's place in the node's partition or stream (a Kafka
// offset, a JetStream stream sequence, the memory log's index). -1 means
// "before the first record".
type Position int64

// Class says what a failed call means for the caller.
type Class int

const (
	// Unavailable: the log could not confirm now (no quorum, leader moving,
	// timeout). Retry.
	Unavailable Class = iota + 1
	// Throttled: the log asked to slow down; honour RetryAfter.
	Throttled
	// NotFound: the topic or stream does not exist.
	NotFound
	// Permanent: the record can never be accepted (too large, refused), or
	// the log refuses this node outright (authorization). Only the first
	// wraps ErrRecordRefused.
	Permanent
)

func (c Class) String() string {
	switch c {
	case Unavailable:
		return "unavailable"
	case Throttled:
		return "throttled"
	case NotFound:
		return "not_found"
	case Permanent:
		return "permanent"
	}
	return "unknown"
}

// Error is a classified adapter error.
type Error struct {
	Class      Class
	RetryAfter time.Duration // Throttled only
	Err        error
}

func (e *Error) Error() string { return fmt.Sprintf("intake %s: %v", e.Class, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a classified error.
func Errorf(c Class, format string, args ...any) error {
	return &Error{Class: c, Err: fmt.Errorf(format, args...)}
}

// ClassOf reads the class of err; an unclassified error is Unavailable (the
// safe assumption: retry, never drop).
func ClassOf(err error) (Class, time.Duration) {
	var e *Error
	if errors.As(err, &e) {
		return e.Class, e.RetryAfter
	}
	return Unavailable, 0
}

// IsTransient reports whether err is a classified log outage (Unavailable
// or Throttled) and, for Throttled, how long the log asked the caller to
// wait. Unlike ClassOf it never assumes: an unclassified error (a store
// failure, a bug) is not transient, so a caller that retries on it alone
// cannot mistake its own failure for the log's and retry it forever.
func IsTransient(err error) (bool, time.Duration) {
	var e *Error
	if !errors.As(err, &e) {
		return false, 0
	}
	switch e.Class {
	case Unavailable:
		return true, 0
	case Throttled:
		return true, e.RetryAfter
	}
	return false, 0
}

// Intake is one node's view of the replicated intake log.
//
// Error contract, for every method that returns one: a failure of the log
// is an *Error of one of the four classes (ClassOf reads it; Unavailable
// and Throttled are the transient ones, IsTransient). ctx bounds every
// blocking call: when it ends the call returns promptly with an
// Unavailable error that wraps ctx's error (errors.Is(err,
// context.Canceled) holds), never a success it could not confirm. After
// Close every method but Ready, Describe, Skipped and Close fails with an
// Unavailable error wrapping ErrClosed.
type Intake interface {
	// PublishBatch appends recs (in order) and returns the position of the
	// last one once the log has confirmed all of them at quorum. An error
	// means none may be assumed confirmed — though some may have landed (a
	// lost ack); readers dedupe by (node, seq) and hook id. ctx bounds the
	// attempt (intake.publish_timeout_ms). A record the log can never take
	// (larger than its size limit) fails the whole batch Permanent before
	// anything is written. recs is the caller's again once the call returns
	// (the queue's publishers reuse the slice for their next batch): an
	// adapter keeps no reference to it, though it may go on sending a
	// Value's bytes after a timeout, which is why the caller never changes
	// or reuses those.
	PublishBatch(ctx context.Context, recs []Record) (Position, error)
	// Replay calls fn for each record of this node after position from
	// (exclusive), in log order, until the current end. The adapter filters
	// by node and skips (and counts, see Skipped) unknown versions and
	// kinds. fn's error stops the replay and is returned as it is.
	Replay(ctx context.Context, from Position, fn func(Record, Position) error) error
	// Ready is a cheap local flag: false when the adapter knows the log is
	// not answering, and after Close. It never does I/O.
	Ready() bool
	// Verify checks the topology at boot (replication, retention, size
	// limits); an error names the setting that is wrong, and is Permanent
	// when the setting is (an operator must change it) or transient when
	// the log did not answer. An adapter opened not to verify returns nil.
	Verify(ctx context.Context) error
	// Describe is the log's part of the startup durability sentence.
	Describe() string
	// Earliest is the first position still held (retention) where this
	// node's records are, for the truncation check of boot recovery: a
	// partition's log start (equal to its end when retention dropped
	// everything), or, on a log shared by position (a JetStream stream),
	// the position of this node's first record held, -1 when it holds none.
	// Never another node's retention: that would refuse a node which lost
	// nothing.
	Earliest(ctx context.Context) (Position, error)
	// Skipped is how many records of this node this adapter's replays
	// have passed over since Open as unknown (version, kind) or unreadable
	// (the skipped figure of the boot replay metric). It never does I/O.
	Skipped() int64
	// Close releases the adapter's clients. It is idempotent: a second
	// Close returns nil.
	Close() error
}

// ErrClosed is wrapped by the Unavailable error of a call on a closed
// Intake (errors.Is(err, intake.ErrClosed)).
var ErrClosed = errors.New("intake is closed")

// recordFixedBound bounds what any adapter's own size check adds to a
// record's Value and variable header values: the header names, the seq and
// id as text, length varints, a Kafka record's and batch's framing, a NATS
// message's header block and Nats-Msg-Id. Each adapter's check stays under
// it (the contract suite's RecordAtTheBoundIsAccepted).
const recordFixedBound = 512

// RecordBound is an upper bound of the size every adapter compares with
// its record limit (intake.max_record_bytes) for r with a Value of
// valueLen bytes (r.Value itself is not read). The queue refuses a record
// above it before either half (ADR section 3, "record too large"), so a
// record it admits is never refused by an adapter's own size check.
func RecordBound(r *Record, valueLen int) int64 {
	// The node twice: Kafka's record key is the node id too.
	return int64(recordFixedBound + valueLen + len(r.Version) + len(r.Kind) + 2*len(r.Node) +
		len(r.Incarnation) + len(r.Tenant) + len(r.Source))
}

// ErrRecordRefused is wrapped by a Permanent error that is about one record
// of the batch (larger than the log takes, malformed), not about the log:
// the batch's other records may be published without it. The queue splits
// such a batch until the refused record stands alone; any other Permanent
// error (authorization, no partition) is the whole log's, never split.
var ErrRecordRefused = errors.New("the log refuses this record")

// Positioner is the optional ability of an adapter whose log may be shared
// by several nodes (a JetStream stream; a Kafka partition two node ids hash
// to): a batch's positions then have gaps, and only the adapter knows each
// one. PublishBatchPositions is PublishBatch (same error contract) that
// returns every record's position, in the order of recs. A position may be
// a lower bound of the record's real one but never above it, because the
// intake offset must never pass a record that is only in the log.
//
// An adapter without it confirms a batch at contiguous positions ending at
// the one PublishBatch returns (the memory log: one file per node).
type Positioner interface {
	PublishBatchPositions(ctx context.Context, recs []Record) ([]Position, error)
}

// PartitionAssigner is the optional ability of an adapter whose log is
// partitioned (Kafka): each node writes one partition, chosen once at the
// node's first dual boot and stamped in the store (m:intake_partition), never
// recomputed, so growing the topic never remaps a node (ADR section 6).
// Until SetPartition, PublishBatch and Earliest fail Permanent, and Replay
// reads every partition from the start (a position names a place in one
// partition, so Replay from one fails Permanent).
type PartitionAssigner interface {
	// AssignPartition is the partition a first boot of node would stamp,
	// from the log's current partition count. It follows the Intake error
	// contract. The caller stamps the answer and never asks again.
	AssignPartition(ctx context.Context, node string) (int32, error)
	// SetPartition gives the adapter the stamped partition, once. Setting
	// the partition already set is a no-op; a different one, or a negative
	// one, is refused with a plain (unclassified) error: a stamp is never
	// changed.
	SetPartition(p int32) error
}
