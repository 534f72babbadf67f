package app

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ankusa/ankusa/internal/config"
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
