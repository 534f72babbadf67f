// Package jetstream is the intake log on a NATS JetStream stream
// (intake.type: jetstream; the ADR's Intake.JetStream, DUR-1 section 6),
// built on nats.go/jetstream with a connection of its own (never the NATS
// sink's).
//
// Record format (ADR section 4):
//
//   - subject ankusa.intake.<fleet>.<node>: one subject per node, so a
//     node's replay is a filtered read of the shared stream;
//   - Nats-Msg-Id = <node>:<seq>: a republish of the same (node, seq) inside
//     the stream's duplicate window is collapsed by JetStream (stored once,
//     acknowledged with the original's sequence and Duplicate set); one
//     after the window is a second record, which the reader's seq-keyed
//     idempotent rule absorbs;
//   - headers: every intake.Header* name (seq in decimal, id as a UUID
//     string); Nats-Expected-Stream = Options.Stream, so a subject captured
//     by some other stream is refused (NotFound) instead of confirmed at a
//     position this adapter would never replay;
//   - data: Record.Value, as is.
//
// The confirm is the PubAck: a replicated stream acknowledges a message only
// after its quorum has committed it. PublishBatch publishes the batch's
// records asynchronously, in order, on one connection (so they are stored in
// order), then waits for every PubAck under ctx. There is one attempt per
// call: the client's no-responders retry is off, because a retried message
// could land behind a later record of the same batch; the reconciler owns
// every retry.
//
// Positions are JetStream stream sequences. The stream is shared by every
// node of the fleet, so a node's positions are increasing but NOT contiguous:
// other nodes' records sit between them. PublishBatch returns the sequence of
// the batch's last record only; a caller may use positions as lower bounds
// for Replay (and compare them with Earliest), never count records by
// subtracting them. A collapsed republish confirms at the original record's
// sequence, which may be lower than an earlier confirm of another batch.
//
// Replay reads the node's subject with an ordered consumer from position+1
// up to the subject's last sequence as the stream leader reports it when
// Replay is called (see Replay for why not a follower's view).
//
// The stream is operator-owned: this package never creates, edits or purges
// one. Verify checks that it is fit (replicas, retention, size limits,
// duplicate window, subjects); see Verify for the list. The node's
// credentials need: publish on its subject; the JetStream API for the
// stream ($JS.API.STREAM.INFO.<stream>, $JS.API.STREAM.MSG.GET.<stream>,
// $JS.API.CONSUMER.CREATE.<stream>.>, $JS.API.CONSUMER.DELETE.<stream>.>,
// $JS.API.CONSUMER.MSG.NEXT.<stream>.>); subscribe on _INBOX.> for the
// replies. The API is reached at its default prefix ($JS.API, no domain).
//
// Ready is the connection's state (connected or not), read locally.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/natsclient"
)

// SubjectPrefix is the first two tokens of every intake subject.
const SubjectPrefix = "ankusa.intake"

// MinDuplicateWindow is the shortest stream duplicate window Verify
// accepts. The window is what collapses the reconciler's republish of a
// record whose PubAck was lost; the reconciler republishes within seconds
// (intake.publish_timeout_ms ≤ 60 s, intake.reconcile_deadline_ms defaults to
// 20 s), and one minute covers that with room. A republish after the window
// is still safe (a duplicate record, absorbed by the reader), only wasteful.
const MinDuplicateWindow = time.Minute

// MinReplicas is the stream replication Verify requires: a confirm must
// survive the loss of any one server.
const MinReplicas = 3

var (
	// ErrClosed is wrapped by the Unavailable error of a call on a closed
	// Intake: the intake package's, as the Intake contract states.
	ErrClosed = intake.ErrClosed
	// ErrNotConnected: the client is (re)connecting; Unavailable.
	ErrNotConnected = errors.New("nats connection not ready")
	// ErrNoStream: nothing answered the publish, so no stream captures the
	// subject (or JetStream is off); NotFound.
	ErrNoStream = errors.New("no JetStream stream captures the subject")
	// ErrPermissionDenied: the server refused the publish for lack of
	// permission on the subject; Permanent.
	ErrPermissionDenied = errors.New("publish permission violation")
	// ErrTooLarge is wrapped by the Permanent error of a record larger than
	// Options.MaxRecordBytes or the server's max_payload.
	ErrTooLarge = fmt.Errorf("record too large (%w)", intake.ErrRecordRefused)
	// ErrMisconfigured is wrapped by every Verify refusal: the stream exists
	// and answered, but a setting is wrong.
	ErrMisconfigured = errors.New("intake stream misconfigured")
)

// namePattern is what a fleet or node may be: dot-separated tokens of the
// intake.node_id alphabet (no wildcard, no empty token), so the subject is a
// literal one.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// Options configures Open.
type Options struct {
	// URL is the server URL, or a comma-separated list (intake.jetstream.url).
	// The client also learns the cluster's other servers from the first one
	// it reaches.
	URL string
	// Stream is the operator-created stream's name (intake.jetstream.stream).
	Stream string
	// Fleet and Node make the subject ankusa.intake.<Fleet>.<Node>.
	Fleet string
	Node  string

	// At most one credential method: User/Password, Token, CredsFile or
	// NKeyFile (a seed file).
	User      string
	Password  string
	Token     string
	CredsFile string
	NKeyFile  string

	// MaxRecordBytes is intake.max_record_bytes: PublishBatch refuses a
	// bigger record (Permanent) and Verify requires the stream's
	// max_msg_size and the server's max_payload to carry one. 0 disables
	// both.
	MaxRecordBytes int64
	// BackupMaxAge is backup.max_age_ms: Verify requires the stream's
	// max_age to be at least twice it (ADR section 9). 0 skips the check.
	BackupMaxAge time.Duration
	// VerifyTopic is intake.verify_topic; false makes Verify a no-op.
	VerifyTopic bool
	// Logger receives connection events and skipped-record warnings. Nil
	// discards.
	Logger *slog.Logger
}

// Intake is one node's view of the JetStream intake stream. Its methods are
// safe for concurrent use.
type Intake struct {
	stream       string
	subject      string
	node         string
	maxRecord    int64
	backupMaxAge time.Duration
	verify       bool
	log          *slog.Logger
	denied       *natsclient.Denials
	client       *natsclient.Client[*conn]

	replicas atomic.Int64 // from the last stream info; 0 = not seen yet
	skipped  atomic.Int64
}

var (
	_ intake.Intake     = (*Intake)(nil)
	_ intake.Positioner = (*Intake)(nil)
)

// Open validates o and dials the server. A server that is down (or that
// refuses the credentials) does not fail Open: the client keeps reconnecting
// in the background, Ready is false and calls fail Unavailable meanwhile.
// Open never touches the stream; call Verify for that.
func Open(o Options) (*Intake, error) {
	switch {
	case strings.TrimSpace(o.URL) == "":
		return nil, errors.New("jetstream intake: no server URL")
	case o.Stream == "" || strings.ContainsAny(o.Stream, ".*> \t\r\n"):
		return nil, fmt.Errorf("jetstream intake: stream name %q must be non-empty, without '.', '*', '>' or whitespace", o.Stream)
	case len(o.Fleet) > 64 || !namePattern.MatchString(o.Fleet):
		return nil, fmt.Errorf("jetstream intake: fleet %q must be dot-separated tokens of [A-Za-z0-9_-], at most 64 bytes", o.Fleet)
	case len(o.Node) > 64 || !namePattern.MatchString(o.Node):
		return nil, fmt.Errorf("jetstream intake: node %q must be dot-separated tokens of [A-Za-z0-9_-], at most 64 bytes", o.Node)
	case o.MaxRecordBytes < 0:
		return nil, fmt.Errorf("jetstream intake: max record bytes %d < 0", o.MaxRecordBytes)
	case o.BackupMaxAge < 0:
		return nil, fmt.Errorf("jetstream intake: backup max age %s < 0", o.BackupMaxAge)
	}
	auth, err := natsclient.AuthOptions(natsclient.Auth{User: o.User, Password: o.Password,
		Token: o.Token, CredsFile: o.CredsFile, NKeyFile: o.NKeyFile})
	if err != nil {
		return nil, fmt.Errorf("jetstream intake: %w", err)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	in := &Intake{
		stream:       o.Stream,
		subject:      Subject(o.Fleet, o.Node),
		node:         o.Node,
		maxRecord:    o.MaxRecordBytes,
		backupMaxAge: o.BackupMaxAge,
		verify:       o.VerifyTopic,
		denied:       natsclient.NewDenials(),
	}
	in.log = logger.With("component", "intake.jetstream", "stream", o.Stream, "subject", in.subject)
	if in.client, err = in.dial(o.URL, auth); err != nil {
		return nil, fmt.Errorf("jetstream intake: connect to %s: %w", natsclient.RedactURL(o.URL), err)
	}
	return in, nil
}

// Subject is the subject node of fleet publishes on.
func Subject(fleet, node string) string {
	return SubjectPrefix + "." + fleet + "." + node
}

// MsgID is the Nats-Msg-Id of (node, seq).
func MsgID(node string, seq uint64) string {
	return node + ":" + strconv.FormatUint(seq, 10)
}

// Subject returns this node's subject.
func (in *Intake) Subject() string { return in.subject }

// Skipped returns how many records this Intake's replays skipped as unknown
// (version or kind) or unreadable, over its lifetime.
func (in *Intake) Skipped() int64 { return in.skipped.Load() }

// current returns the live connection, or an Unavailable error once closed.
func (in *Intake) current() (*conn, error) {
	c, ok := in.client.Current()
	if !ok {
		return nil, &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	return c, nil
}

// PublishBatch publishes recs in order and returns the stream sequence of
// the last one once every record has its PubAck (each one committed by the
// stream's quorum). The records are sent back to back without waiting
// (PublishMsgAsync, in order on one connection, so the stream stores them in
// order), then every PubAck is awaited under ctx; the first failure is
// returned and none of the batch may be assumed confirmed, though some may
// have landed. There is one attempt: no client-side retry.
//
// A record whose (node, seq) the stream already holds within its duplicate
// window is not stored again; its PubAck (Duplicate set) carries the
// original's sequence, so a republished batch confirms at the position its
// first publish had. A (node, seq) twice in one batch is sent once.
//
// A record over MaxRecordBytes or the server's max_payload, of another node
// than Options.Node, with an empty version or kind, or with a header value
// holding CR or LF fails the whole batch Permanent before anything is sent.
// An empty batch is refused Permanent. The version and kind are sent as
// given, so a test can publish a record a reader must skip.
func (in *Intake) PublishBatch(ctx context.Context, recs []intake.Record) (intake.Position, error) {
	pos, err := in.PublishBatchPositions(ctx, recs)
	if err != nil {
		return -1, err
	}
	return pos[len(pos)-1], nil
}

// PublishBatchPositions is PublishBatch returning every record's position
// (its PubAck's stream sequence), in batch order: the positions of a batch
// are increasing but not contiguous, since other nodes publish into the
// same stream, so they cannot be derived from the last one. A record
// collapsed as a duplicate has its original's position, which may be lower
// than its neighbours'. Errors are PublishBatch's (nil positions).
func (in *Intake) PublishBatchPositions(ctx context.Context, recs []intake.Record) ([]intake.Position, error) {
	if len(recs) == 0 {
		return nil, intake.Errorf(intake.Permanent, "jetstream intake: empty batch")
	}
	c, err := in.current()
	if err != nil {
		return nil, err
	}
	msgs := make([]*nats.Msg, len(recs))
	for i := range recs {
		m, err := in.encode(&recs[i])
		if err != nil {
			return nil, &intake.Error{Class: intake.Permanent, Err: err}
		}
		if limit := c.nc.MaxPayload(); limit > 0 && int64(msgSize(m)) > limit {
			return nil, &intake.Error{Class: intake.Permanent, Err: fmt.Errorf(
				"record (node %s, seq %d) of %d bytes exceeds the server's max_payload of %d: %w",
				recs[i].Node, recs[i].Seq, msgSize(m), limit, ErrTooLarge)}
		}
		msgs[i] = m
	}
	if !c.nc.IsConnected() {
		return nil, in.classify(ctx, c, 0, nats.ErrDisconnected)
	}
	if err := ctx.Err(); err != nil {
		return nil, in.classify(ctx, c, 0, err)
	}

	ctx, stopWatch := in.denied.Watch(ctx)
	defer stopWatch()
	stall := defaultStallWait
	if d, ok := ctx.Deadline(); ok {
		stall = max(time.Until(d), time.Millisecond)
	}
	// A (node, seq) twice in one batch is sent once: JetStream would refuse
	// the second copy while the first is still being committed (10158,
	// "duplicate message id is in process"); the copy shares the first one's
	// PubAck.
	futures := make([]natsjs.PubAckFuture, 0, len(msgs))
	sent := make([]int, 0, len(msgs)) // futures[k] is for msgs[sent[k]]
	first := make(map[string]int, len(msgs))
	for i, m := range msgs {
		id := MsgID(recs[i].Node, recs[i].Seq)
		if _, ok := first[id]; ok {
			continue
		}
		first[id] = len(futures)
		f, err := c.js.PublishMsgAsync(m,
			natsjs.WithMsgID(id),
			natsjs.WithExpectStream(in.stream),
			natsjs.WithRetryAttempts(0),
			natsjs.WithStallWait(stall))
		if err != nil {
			return nil, in.classify(ctx, c, msgSize(m), err)
		}
		futures = append(futures, f)
		sent = append(sent, i)
	}
	acks := make([]*natsjs.PubAck, len(futures))
	for k, f := range futures {
		select {
		case acks[k] = <-f.Ok():
		case err := <-f.Err():
			return nil, in.classify(ctx, c, msgSize(msgs[sent[k]]), err)
		case <-ctx.Done():
			return nil, in.classify(ctx, c, 0, context.Cause(ctx))
		}
	}
	pos := make([]intake.Position, len(recs))
	for i := range recs {
		pos[i] = intake.Position(acks[first[MsgID(recs[i].Node, recs[i].Seq)]].Sequence)
	}
	return pos, nil
}

// encode builds rec's message: subject, headers, data. It fails for a
// record that can never be sent (too large, a header value with CR or LF).
func (in *Intake) encode(rec *intake.Record) (*nats.Msg, error) {
	switch {
	case rec.Version == "" || rec.Kind == "":
		return nil, fmt.Errorf("record (node %s, seq %d): empty version or kind", rec.Node, rec.Seq)
	case rec.Node != in.node:
		// Replay filters on the node header: a record of another node on
		// this node's subject would never be replayed by anyone.
		return nil, fmt.Errorf("record of node %q (seq %d) published through node %q's intake", rec.Node, rec.Seq, in.node)
	}
	h := nats.Header{}
	for _, kv := range [...][2]string{
		{intake.HeaderVersion, rec.Version},
		{intake.HeaderKind, rec.Kind},
		{intake.HeaderNode, rec.Node},
		{intake.HeaderSeq, strconv.FormatUint(rec.Seq, 10)},
		{intake.HeaderID, uuid.UUID(rec.ID).String()},
		{intake.HeaderIncarnation, rec.Incarnation},
		{intake.HeaderTenant, rec.Tenant},
		{intake.HeaderSource, rec.Source},
	} {
		if strings.ContainsAny(kv[1], "\r\n") {
			return nil, fmt.Errorf("record (node %s, seq %d): header %s holds CR or LF", rec.Node, rec.Seq, kv[0])
		}
		h.Set(kv[0], kv[1])
	}
	m := &nats.Msg{Subject: in.subject, Header: h, Data: rec.Value}
	if in.maxRecord > 0 {
		if n := msgSize(m); int64(n) > in.maxRecord {
			return nil, fmt.Errorf("record (node %s, seq %d) of %d bytes (value and headers) exceeds max record bytes %d: %w",
				rec.Node, rec.Seq, n, in.maxRecord, ErrTooLarge)
		}
	}
	return m, nil
}

// msgSize is m's size as the server counts it against max_msg_size and
// max_payload, near enough: the data plus the encoded headers, with room
// for the Nats-Msg-Id and Nats-Expected-Stream headers added at publish.
func msgSize(m *nats.Msg) int {
	n := len(m.Data) + len("NATS/1.0\r\n\r\n") + 128
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// Ready reports whether the client is connected to a server right now. It
// reads the connection's status and does no I/O; a connected client whose
// stream has lost quorum is still "ready" here, and its publishes fail
// Unavailable.
func (in *Intake) Ready() bool {
	c, err := in.current()
	if err != nil {
		return false
	}
	return c.nc.IsConnected()
}

// Describe is the log's part of the startup durability sentence. The
// replica count is the one the last stream info (Verify, Earliest, Replay)
// reported, "unknown" before any.
func (in *Intake) Describe() string {
	r := "unknown"
	if n := in.replicas.Load(); n > 0 {
		r = strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("JetStream stream %s subject %s (replicas=%s)", in.stream, in.subject, r)
}

// Close closes the connection. Calls after Close fail Unavailable
// (ErrClosed). It is idempotent.
func (in *Intake) Close() error {
	return in.client.Close()
}

// streamInfo fetches the stream and notes its replica count for Describe.
func (in *Intake) streamInfo(ctx context.Context, c *conn) (natsjs.Stream, *natsjs.StreamInfo, error) {
	st, err := c.js.Stream(ctx, in.stream)
	if err != nil {
		return nil, nil, in.classifyAPI(ctx, fmt.Sprintf("stream info of %q", in.stream), err)
	}
	info := st.CachedInfo()
	in.replicas.Store(int64(info.Config.Replicas))
	return st, info, nil
}
