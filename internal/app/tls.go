package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/ankusa/ankusa/internal/config"
)

// certReloader serves one listener's certificate pair and swaps it on
// Reload. Handshakes read the current pair through GetCertificate, so a
// reload takes effect at the next handshake and never drops a connection.
type certReloader struct {
	key      string // "http.tls" or "admin.tls", for errors
	certFile string
	keyFile  string
	cur      atomic.Pointer[tls.Certificate]
}

func newCertReloader(key string, t config.ListenerTLS) (*certReloader, error) {
	r := &certReloader{key: key, certFile: t.CertFile, keyFile: t.KeyFile}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the pair again. On any error the pair in use stays: a
// half-written rotation must not take the listener down. The error names
// the config key and the file, never key material.
func (r *certReloader) Reload() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return &config.Error{Key: r.key + ".cert_file", Rule: fmt.Sprintf("cannot load the pair %s / %s: %v", r.certFile, r.keyFile, err)}
	}
	r.cur.Store(&c)
	return nil
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load(), nil
}

// serverTLS is the tls.Config of a listener served by r. With a client CA
// file every client must show a certificate it signed.
func serverTLS(r *certReloader, clientCAFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.getCertificate}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, &config.Error{Key: "admin.tls.client_ca_file", Rule: fmt.Sprintf("cannot read: %v", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &config.Error{Key: "admin.tls.client_ca_file", Rule: "holds no PEM certificate"}
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// loadTLS reads both listeners' certificates; a nil config means the
// listener serves plain HTTP.
func (in *Instance) loadTLS() (ingest, admin *tls.Config, err error) {
	cfg := in.cfg
	if t := cfg.HTTP.TLS; t.Enabled() {
		r, err := newCertReloader("http.tls", t)
		if err != nil {
			return nil, nil, err
		}
		if ingest, err = serverTLS(r, ""); err != nil {
			return nil, nil, err
		}
		in.certs = append(in.certs, r)
	}
	if t := cfg.Admin.TLS; t.Listener().Enabled() {
		r, err := newCertReloader("admin.tls", t.Listener())
		if err != nil {
			return nil, nil, err
		}
		if admin, err = serverTLS(r, t.ClientCAFile); err != nil {
			return nil, nil, err
		}
		in.certs = append(in.certs, r)
	}
	return ingest, admin, nil
}

// ReloadTLS reads every listener's certificate pair again (the binary
// calls it on SIGHUP). A pair that fails to load keeps the one in use and
// is reported; the others are still reloaded.
func (in *Instance) ReloadTLS() error {
	var errs []error
	for _, r := range in.certs {
		if err := r.Reload(); err != nil {
			errs = append(errs, err)
			continue
		}
		in.log.Info("TLS certificate reloaded", "listener", r.key, "cert_file", r.certFile)
	}
	return errors.Join(errs...)
}
