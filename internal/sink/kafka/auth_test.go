package kafka_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankusa/ankusa/internal/kafkaclient"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/kafka"
)

func TestNew_Config(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  kafka.Options
		want string
	}{
		{"no brokers", kafka.Options{Topic: "t"}, "no brokers"},
		{"no topic", kafka.Options{Brokers: []string{"localhost:9092"}}, "no topic"},
		{"sasl mechanism", kafka.Options{Brokers: []string{"localhost:9092"}, Topic: "t",
			SASL: &kafkaclient.SASL{Mechanism: "gssapi"}}, `"gssapi"`},
		{"missing ca", kafka.Options{Brokers: []string{"localhost:9092"}, Topic: "t",
			TLS: &kafkaclient.TLS{Enabled: true, CAFile: filepath.Join(dir, "absent.pem")}}, "ca_file"},
		{"ca not pem", kafka.Options{Brokers: []string{"localhost:9092"}, Topic: "t",
			TLS: &kafkaclient.TLS{Enabled: true, CAFile: notPEM}}, "no PEM certificate"},
		{"cert without key", kafka.Options{Brokers: []string{"localhost:9092"}, Topic: "t",
			TLS: &kafkaclient.TLS{Enabled: true, CertFile: notPEM}}, "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := kafka.New(withLogger(t, tc.cfg))
			if err == nil {
				s.Close()
				t.Fatal("New accepted the config")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %s", err, tc.want)
			}
		})
	}
}

func saslCluster(t *testing.T) *kfake.Cluster {
	return newCluster(t,
		kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "scram256-user", "scram256-pass"),
		kfake.Superuser("SCRAM-SHA-512", "scram512-user", "scram512-pass"),
	)
}

var mechanisms = []struct{ mechanism, user, pass string }{
	{"plain", "plain-user", "plain-pass"},
	{"scram-sha-256", "scram256-user", "scram256-pass"},
	{"scram-sha-512", "scram512-user", "scram512-pass"},
}

func TestDeliver_SASL(t *testing.T) {
	c := saslCluster(t)
	for _, m := range mechanisms {
		t.Run(m.mechanism, func(t *testing.T) {
			cfg := sinkConfig(c)
			cfg.SASL = &kafkaclient.SASL{Mechanism: m.mechanism, Username: m.user, Password: m.pass}
			if err := deliver(t, newSink(t, cfg), message()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDeliver_SASLFailure(t *testing.T) {
	// A real broker answers a bad password with SASL_AUTHENTICATION_FAILED:
	// a retry cannot fix that.
	for _, m := range mechanisms {
		t.Run(m.mechanism, func(t *testing.T) {
			c := saslCluster(t)
			c.ControlKey(int16(kmsg.SASLAuthenticate), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				resp := kreq.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
				resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
				msg := "Authentication failed: Invalid username or password"
				resp.ErrorMessage = &msg
				return resp, nil, true
			})
			cfg := sinkConfig(c)
			cfg.SASL = &kafkaclient.SASL{Mechanism: m.mechanism, Username: m.user, Password: "wrong"}
			err := deliver(t, newSink(t, cfg), message())
			if perm, _ := sink.Classify(err); !perm || !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Errorf("err = %v, want permanent SASL_AUTHENTICATION_FAILED", err)
			}
		})
	}
	// kfake itself just closes the connection on a bad password, which
	// reads as a network error: transient, and not a hang.
	t.Run("hung up", func(t *testing.T) {
		c := saslCluster(t)
		cfg := sinkConfig(c)
		cfg.SASL = &kafkaclient.SASL{Mechanism: "scram-sha-256", Username: "scram256-user", Password: "wrong"}
		err := deliver(t, newSink(t, cfg), message())
		if err == nil {
			t.Fatal("Deliver succeeded with a wrong password")
		}
		if perm, _ := sink.Classify(err); perm {
			t.Errorf("Classify(%v) = permanent, want transient", err)
		}
	})
}

func TestDeliver_TLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "test ca")
	srv, srvKey := newCert(t, ca, caKey, "broker")
	cli, cliKey := newCert(t, ca, caKey, "ankusa")
	caFile := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	certFile := writePEM(t, dir, "client.pem", "CERTIFICATE", cli.Raw)
	keyDER, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writePEM(t, dir, "client.key", "EC PRIVATE KEY", keyDER)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c := newCluster(t, kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srv.Raw}, PrivateKey: srvKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}))

	for _, tc := range []struct {
		name string
		tls  kafkaclient.TLS
	}{
		{"ca and client cert", kafkaclient.TLS{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}},
		{"insecure skip verify", kafkaclient.TLS{Enabled: true, InsecureSkipVerify: true, CertFile: certFile, KeyFile: keyFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sinkConfig(c)
			cfg.TLS = &tc.tls
			if err := deliver(t, newSink(t, cfg), message()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// newCert issues a P-256 certificate for 127.0.0.1, self-signed (a CA) when
// parent is nil.
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
