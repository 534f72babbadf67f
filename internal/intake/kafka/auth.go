package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ankusa/ankusa/internal/config"
)

// The SASL and TLS helpers mirror the Kafka sink's (internal/sink/kafka,
// unexported there): the intake has a client of its own, built from the
// same config types, and must not depend on a sink package.

// saslOpt is the client option for c's mechanism.
func saslOpt(c *config.SASL) (kgo.Opt, error) {
	switch c.Mechanism {
	case "plain":
		return kgo.SASL(plain.Auth{User: c.Username, Pass: c.Password}.AsMechanism()), nil
	case "scram-sha-256":
		return kgo.SASL(scram.Auth{User: c.Username, Pass: c.Password}.AsSha256Mechanism()), nil
	case "scram-sha-512":
		return kgo.SASL(scram.Auth{User: c.Username, Pass: c.Password}.AsSha512Mechanism()), nil
	}
	return nil, fmt.Errorf("kafka intake: sasl mechanism %q: want plain, scram-sha-256 or scram-sha-512", c.Mechanism)
}

// tlsConfig builds the client TLS config from c: the system roots unless
// CAFile names others, a client certificate when CertFile and KeyFile are
// both set. kgo sets ServerName to each broker's host when dialing. Files
// are read once, here; a rotated certificate takes a restart.
func tlsConfig(c *config.TLS) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: c.InsecureSkipVerify, // only when the operator asks for it by name
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka intake tls: ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka intake tls: ca_file %s: no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case c.CertFile != "" && c.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka intake tls: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case c.CertFile != "" || c.KeyFile != "":
		return nil, errors.New("kafka intake tls: cert_file and key_file go together")
	}
	return tc, nil
}
