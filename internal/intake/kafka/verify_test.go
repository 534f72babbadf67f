package kafka_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/kafka"
)

// goodConfigs is a topic configuration Verify accepts for verifyOptions.
func goodConfigs() map[string]string {
	return map[string]string{
		"min.insync.replicas":            "2",
		"unclean.leader.election.enable": "false",
		"retention.ms":                   "604800000", // 7 d ≥ 2 × 1 d
		"max.message.bytes":              "10485760",
		"cleanup.policy":                 "delete",
	}
}

// verifyOptions: backups at most a day old, records up to 1 MiB.
func verifyOptions(c *kfake.Cluster, name string) kafka.Options {
	o := options(c, "node-a", 0)
	o.Topic = name
	o.BackupMaxAge = 24 * time.Hour
	o.MaxRecordBytes = 1 << 20
	return o
}

// answerDescribeConfigs makes the next DescribeConfigs request answer cfg
// for every topic it asks about. kfake cannot report
// unclean.leader.election.enable (it is not among the topic configs it
// knows), so a full, passing answer has to come from a control function.
func answerDescribeConfigs(c *kfake.Cluster, cfg map[string]string) {
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		return describeConfigs(kreq, cfg), nil, true
	})
}

// describeConfigs is the DescribeConfigs answer cfg for every topic kreq
// asks about.
func describeConfigs(kreq kmsg.Request, cfg map[string]string) kmsg.Response {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range req.Resources {
		r := kmsg.NewDescribeConfigsResponseResource()
		r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
		for k, v := range cfg {
			rc := kmsg.NewDescribeConfigsResponseResourceConfig()
			rc.Name, rc.Value = k, kmsg.StringPtr(v)
			rc.Source = kmsg.ConfigSourceDynamicTopicConfig
			r.Configs = append(r.Configs, rc)
		}
		resp.Resources = append(resp.Resources, r)
	}
	return resp
}

// wantRefused checks that err is Verify's refusal naming every string in
// names and none in absent.
func wantRefused(t *testing.T, err error, names, absent []string) {
	t.Helper()
	wantClass(t, err, intake.Permanent)
	if !errors.Is(err, kafka.ErrTopicRefused) {
		t.Fatalf("err = %v, want ErrTopicRefused", err)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("refusal %q does not name %q", err, n)
		}
	}
	for _, n := range absent {
		if strings.Contains(err.Error(), n) {
			t.Errorf("refusal %q names %q, which is fine", err, n)
		}
	}
}

// TestVerify_Rules answers DescribeConfigs with a control function (see
// answerDescribeConfigs) and takes the replication factor from kfake's own
// metadata: seeded topics have three replicas, "thin" is created with two.
func TestVerify_Rules(t *testing.T) {
	c := newCluster(t)
	if _, err := newAdmin(t, c).CreateTopic(ctxT(t), 3, 2, nil, "thin"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		topic  string
		edit   func(map[string]string)
		opts   func(*kafka.Options)
		refuse []string // nil: Verify passes
	}{
		{name: "all good", topic: topic},
		{name: "retention infinite", topic: topic, edit: func(m map[string]string) { m["retention.ms"] = "-1" }},
		{name: "retention exactly 2x", topic: topic, edit: func(m map[string]string) { m["retention.ms"] = "172800000" }},
		{name: "no backup age, no retention rule", topic: topic,
			edit: func(m map[string]string) { m["retention.ms"] = "1000" }, opts: func(o *kafka.Options) { o.BackupMaxAge = 0 }},
		{name: "no record cap, no max.message.bytes rule", topic: topic,
			edit: func(m map[string]string) { m["max.message.bytes"] = "1000" }, opts: func(o *kafka.Options) { o.MaxRecordBytes = 0 }},
		{name: "max.message.bytes equal", topic: topic, edit: func(m map[string]string) { m["max.message.bytes"] = "1048576" }},

		{name: "replication below 3", topic: "thin",
			refuse: []string{"replication factor is 2", "at least 3"}},
		{name: "min.insync.replicas below 2", topic: topic, edit: func(m map[string]string) { m["min.insync.replicas"] = "1" },
			refuse: []string{"min.insync.replicas is 1", "at least 2"}},
		{name: "min.insync.replicas above replication", topic: topic, edit: func(m map[string]string) { m["min.insync.replicas"] = "4" },
			refuse: []string{"min.insync.replicas is 4", "at most the replication factor 3"}},
		{name: "min.insync.replicas missing", topic: topic, edit: func(m map[string]string) { delete(m, "min.insync.replicas") },
			refuse: []string{"min.insync.replicas is not reported"}},
		{name: "unclean election on", topic: topic, edit: func(m map[string]string) { m["unclean.leader.election.enable"] = "true" },
			refuse: []string{"unclean.leader.election.enable is true", "must be false"}},
		{name: "unclean election not reported", topic: topic, edit: func(m map[string]string) { delete(m, "unclean.leader.election.enable") },
			refuse: []string{"unclean.leader.election.enable is not reported"}},
		{name: "retention below 2x backup age", topic: topic, edit: func(m map[string]string) { m["retention.ms"] = "172799999" },
			refuse: []string{"retention.ms is 172799999", "2 × backup max age", "172800000"}},
		{name: "retention not a number", topic: topic, edit: func(m map[string]string) { m["retention.ms"] = "forever" },
			refuse: []string{`retention.ms is "forever"`}},
		{name: "max.message.bytes below max record bytes", topic: topic, edit: func(m map[string]string) { m["max.message.bytes"] = "1048575" },
			refuse: []string{"max.message.bytes is 1048575", "intake.max_record_bytes (1048576)"}},
		{name: "compacted", topic: topic, edit: func(m map[string]string) { m["cleanup.policy"] = "compact,delete" },
			refuse: []string{"cleanup.policy is compact,delete", "must be delete"}},
		{name: "stamped partition missing", topic: topic, opts: func(o *kafka.Options) { o.Partition = 7 },
			refuse: []string{"partition 7", "3 partitions"}},
		{name: "every refusal listed", topic: "thin", edit: func(m map[string]string) {
			m["min.insync.replicas"] = "1"
			m["retention.ms"] = "1"
		}, refuse: []string{"replication factor is 2", "min.insync.replicas is 1", "retention.ms is 1,"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := verifyOptions(c, tc.topic)
			if tc.opts != nil {
				tc.opts(&o)
			}
			in := openWith(t, o)
			cfg := goodConfigs()
			if tc.edit != nil {
				tc.edit(cfg)
			}
			answerDescribeConfigs(c, cfg)
			err := in.Verify(ctxT(t))
			if tc.refuse == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if got, want := in.Describe(), "Kafka topic "+tc.topic+" partition 0 (acks=all, min.insync.replicas=2, replicas=3)"; got != want {
					t.Errorf("Describe() = %q, want %q", got, want)
				}
				return
			}
			var others []string
			for _, s := range []string{"replication factor", "min.insync.replicas", "unclean.leader.election.enable", "cleanup.policy", "retention.ms", "max.message.bytes", "partition 7"} {
				named := false
				for _, r := range tc.refuse {
					named = named || strings.Contains(r, s)
				}
				if !named {
					others = append(others, s)
				}
			}
			wantRefused(t, err, tc.refuse, others)
			if strings.Contains(in.Describe(), "min.insync.replicas=") {
				t.Errorf("Describe() = %q after a refused Verify, want UNVERIFIED", in.Describe())
			}
		})
	}
}

// TestVerify_KfakeSettings runs Verify against what kfake itself reports
// (topic configs set at creation, no control function). kfake never reports
// unclean.leader.election.enable, so that refusal is always present here;
// the point is that each other setting is read from the broker and refused
// by name.
func TestVerify_KfakeSettings(t *testing.T) {
	c := newCluster(t)
	adm := newAdmin(t, c)
	create := func(name string, replicas int16, cfg map[string]string) {
		t.Helper()
		m := map[string]*string{}
		for k, v := range cfg {
			m[k] = &v
		}
		if _, err := adm.CreateTopic(ctxT(t), 3, replicas, m, name); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	good := map[string]string{"min.insync.replicas": "2", "retention.ms": "604800000", "max.message.bytes": "2097152"}
	create("good", 3, good)
	create("thin", 2, good)
	create("isr1", 3, map[string]string{"min.insync.replicas": "1", "retention.ms": "604800000", "max.message.bytes": "2097152"})
	create("short", 3, map[string]string{"min.insync.replicas": "2", "retention.ms": "3600000", "max.message.bytes": "2097152"})
	create("small", 3, map[string]string{"min.insync.replicas": "2", "retention.ms": "604800000", "max.message.bytes": "1000"})
	create("compacted", 3, map[string]string{"min.insync.replicas": "2", "retention.ms": "604800000", "max.message.bytes": "2097152", "cleanup.policy": "compact"})

	all := []string{"replication factor", "min.insync.replicas", "cleanup.policy", "retention.ms", "max.message.bytes"}
	without := func(s string) []string {
		var out []string
		for _, a := range all {
			if a != s {
				out = append(out, a)
			}
		}
		return out
	}
	const unclean = "unclean.leader.election.enable is not reported"
	for _, tc := range []struct {
		topic string
		names []string
		other []string
	}{
		{"good", []string{unclean}, all},
		{topic, []string{unclean, "min.insync.replicas is 1"}, without("min.insync.replicas")}, // seeded: kfake's default 1
		{"thin", []string{unclean, "replication factor is 2"}, without("replication factor")},
		{"isr1", []string{unclean, "min.insync.replicas is 1"}, without("min.insync.replicas")},
		{"short", []string{unclean, "retention.ms is 3600000"}, without("retention.ms")},
		{"small", []string{unclean, "max.message.bytes is 1000"}, without("max.message.bytes")},
		{"compacted", []string{unclean, "cleanup.policy is compact"}, without("cleanup.policy")},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			in := openWith(t, verifyOptions(c, tc.topic))
			wantRefused(t, in.Verify(ctxT(t)), tc.names, tc.other)
		})
	}
}

// TestVerify_Unverifiable: a broker or ACL that refuses DescribeConfigs
// leaves the topic unverified (classified), not refused, and Describe no
// longer reports what an earlier Verify read.
func TestVerify_Unverifiable(t *testing.T) {
	c := newCluster(t)
	in := openWith(t, verifyOptions(c, topic))
	answerDescribeConfigs(c, goodConfigs())
	if err := in.Verify(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(in.Describe(), "min.insync.replicas=2, replicas=3") {
		t.Fatalf("Describe() = %q after a passing Verify", in.Describe())
	}
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: topic, Err: kerr.TopicAuthorizationFailed})
	defer h.Remove()
	err := in.Verify(ctxT(t))
	wantClass(t, err, intake.Permanent)
	if errors.Is(err, kafka.ErrTopicRefused) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("err = %v, want TOPIC_AUTHORIZATION_FAILED and not a refusal", err)
	}
	if !strings.Contains(in.Describe(), "UNVERIFIED") {
		t.Errorf("Describe() = %q, want UNVERIFIED", in.Describe())
	}
}

// TestVerify_Disabled: VerifyTopic false checks nothing (kfake's seeded
// topic would be refused) and Describe says UNVERIFIED.
func TestVerify_Disabled(t *testing.T) {
	c := newCluster(t)
	o := verifyOptions(c, topic)
	o.VerifyTopic = false
	in := openWith(t, o)
	if err := in.Verify(ctxT(t)); err != nil {
		t.Fatalf("Verify with VerifyTopic false: %v", err)
	}
	if got, want := in.Describe(), "Kafka topic "+topic+" partition 0 (acks=all, settings UNVERIFIED)"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	unstamped := open(t, c, "node-b", -1)
	if got := unstamped.Describe(); !strings.Contains(got, "partition unassigned") {
		t.Errorf("Describe() = %q, want the partition unassigned", got)
	}
}
