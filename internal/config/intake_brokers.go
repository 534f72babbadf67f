package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// IntakeKafka is intake.type: kafka — the adapter's own client, never a
// sink's. The topic is operator-owned and verified at boot.
type IntakeKafka struct {
	Brokers []string `yaml:"brokers" json:"brokers"` // required, host:port
	// Topic default: ankusa.intake.<fleet>.
	Topic string `yaml:"topic" json:"topic"`
	SASL  *SASL  `yaml:"sasl" json:"sasl,omitempty"`
	TLS   *TLS   `yaml:"tls" json:"tls,omitempty"`
}

// IntakeJetStream is intake.type: jetstream — an operator-owned R3 stream
// capturing ankusa.intake.<fleet>.>.
type IntakeJetStream struct {
	URL       string `yaml:"url" json:"url"`       // required, nats:// or tls://
	Stream    string `yaml:"stream" json:"stream"` // required
	User      string `yaml:"user" json:"user,omitempty"`
	Password  string `yaml:"password" json:"password,omitempty"`
	Token     string `yaml:"token" json:"token,omitempty"`
	CredsFile string `yaml:"creds_file" json:"creds_file,omitempty"`
	NKeyFile  string `yaml:"nkey_file" json:"nkey_file,omitempty"`
}

// IntakeTopic is the effective Kafka topic.
func (c *Config) IntakeTopic() string {
	if k := c.Intake.Kafka; k != nil && k.Topic != "" {
		return k.Topic
	}
	return "ankusa.intake." + c.Intake.Fleet
}

func (c *Config) validateIntakeBrokers(v *validator, dual bool) {
	in := c.Intake
	if in.Kafka != nil && in.Type != "kafka" {
		v.add("intake.kafka", "only allowed when intake.type is kafka (intake.type is %q)", in.Type)
	}
	if in.JetStream != nil && in.Type != "jetstream" {
		v.add("intake.jetstream", "only allowed when intake.type is jetstream (intake.type is %q)", in.Type)
	}
	switch in.Type {
	case "kafka":
		k := in.Kafka
		if k == nil {
			if dual {
				v.add("intake.kafka", "required when intake.type is kafka (brokers at least)")
			}
			return
		}
		if len(k.Brokers) == 0 {
			v.add("intake.kafka.brokers", "at least one broker (host:port) is required")
		}
		for i, b := range k.Brokers {
			host, port, err := net.SplitHostPort(b)
			p, perr := strconv.Atoi(port)
			if err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
				v.add(fmt.Sprintf("intake.kafka.brokers[%d]", i), "must be host:port, got %q", b)
			}
		}
		if k.Topic != "" && !kafkaTopicRE.MatchString(k.Topic) {
			v.add("intake.kafka.topic", "must match [a-zA-Z0-9._-]{1,249}")
		}
		if s := k.SASL; s != nil {
			v.oneOf("intake.kafka.sasl.mechanism", s.Mechanism, []string{"plain", "scram-sha-256", "scram-sha-512"}, nil, "")
			if s.Username == "" || s.Password == "" {
				v.add("intake.kafka.sasl", "username and password are both required")
			}
		}
		if t := k.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
			v.add("intake.kafka.tls", "cert_file and key_file go together")
		}
	case "jetstream":
		j := in.JetStream
		if j == nil {
			if dual {
				v.add("intake.jetstream", "required when intake.type is jetstream (url and stream)")
			}
			return
		}
		if j.URL == "" {
			v.add("intake.jetstream.url", "required, nats://host:port")
		} else {
			for _, u := range strings.Split(j.URL, ",") {
				pu, err := url.Parse(strings.TrimSpace(u))
				if err != nil || (pu.Scheme != "nats" && pu.Scheme != "tls") || pu.Host == "" {
					v.add("intake.jetstream.url", "must be nats://host:port or tls://host:port (comma-separated for a cluster)")
					break
				}
			}
		}
		if j.Stream == "" {
			v.add("intake.jetstream.stream", "required: the operator-owned stream capturing ankusa.intake.<fleet>.>")
		}
		auth := 0
		for _, set := range []bool{j.User != "" || j.Password != "", j.Token != "", j.CredsFile != "", j.NKeyFile != ""} {
			if set {
				auth++
			}
		}
		if auth > 1 {
			v.add("intake.jetstream", "at most one of user/password, token, creds_file, nkey_file")
		}
		if (j.User == "") != (j.Password == "") {
			v.add("intake.jetstream.user", "user and password go together")
		}
	}
}
