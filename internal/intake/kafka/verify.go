package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ankusa/ankusa/internal/intake"
)

// ErrTopicRefused is wrapped by Verify's Permanent error when the topic's
// settings break a rule; the error lists every refusal, each naming the
// setting, its value and the rule.
var ErrTopicRefused = errors.New("topic settings refused")

// The rules Verify applies (ADR section 6).
const (
	minReplicas = 3 // replication factor: a confirm survives two brokers lost
	minISR      = 2 // min.insync.replicas: acks=all means at least two copies
)

// Verify checks the topic at boot, from a fresh metadata request and kadm
// DescribeTopicConfigs, and refuses (Permanent, wrapping ErrTopicRefused)
// a replication factor below 3, min.insync.replicas below 2 or above the
// replication factor, unclean.leader.election.enable not false, a
// cleanup.policy that compacts (the key is the node id), retention.ms
// below 2 × Options.BackupMaxAge (-1, infinite, passes; no check when
// BackupMaxAge is 0), max.message.bytes below Options.MaxRecordBytes (no
// check when it is 0), and a stamped partition the topic does not have. A
// setting the broker does not report is refused: unverifiable is not
// verified. Every refusal is listed, not only the first.
//
// A topic that does not exist is NotFound; a broker or ACL that refuses the
// request is classified like a produce error (authorization is Permanent,
// no answer is Unavailable): the topic is then unverified, not refused.
// With Options.VerifyTopic false Verify does nothing and returns nil.
//
// Describe reports the min.insync.replicas and replication factor read by
// the last Verify if it passed, and UNVERIFIED otherwise.
func (in *Intake) Verify(ctx context.Context) error {
	if !in.verify {
		return nil
	}
	if in.closed.Load() {
		return &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	s, err := in.check(ctx)
	in.verifiedMu.Lock()
	in.verified = s
	in.verifiedMu.Unlock()
	return err
}

// check is Verify's work: the settings read when every rule passes, else
// nil and the error.
func (in *Intake) check(ctx context.Context) (*settings, error) {
	t, err := in.topicMetadata(ctx)
	if err != nil {
		return nil, classify("verify (metadata)", in.topic, err)
	}
	rcs, err := in.adm.DescribeTopicConfigs(ctx, in.topic)
	rc, onErr := rcs.On(in.topic, nil)
	switch {
	case onErr == nil && rc.Err != nil:
		return nil, classify("verify (describe configs)", in.topic, rc.Err)
	case onErr != nil && err != nil:
		return nil, classify("verify (describe configs)", in.topic, err)
	case onErr != nil:
		return nil, classify("verify (describe configs)", in.topic, onErr)
	}
	cfg := make(map[string]string, len(rc.Configs))
	for _, c := range rc.Configs {
		if c.Value != nil {
			cfg[c.Key] = *c.Value
		}
	}

	var refusals []error
	refuse := func(format string, args ...any) { refusals = append(refusals, fmt.Errorf(format, args...)) }
	// num reads an integer setting, refusing one that is missing or not a
	// number; ok is false then.
	num := func(name, rule string) (int64, bool) {
		v, found := cfg[name]
		if !found {
			refuse("%s is not reported by the broker, must be %s", name, rule)
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			refuse("%s is %q, not a number; must be %s", name, v, rule)
			return 0, false
		}
		return n, true
	}

	// Replication factor: the smallest replica set of any partition.
	replicas, thinnest := -1, int32(-1)
	for _, tp := range t.Partitions {
		if replicas < 0 || len(tp.Replicas) < replicas {
			replicas, thinnest = len(tp.Replicas), tp.Partition
		}
	}
	switch {
	case replicas < 0:
		refuse("replication factor: the topic has no partitions, must have at least 1 with at least %d replicas", minReplicas)
	case replicas < minReplicas:
		refuse("replication factor is %d (partition %d), must be at least %d", replicas, thinnest, minReplicas)
	}
	if p := in.partition.Load(); p >= int32(len(t.Partitions)) {
		refuse("partition %d (this node's stamp) does not exist: the topic has %d partitions", p, len(t.Partitions))
	}

	isr, isrOK := num("min.insync.replicas", fmt.Sprintf("at least %d", minISR))
	if isrOK {
		switch {
		case isr < minISR:
			refuse("min.insync.replicas is %d, must be at least %d (acks=all would confirm with fewer copies)", isr, minISR)
		case replicas >= 0 && isr > int64(replicas):
			refuse("min.insync.replicas is %d, must be at most the replication factor %d (no acks=all produce could succeed)", isr, replicas)
		}
	}

	const unclean = "unclean.leader.election.enable"
	switch v, found := cfg[unclean]; {
	case !found:
		refuse("%s is not reported by the broker, must be false", unclean)
	case !strings.EqualFold(strings.TrimSpace(v), "false"):
		refuse("%s is %s, must be false (an unclean election drops confirmed records)", unclean, v)
	}

	// Not one of the ADR's rules, but the key is the node id: compaction
	// would keep one record per node and drop every other confirmed one.
	const cleanup = "cleanup.policy"
	switch v, found := cfg[cleanup]; {
	case !found:
		refuse("%s is not reported by the broker, must be delete", cleanup)
	case strings.Contains(strings.ToLower(v), "compact"):
		refuse("%s is %s, must be delete (the key is the node id: compaction keeps one record per node)", cleanup, v)
	}

	if in.backupAge > 0 {
		want := 2 * in.backupAge.Milliseconds()
		rule := fmt.Sprintf("-1 (infinite) or at least 2 × backup max age (2 × %d ms = %d)", in.backupAge.Milliseconds(), want)
		if ret, ok := num("retention.ms", rule); ok && ret != -1 && ret < want {
			refuse("retention.ms is %d, must be %s", ret, rule)
		}
	}

	if in.checkMax {
		rule := fmt.Sprintf("at least intake.max_record_bytes (%d)", in.maxRecord)
		if mm, ok := num("max.message.bytes", rule); ok && mm < in.maxRecord {
			refuse("max.message.bytes is %d, must be %s", mm, rule)
		}
	}

	if len(refusals) > 0 {
		return nil, &intake.Error{Class: intake.Permanent,
			Err: fmt.Errorf("kafka intake topic %q: %w: %w", in.topic, ErrTopicRefused, errors.Join(refusals...))}
	}
	return &settings{minISR: isr, replicas: replicas}, nil
}
