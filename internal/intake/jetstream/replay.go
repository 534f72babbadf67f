package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake"
)

const (
	// replayBuffer is how many messages the replay's consumer pulls ahead.
	// Records are up to intake.max_record_bytes each, so it stays small.
	replayBuffer = 64
	// replayInactive is how long the server keeps a replay's ephemeral
	// consumer after the replay stopped pulling, should the explicit delete
	// at the end of Replay not reach it.
	replayInactive = time.Minute
	// cleanupTimeout bounds that delete.
	cleanupTimeout = 2 * time.Second
	// replayPullExpiry and replayHeartbeat make a lost pull request cost
	// 2 × replayHeartbeat: the consumer's first pull can reach the server
	// hosting the consumer before its interest did (routes propagate it
	// asynchronously) and is then dropped (no responders); the client only
	// notices through missing heartbeats, and recreates the consumer from
	// its cursor. The client's default for an ordered consumer is 5 s, 10 s
	// of stall.
	replayPullExpiry = 5 * time.Second
	replayHeartbeat  = 500 * time.Millisecond
	// replayIdleCheck is how long a replay waits for a message before it
	// reads the end again.
	replayIdleCheck = 2 * time.Second
	// apiPrefix is the JetStream API's default subject prefix (no domain).
	apiPrefix = "$JS.API."
)

// Replay calls fn for each record on this node's subject after stream
// sequence from (exclusive), in stream order, up to the subject's last
// message when Replay was called. It reads with an ordered consumer (an
// ephemeral, memory, ack-none consumer the client recreates from its cursor
// if it is lost) filtered on the node's subject, starting at from+1
// (DeliverByStartSequence; from < 0 delivers all). It skips, counts (Skipped)
// and logs records of an unknown version or kind or with unreadable headers;
// a record whose node header is not this node is passed over uncounted. A
// from before the stream's first sequence starts at the first sequence: the
// gap is the caller's to detect with Earliest. fn's error is returned as it
// is; ctx ending is Unavailable.
//
// The end is the subject's last sequence as the stream LEADER reports it
// (lastSeq). Neither a direct get nor the consumer's pending count is used
// for it: both may come from a follower that has not applied the latest
// confirmed records yet, and the server may place the replay's consumer on
// such a follower, in which case the replay waits for it to catch up. When
// nothing arrives for replayIdleCheck, the end is read again, so records
// that retention removed during the replay cannot hold it until ctx ends.
func (in *Intake) Replay(ctx context.Context, from intake.Position, fn func(intake.Record, intake.Position) error) error {
	c, err := in.current()
	if err != nil {
		return err
	}
	end, err := in.lastSeq(ctx, c)
	if err != nil || end == 0 || intake.Position(end) <= from {
		return err // end 0: the node never published, or retention dropped it all
	}

	cfg := natsjs.OrderedConsumerConfig{
		FilterSubjects:    []string{in.subject},
		DeliverPolicy:     natsjs.DeliverAllPolicy,
		InactiveThreshold: replayInactive,
	}
	if from >= 0 {
		cfg.DeliverPolicy = natsjs.DeliverByStartSequencePolicy
		cfg.OptStartSeq = uint64(from) + 1
	}
	op := fmt.Sprintf("replay of %q", in.subject)
	cons, err := c.js.OrderedConsumer(ctx, in.stream, cfg)
	if err != nil {
		return in.classifyAPI(ctx, op, err)
	}
	it, err := cons.Messages(natsjs.PullMaxMessages(replayBuffer),
		natsjs.PullExpiry(replayPullExpiry), natsjs.PullHeartbeat(replayHeartbeat))
	if err != nil {
		return in.classifyAPI(ctx, op, err)
	}
	defer func() {
		it.Stop()
		in.deleteConsumer(c, cons)
	}()

	var skipped int
	defer func() {
		if skipped > 0 {
			in.log.Warn("jetstream intake replay skipped unknown or unreadable records", "skipped", skipped, "from", from)
		}
	}()
	cursor := uint64(max(from, 0))
	for {
		msg, err := in.next(ctx, it)
		if errors.Is(err, errIdle) {
			// Nothing for a while: a lagging replica, or the end was removed.
			now, err := in.lastSeq(ctx, c)
			if err != nil {
				return err
			}
			if end = min(end, now); end <= cursor {
				return nil
			}
			continue
		}
		if err != nil {
			return in.classifyAPI(ctx, op, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return in.classifyAPI(ctx, op, err)
		}
		seq := md.Sequence.Stream
		if seq > end {
			return nil // published after Replay was called
		}
		cursor = seq
		rec, known, err := decode(msg.Headers(), msg.Data())
		switch {
		case err != nil:
			skipped++
			in.skipped.Add(1)
			in.log.Warn("jetstream intake replay: unreadable record", "position", seq, "error", err)
		case !known:
			skipped++
			in.skipped.Add(1)
		case rec.Node != in.node:
			// Another node's record on this subject: a node id that maps to
			// the same subject (fleet and node both hold dots). Not ours.
		default:
			if err := fn(rec, intake.Position(seq)); err != nil {
				return err
			}
		}
		if seq >= end {
			return nil
		}
	}
}

// errIdle is next's answer when no message came for replayIdleCheck.
var errIdle = errors.New("no message for a while")

// next waits for the replay's next message, at most replayIdleCheck.
func (in *Intake) next(ctx context.Context, it natsjs.MessagesContext) (natsjs.Msg, error) {
	wait, cancel := context.WithTimeout(ctx, replayIdleCheck)
	defer cancel()
	msg, err := it.Next(natsjs.NextContext(wait))
	if err != nil && ctx.Err() == nil && wait.Err() != nil {
		return nil, errIdle
	}
	return msg, err
}

// lastSeq returns the stream sequence of the last message on the node's
// subject, 0 when there is none, as the stream leader answers it: a plain
// (not direct) message-get request, which only the leader serves, so every
// confirmed record is counted.
func (in *Intake) lastSeq(ctx context.Context, c *conn) (uint64, error) {
	return in.subjectSeq(ctx, c, "last", struct {
		LastFor string `json:"last_by_subj"`
	}{in.subject})
}

// subjectSeq sends one plain (leader-served) message-get request and
// returns the stream sequence of the message it finds, 0 when there is
// none. which names the request in errors.
func (in *Intake) subjectSeq(ctx context.Context, c *conn, which string, body any) (uint64, error) {
	op := fmt.Sprintf("%s message of %q", which, in.subject)
	req, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	resp, err := c.nc.RequestWithContext(ctx, apiPrefix+"STREAM.MSG.GET."+in.stream, req)
	if err != nil {
		return 0, in.classifyAPI(ctx, op, err)
	}
	var r struct {
		Error   *natsjs.APIError `json:"error"`
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return 0, in.classifyAPI(ctx, op, fmt.Errorf("decode %s response: %w", apiPrefix+"STREAM.MSG.GET", err))
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == natsjs.JSErrCodeMessageNotFound:
		return 0, nil
	case r.Error != nil && r.Error.ErrorCode == natsjs.JSErrCodeStreamNotFound:
		return 0, in.classifyAPI(ctx, op, natsjs.ErrStreamNotFound)
	case r.Error != nil:
		return 0, in.classifyAPI(ctx, op, r.Error)
	case r.Message == nil:
		return 0, in.classifyAPI(ctx, op, natsjs.ErrInvalidJetStreamResponse)
	}
	return r.Message.Seq, nil
}

// deleteConsumer removes the replay's ephemeral consumer, best effort: the
// server drops it after replayInactive anyway.
func (in *Intake) deleteConsumer(c *conn, cons natsjs.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := c.js.DeleteConsumer(ctx, in.stream, info.Name); err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
		in.log.Debug("jetstream intake: delete replay consumer", "consumer", info.Name, "error", err)
	}
}

// decode reads a record from a message's headers and data. known is false
// for a version or kind this reader does not know (skip and count); err is
// set for a known record whose headers do not parse.
func decode(h nats.Header, data []byte) (rec intake.Record, known bool, err error) {
	rec.Version, rec.Kind = h.Get(intake.HeaderVersion), h.Get(intake.HeaderKind)
	if rec.Version != intake.RecordVersion || rec.Kind != intake.KindHook {
		return rec, false, nil
	}
	rec.Node = h.Get(intake.HeaderNode)
	rec.Incarnation = h.Get(intake.HeaderIncarnation)
	rec.Tenant = h.Get(intake.HeaderTenant)
	rec.Source = h.Get(intake.HeaderSource)
	if rec.Node == "" {
		return rec, true, fmt.Errorf("header %s missing", intake.HeaderNode)
	}
	if rec.Seq, err = strconv.ParseUint(h.Get(intake.HeaderSeq), 10, 64); err != nil {
		return rec, true, fmt.Errorf("header %s: %w", intake.HeaderSeq, err)
	}
	id, err := uuid.Parse(h.Get(intake.HeaderID))
	if err != nil {
		return rec, true, fmt.Errorf("header %s: %w", intake.HeaderID, err)
	}
	rec.ID = [16]byte(id)
	if len(data) > 0 {
		rec.Value = data
	}
	return rec, true, nil
}

// Earliest returns the stream sequence of the first message still held on
// this node's subject, for the truncation check of boot recovery. Not the
// stream's first sequence: the stream is shared, and other nodes' records
// aging out says nothing about this node's (an idle node's last record
// ages out while a busy node's later ones stay, and that node lost
// nothing). When the subject holds no message, -1: the stream holds nothing
// this node could replay, and cannot say whether any of its records were
// dropped. Asked of the stream leader, like lastSeq.
func (in *Intake) Earliest(ctx context.Context) (intake.Position, error) {
	c, err := in.current()
	if err != nil {
		return -1, err
	}
	seq, err := in.subjectSeq(ctx, c, "first", struct {
		Seq  uint64 `json:"seq"`
		Next string `json:"next_by_subj"`
	}{1, in.subject})
	if err != nil || seq == 0 {
		return -1, err
	}
	return intake.Position(seq), nil
}
