package jetstream

import (
	"context"
	"fmt"
	"strings"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Verify checks, with one stream info request, that the operator's stream
// can carry this node's records as dual requires. It never creates or edits
// the stream. Each refusal names the setting (the stream config's JSON
// name), and every refusal found is reported at once, wrapping
// ErrMisconfigured:
//
//   - num_replicas ≥ 3 (MinReplicas): a confirm survives one lost server;
//   - max_age ≥ 2 × Options.BackupMaxAge (0 = unlimited passes; skipped when
//     BackupMaxAge is 0): the log outlives the oldest backup it stands in for
//     (ADR section 9);
//   - max_msg_size ≥ Options.MaxRecordBytes (-1 = unlimited passes), and the
//     server's max_payload too, else the largest record is refused forever;
//   - duplicate_window ≥ 1 minute (MinDuplicateWindow): the window collapses
//     a republish after a lost PubAck;
//   - subjects: one of them matches ankusa.intake.<fleet>.<node>;
//   - retention = limits and max_msgs_per_subject unlimited: an interest or
//     work-queue stream, or a per-subject cap, drops records before any
//     replay could read them;
//   - not sealed and not a mirror: neither accepts a publish.
//
// A max_msgs or max_bytes limit is logged, not refused: it may end
// retention before max_age, which is the operator's call.
//
// A stream that does not exist is NotFound; a request that fails is
// classified like a publish (mostly Unavailable). With VerifyTopic false,
// Verify does nothing and returns nil.
func (in *Intake) Verify(ctx context.Context) error {
	if !in.verify {
		return nil
	}
	c, err := in.current()
	if err != nil {
		return err
	}
	_, info, err := in.streamInfo(ctx, c)
	if err != nil {
		return err
	}
	cfg := info.Config
	var refusals []string
	refuse := func(format string, args ...any) { refusals = append(refusals, fmt.Sprintf(format, args...)) }

	if cfg.Replicas < MinReplicas {
		refuse("num_replicas is %d, must be at least %d (a confirm must survive the loss of a server)", cfg.Replicas, MinReplicas)
	}
	if in.backupMaxAge > 0 && cfg.MaxAge > 0 && cfg.MaxAge < 2*in.backupMaxAge {
		refuse("max_age is %s, must be 0 (unlimited) or at least 2 × backup.max_age_ms = %s", cfg.MaxAge, 2*in.backupMaxAge)
	}
	if in.maxRecord > 0 {
		if cfg.MaxMsgSize > 0 && int64(cfg.MaxMsgSize) < in.maxRecord {
			refuse("max_msg_size is %d, must be -1 (unlimited) or at least intake.max_record_bytes = %d", cfg.MaxMsgSize, in.maxRecord)
		}
		if p := c.nc.MaxPayload(); p > 0 && p < in.maxRecord {
			refuse("the server's max_payload is %d, must be at least intake.max_record_bytes = %d", p, in.maxRecord)
		}
	}
	if cfg.Duplicates < MinDuplicateWindow {
		refuse("duplicate_window is %s, must be at least %s (it collapses a republish after a lost PubAck)", cfg.Duplicates, MinDuplicateWindow)
	}
	if !subjectsCover(cfg.Subjects, in.subject) {
		refuse("subjects %q do not capture %s (want %s.%s)", cfg.Subjects, in.subject, SubjectPrefix, "<fleet>.>")
	}
	if cfg.Retention != natsjs.LimitsPolicy {
		refuse("retention is %s, must be limits (records must stay until they age out)", cfg.Retention)
	}
	if cfg.MaxMsgsPerSubject > 0 {
		refuse("max_msgs_per_subject is %d, must be unlimited (it would drop a node's older records)", cfg.MaxMsgsPerSubject)
	}
	if cfg.Sealed {
		refuse("sealed is true: the stream accepts no publish")
	}
	if cfg.Mirror != nil {
		refuse("mirror is set: a mirror accepts no publish")
	}
	if len(refusals) > 0 {
		return fmt.Errorf("%w: stream %s: %s", ErrMisconfigured, in.stream, strings.Join(refusals, "; "))
	}
	if cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 {
		in.log.Warn("intake stream has a size limit: records may be dropped before max_age",
			"max_msgs", cfg.MaxMsgs, "max_bytes", cfg.MaxBytes, "max_age", cfg.MaxAge)
	}
	return nil
}

// subjectsCover reports whether one of the stream subjects (which may hold
// wildcards) matches the literal subject.
func subjectsCover(patterns []string, subject string) bool {
	for _, p := range patterns {
		if subjectMatches(p, subject) {
			return true
		}
	}
	return false
}

// subjectMatches reports whether the literal subject matches pattern: "*"
// matches one token, a final ">" one or more.
func subjectMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">" && i == len(pt)-1:
			return len(st) > i
		case i >= len(st):
			return false
		case p != "*" && p != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}
