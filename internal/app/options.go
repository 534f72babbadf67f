package app

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	jsintake "github.com/ankusa/ankusa/internal/intake/jetstream"
	kafkaintake "github.com/ankusa/ankusa/internal/intake/kafka"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/kafkaclient"
	"github.com/ankusa/ankusa/internal/sink/httpsink"
	"github.com/ankusa/ankusa/internal/sink/kafka"
	natssink "github.com/ankusa/ankusa/internal/sink/nats"
	"github.com/ankusa/ankusa/internal/sink/rabbitmq"
)

// This file translates the validated config into each adapter's own
// Options: the adapters never import config (STYLE "Adapters taking
// config.* structs"), so a config key's name and unit (timeout_ms, a whsec_
// secret) stay config's business, and an adapter's tests build Options
// directly. Validation stays in config; the translation only converts.

// ms is a config millisecond count as a duration.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// httpSinkOptions decodes the signing secret with config's decoder, the
// one that validated it at boot; its error never holds the secret.
func httpSinkOptions(c *config.HTTPSink) (httpsink.Options, error) {
	key, err := c.SigningKey()
	if err != nil {
		return httpsink.Options{}, fmt.Errorf("http sink secret: %w", err)
	}
	return httpsink.Options{URL: c.URL, Timeout: ms(c.TimeoutMs), Headers: c.Headers, Secret: key}, nil
}

func kafkaSinkOptions(c *config.KafkaSink, log *slog.Logger) kafka.Options {
	return kafka.Options{Brokers: c.Brokers, Topic: c.Topic, Timeout: ms(c.TimeoutMs),
		SASL: kafkaSASL(c.SASL), TLS: kafkaTLS(c.TLS), DropHeaders: c.DropHeaders, Logger: log}
}

// natsSinkOptions: maxBody is http.max_body_bytes, which the sink checks
// against the server's max_payload.
func natsSinkOptions(c *config.NATSSink, maxBody int64, log *slog.Logger) natssink.Options {
	return natssink.Options{URL: c.URL, Subject: c.Subject, Timeout: ms(c.TimeoutMs),
		User: c.User, Password: c.Password, Token: c.Token, CredsFile: c.CredsFile, NKeyFile: c.NKeyFile,
		DropHeaders: c.DropHeaders, MaxBody: maxBody, Logger: log}
}

func rabbitMQSinkOptions(c *config.RabbitMQSink, log *slog.Logger) rabbitmq.Options {
	return rabbitmq.Options{URL: c.URL, Exchange: c.Exchange, RoutingKey: c.RoutingKey,
		Timeout: ms(c.TimeoutMs), DropHeaders: c.DropHeaders, Logger: log}
}

// kafkaSASL and kafkaTLS serve the Kafka sink and the Kafka intake alike;
// nil stays nil (none).
func kafkaSASL(c *config.SASL) *kafkaclient.SASL {
	if c == nil {
		return nil
	}
	return &kafkaclient.SASL{Mechanism: c.Mechanism, Username: c.Username, Password: c.Password}
}

func kafkaTLS(c *config.TLS) *kafkaclient.TLS {
	if c == nil {
		return nil
	}
	return &kafkaclient.TLS{Enabled: c.Enabled, CAFile: c.CAFile, CertFile: c.CertFile,
		KeyFile: c.KeyFile, InsecureSkipVerify: c.InsecureSkipVerify}
}

func memoryIntakeOptions(cfg *config.Config, log *slog.Logger) memory.Options {
	var latency time.Duration
	if m := cfg.Intake.Memory; m != nil {
		latency = ms(m.ConfirmLatencyMs)
	}
	// The log's record limit is intake.max_record_bytes, as for Kafka and
	// JetStream: what the queue admits, the log takes.
	return memory.Options{Dir: cfg.IntakeMemoryPath(), Node: cfg.Intake.NodeID, ConfirmLatency: latency,
		MaxRecordBytes: cfg.Intake.MaxRecordBytes, Logger: log}
}

// kafkaIntakeOptions opens the adapter unstamped (Partition -1): the
// stamped partition is set after the store is open (setPartition).
func kafkaIntakeOptions(cfg *config.Config, log *slog.Logger) kafkaintake.Options {
	k := cfg.Intake.Kafka
	return kafkaintake.Options{
		Brokers: k.Brokers, Topic: cfg.IntakeTopic(), Partition: -1,
		Node: cfg.Intake.NodeID, Fleet: cfg.Intake.Fleet, SASL: kafkaSASL(k.SASL), TLS: kafkaTLS(k.TLS),
		MaxRecordBytes: cfg.Intake.MaxRecordBytes, BackupMaxAge: backupMaxAge(cfg),
		VerifyTopic: verifyTopic(cfg), Logger: log,
	}
}

func jetstreamIntakeOptions(cfg *config.Config, log *slog.Logger) jsintake.Options {
	j := cfg.Intake.JetStream
	return jsintake.Options{
		URL: j.URL, Stream: j.Stream, Fleet: cfg.Intake.Fleet, Node: cfg.Intake.NodeID,
		User: j.User, Password: j.Password, Token: j.Token, CredsFile: j.CredsFile, NKeyFile: j.NKeyFile,
		MaxRecordBytes: cfg.Intake.MaxRecordBytes, BackupMaxAge: backupMaxAge(cfg),
		VerifyTopic: verifyTopic(cfg), Logger: log,
	}
}
