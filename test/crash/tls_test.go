package crash

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/testutil"
)

// TestServe_SIGHUPReloadsCertificates: the real binary serves both
// listeners over TLS; after the files are rotated, a real SIGHUP makes the
// next handshake show the new certificate, and the process keeps running.
func TestServe_SIGHUPReloadsCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t)
	ic, ik := filepath.Join(dir, "ingest.crt"), filepath.Join(dir, "ingest.key")
	ac, ak := filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	ca.Issue(t, "ingest-1", false, ic, ik)
	ca.Issue(t, "admin-1", false, ac, ak)
	httpPort, adminPort := freePort(t), freePort(t)
	cfgPath := filepath.Join(dir, "ankusa.yml")
	yml := fmt.Sprintf(`node: {instance: tls-drill, data_dir: %q}
http: {ip: 127.0.0.1, port: %d, tls: {cert_file: %q, key_file: %q}}
admin: {ip: 127.0.0.1, port: %d, tls: {cert_file: %q, key_file: %q}}
sources:
  demo:
    verify: {type: none}
    sinks: [{id: log, type: log}]
`, filepath.Join(dir, "data"), httpPort, ic, ik, adminPort, ac, ak)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "node.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(binPath, "serve", "--config", cfgPath)
	testutil.DiesWithTest(cmd)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, childEnv(), logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	ingest, admin := "127.0.0.1:"+strconv.Itoa(httpPort), "127.0.0.1:"+strconv.Itoa(adminPort)
	cn := func(addr string) string {
		c, err := testutil.ServedCert(addr, ca.Pool(), nil)
		if err != nil {
			return "error: " + err.Error()
		}
		return c.Subject.CommonName
	}
	alive := func() {
		select {
		case err := <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("ankusa exited (%v):\n%s", err, b)
		default:
		}
	}
	testutil.Eventually(t, 20*time.Second, "both listeners serving TLS", func() bool {
		alive()
		return cn(ingest) == "ingest-1" && cn(admin) == "admin-1"
	})

	ca.Issue(t, "ingest-2", false, ic, ik)
	ca.Issue(t, "admin-2", false, ac, ak)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The signal is handled asynchronously: poll the handshake.
	testutil.Eventually(t, 10*time.Second, "the rotated certificates served after SIGHUP", func() bool {
		alive()
		return cn(ingest) == "ingest-2" && cn(admin) == "admin-2"
	})
	alive()
}
