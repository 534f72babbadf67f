// Package kafkaclient holds what the Kafka sink (internal/sink/kafka) and the
// Kafka intake (internal/intake/kafka) build their franz-go clients from:
// the SASL and TLS options, the logger adapter and the classification of
// broker errors (classify.go). Each adapter has a client of its own, built
// from the same option types; sharing this package keeps the intake from
// depending on a sink package. Like the two adapters, it may import
// franz-go; nothing else in the tree does. It takes its own option types,
// never config's: app translates (app/options.go).
package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL is a client's SASL credentials.
type SASL struct {
	// Mechanism is plain, scram-sha-256 or scram-sha-512.
	Mechanism string
	Username  string
	Password  string
}

// TLS is a client's TLS settings. The files and InsecureSkipVerify are
// ignored unless Enabled.
type TLS struct {
	Enabled bool
	// CAFile names PEM roots to trust instead of the system's.
	CAFile string
	// CertFile and KeyFile, both or neither, are the client certificate.
	CertFile string
	KeyFile  string
	// InsecureSkipVerify turns off the server certificate check; only when
	// an operator asks for it by name.
	InsecureSkipVerify bool
}

// AuthOpts returns the client options for the SASL settings s (none when
// nil) and the TLS settings t (none when nil or not enabled). who names the
// client in errors ("kafka sink", "kafka intake"). It fails on settings it
// cannot use: an unknown mechanism, an unreadable or non-PEM CA file, an
// unloadable client certificate, or only one of CertFile and KeyFile; the
// error never holds a password.
func AuthOpts(who string, s *SASL, t *TLS) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if s != nil {
		o, err := saslOpt(who, s)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	}
	if t != nil && t.Enabled {
		tc, err := tlsConfig(who, t)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}

// saslOpt is the client option for c's mechanism.
func saslOpt(who string, c *SASL) (kgo.Opt, error) {
	switch c.Mechanism {
	case "plain":
		return kgo.SASL(plain.Auth{User: c.Username, Pass: c.Password}.AsMechanism()), nil
	case "scram-sha-256":
		return kgo.SASL(scram.Auth{User: c.Username, Pass: c.Password}.AsSha256Mechanism()), nil
	case "scram-sha-512":
		return kgo.SASL(scram.Auth{User: c.Username, Pass: c.Password}.AsSha512Mechanism()), nil
	}
	return nil, fmt.Errorf("%s: sasl mechanism %q: want plain, scram-sha-256 or scram-sha-512", who, c.Mechanism)
}

// tlsConfig builds the client TLS config from c: the system roots unless
// CAFile names others, a client certificate when CertFile and KeyFile are
// both set. kgo sets ServerName to each broker's host when dialing. Files
// are read once, here; a rotated certificate takes a restart.
func tlsConfig(who string, c *TLS) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: c.InsecureSkipVerify, // only when the operator asks for it by name
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s tls: ca_file: %w", who, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s tls: ca_file %s: no PEM certificate", who, c.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case c.CertFile != "" && c.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s tls: client certificate: %w", who, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case c.CertFile != "" || c.KeyFile != "":
		return nil, errors.New(who + " tls: cert_file and key_file go together")
	}
	return tc, nil
}
