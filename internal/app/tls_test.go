package app

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

type tlsFiles struct {
	ingestCert, ingestKey, adminCert, adminKey, clientCA string
}

func startTLSForTest(t *testing.T, ca *testutil.CA, mutual bool) (*Instance, tlsFiles) {
	t.Helper()
	dir := t.TempDir()
	f := tlsFiles{
		ingestCert: filepath.Join(dir, "ingest.crt"), ingestKey: filepath.Join(dir, "ingest.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		clientCA: filepath.Join(dir, "clients.pem"),
	}
	ca.Issue(t, "ingest-1", false, f.ingestCert, f.ingestKey)
	ca.Issue(t, "admin-1", false, f.adminCert, f.adminKey)
	cfg := config.Default()
	cfg.Node.DataDir = t.TempDir()
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	cfg.HTTP.TLS = config.ListenerTLS{CertFile: f.ingestCert, KeyFile: f.ingestKey}
	cfg.Admin.TLS = config.AdminTLS{CertFile: f.adminCert, KeyFile: f.adminKey}
	if mutual {
		ca.WriteCA(t, f.clientCA)
		cfg.Admin.TLS.ClientCAFile = f.clientCA
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	in := startForTest(t, cfg)
	return in, f
}

func servedCN(t *testing.T, addr string, ca *testutil.CA, client *tls.Certificate) string {
	t.Helper()
	c, err := testutil.ServedCert(addr, ca.Pool(), client)
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	return c.Subject.CommonName
}

// Both listeners serve TLS; a rotation of the files followed by the reload
// the SIGHUP handler calls is served from the next handshake on; a broken
// rotation keeps the pair in use.
func TestTLSListenersAndReload(t *testing.T) {
	ca := testutil.NewCA(t)
	in, f := startTLSForTest(t, ca, false)

	if cn := servedCN(t, in.IngestAddr(), ca, nil); cn != "ingest-1" {
		t.Fatalf("ingest serves %q, want ingest-1", cn)
	}
	if cn := servedCN(t, in.AdminAddr(), ca, nil); cn != "admin-1" {
		t.Fatalf("admin serves %q, want admin-1", cn)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Post("https://"+in.IngestAddr()+"/webhooks/demo", "application/json", strings.NewReader(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST over TLS = %d", resp.StatusCode)
	}

	ca.Issue(t, "ingest-2", false, f.ingestCert, f.ingestKey)
	ca.Issue(t, "admin-2", false, f.adminCert, f.adminKey)
	if cn := servedCN(t, in.IngestAddr(), ca, nil); cn != "ingest-1" {
		t.Fatalf("before the reload ingest serves %q, want the old ingest-1", cn)
	}
	if err := in.ReloadTLS(); err != nil {
		t.Fatalf("ReloadTLS: %v", err)
	}
	if cn := servedCN(t, in.IngestAddr(), ca, nil); cn != "ingest-2" {
		t.Fatalf("after the reload ingest serves %q, want ingest-2", cn)
	}
	if cn := servedCN(t, in.AdminAddr(), ca, nil); cn != "admin-2" {
		t.Fatalf("after the reload admin serves %q, want admin-2", cn)
	}

	// A key that does not match its certificate: the reload fails naming
	// the key, and the pair in use stays.
	other := t.TempDir()
	ca.Issue(t, "stray", false, filepath.Join(other, "c"), filepath.Join(other, "k"))
	key, _ := os.ReadFile(filepath.Join(other, "k"))
	if err := os.WriteFile(f.ingestKey, key, 0o600); err != nil {
		t.Fatal(err)
	}
	err = in.ReloadTLS()
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "http.tls.cert_file" {
		t.Fatalf("broken rotation: err = %v, want a config.Error on http.tls.cert_file", err)
	}
	if strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Fatalf("error shows key material: %v", err)
	}
	if cn := servedCN(t, in.IngestAddr(), ca, nil); cn != "ingest-2" {
		t.Fatalf("after a broken rotation ingest serves %q, want ingest-2 kept", cn)
	}
}

// With admin.tls.client_ca_file the operator API refuses a client without
// a certificate from that CA, and serves one with it.
func TestAdminClientCertificates(t *testing.T) {
	ca := testutil.NewCA(t)
	in, _ := startTLSForTest(t, ca, true)
	url := "https://" + in.AdminAddr() + "/health"
	get := func(cert *tls.Certificate) (int, error) {
		tc := &tls.Config{RootCAs: ca.Pool()}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 5 * time.Second}
		defer c.CloseIdleConnections()
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(nil); err == nil {
		t.Fatalf("no client certificate: answered %d, want the handshake refused", code)
	}
	stranger := testutil.NewCA(t).ClientCert(t, "mallory")
	if code, err := get(&stranger); err == nil {
		t.Fatalf("certificate of another CA: answered %d, want refused", code)
	}
	good := ca.ClientCert(t, "ops-laptop")
	if code, err := get(&good); err != nil || code != http.StatusOK {
		t.Fatalf("trusted client certificate: %d, %v", code, err)
	}

	// The certificate's subject is in the audit row of a mutating call.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{good}}}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodDelete, "https://"+in.AdminAddr()+"/v1/quarantine?all=true", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("purge over mutual TLS = %d", resp.StatusCode)
	}
	resp, err = c.Get("https://" + in.AdminAddr() + "/v1/audit")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var audit struct {
		Entries []struct {
			Detail map[string]any `json:"detail"`
		} `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&audit); err != nil {
		t.Fatal(err)
	}
	if len(audit.Entries) != 1 || audit.Entries[0].Detail["client_cert"] != "CN=ops-laptop" {
		t.Fatalf("audit = %+v, want one row naming CN=ops-laptop", audit.Entries)
	}
}

// A certificate file that cannot be read is a config error naming the
// key, found before the store is opened.
func TestTLSBadFileIsAConfigError(t *testing.T) {
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.HTTP.TLS = config.ListenerTLS{CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}
	_, err := New(cfg, Options{Logger: testutil.Logger(t)})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "http.tls.cert_file" {
		t.Fatalf("New = %v, want a config.Error on http.tls.cert_file", err)
	}
	if _, err := os.Stat(cfg.Node.DataDir); !os.IsNotExist(err) {
		t.Fatalf("data dir touched by a config that failed: %v", err)
	}
}
