package jetstream_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/jetstream"
)

// settings are the names Verify refusals use.
var settings = []string{
	"num_replicas", "max_age", "max_msg_size", "max_payload", "duplicate_window",
	"subjects", "retention", "max_msgs_per_subject", "sealed", "mirror",
}

// TestIntake_Verify checks every refusal against real streams and that
// Verify never changes a stream.
func TestIntake_Verify(t *testing.T) {
	t.Parallel()
	good := newFixture(t, func(c *natsjs.StreamConfig) {
		c.MaxAge = 24 * time.Hour
		c.MaxMsgSize = 256 << 10
	})
	r1 := newFixture(t, func(c *natsjs.StreamConfig) {
		c.Replicas = 1
		c.MaxAge = 0 // unlimited
		c.MaxMsgSize = -1
		c.Duplicates = 10 * time.Second
	})
	interest := newFixture(t, func(c *natsjs.StreamConfig) {
		c.Replicas = 1
		c.Retention = natsjs.InterestPolicy
		c.MaxMsgsPerSubject = 5
	})

	cases := []struct {
		name string
		f    *fixture
		edit func(*jetstream.Options)
		want []string // settings the refusal names; none: accepted
	}{
		{"GoodStreamPasses", good, func(o *jetstream.Options) {
			o.BackupMaxAge, o.MaxRecordBytes = 12*time.Hour, 256<<10
		}, nil},
		{"MaxAgeBelowTwiceBackupMaxAge", good, func(o *jetstream.Options) { o.BackupMaxAge = 13 * time.Hour }, []string{"max_age"}},
		{"MaxMsgSizeBelowMaxRecordBytes", good, func(o *jetstream.Options) { o.MaxRecordBytes = 256<<10 + 1 }, []string{"max_msg_size"}},
		{"SubjectsDoNotCaptureNode", good, func(o *jetstream.Options) { o.Fleet = newFleet() }, []string{"subjects"}},
		{"R1AndShortDuplicateWindow", r1, func(o *jetstream.Options) {
			o.BackupMaxAge = 1000 * time.Hour // max_age 0 is unlimited: fine
		}, []string{"num_replicas", "duplicate_window"}},
		{"MaxPayloadBelowMaxRecordBytes", r1, func(o *jetstream.Options) {
			o.MaxRecordBytes = 2 << 20 // max_msg_size -1 is unlimited, the server's max_payload is 1 MiB
		}, []string{"num_replicas", "duplicate_window", "max_payload"}},
		{"VerifyTopicOffSkipsAll", r1, func(o *jetstream.Options) { o.VerifyTopic = false }, nil},
		{"InterestRetentionAndPerSubjectCap", interest, nil, []string{"num_replicas", "retention", "max_msgs_per_subject"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.f.open(t, "verify-node", tc.edit)
			before := tc.f.c.StreamInfo(t, tc.f.cfg.Name)
			ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
			defer cancel()
			err := in.Verify(ctx)
			after := tc.f.c.StreamInfo(t, tc.f.cfg.Name)
			if !reflect.DeepEqual(before.Config, after.Config) || !before.Created.Equal(after.Created) {
				t.Errorf("Verify changed the stream:\nbefore %+v\n after %+v", before.Config, after.Config)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, jetstream.ErrMisconfigured) {
				t.Fatalf("Verify = %v, want ErrMisconfigured", err)
			}
			for _, s := range settings {
				named := mentions(err.Error(), s)
				want := slices.Contains(tc.want, s)
				if named != want {
					t.Errorf("refusal names %s: %v, want %v: %v", s, named, want, err)
				}
			}
		})
	}

	t.Run("DescribeReportsReplicas", func(t *testing.T) {
		in := good.open(t, "describe-node", nil)
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		if err := in.Verify(ctx); err != nil {
			t.Fatalf("Verify: %v", err)
		}
		want := "JetStream stream " + good.cfg.Name + " subject " + in.Subject() + " (replicas=3)"
		if d := in.Describe(); d != want {
			t.Errorf("Describe = %q, want %q", d, want)
		}
	})
	t.Run("EarliestIsTheNodesFirstRecord", func(t *testing.T) {
		in := good.open(t, "earliest-node", nil)
		other := good.open(t, "earliest-other", nil)
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		if e, err := in.Earliest(ctx); err != nil || e != -1 {
			t.Fatalf("Earliest of a node with no record = %d, %v; want -1", e, err)
		}
		mustPublish(t, other, intaketest.NewRecord("earliest-other", 1))
		first := mustPublish(t, in, intaketest.NewRecord("earliest-node", 1))
		mustPublish(t, in, intaketest.NewRecord("earliest-node", 2))
		e, err := in.Earliest(ctx)
		if err != nil {
			t.Fatalf("Earliest: %v", err)
		}
		if e != first {
			t.Errorf("Earliest = %d, the node's first record is at %d (the stream's first sequence is %d)",
				e, first, good.c.StreamInfo(t, good.cfg.Name).State.FirstSeq)
		}
	})
}

// mentions reports whether text names setting as a whole word (so
// "max_msgs_per_subject" does not count as "subjects").
func mentions(text, setting string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], setting)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(setting)
		if (j == 0 || !isWord(text[j-1])) && (end == len(text) || !isWord(text[end])) {
			return true
		}
		i = end
	}
}

func isWord(b byte) bool { return b == '_' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }
