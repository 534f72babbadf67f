package deploy_test

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
)

// unitFile parses a systemd unit into section -> key -> values (a key may
// repeat).
func unitFile(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "["):
			section = strings.Trim(l, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" {
				t.Fatalf("%s: cannot parse %q", path, l)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// TestDeploy_SystemdUnitAgreesWithTheBinary checks what the unit promises
// against the code: the binary notifies (Type=notify; the release binary
// test sees READY=1), the stop timeout outlasts the drain, a config error
// is not restarted into, and the one writable path is the data directory.
// systemd-analyze verify (scripts/test.sh) checks the syntax.
func TestDeploy_SystemdUnitAgreesWithTheBinary(t *testing.T) {
	u := unitFile(t, filepath.Join(repoRoot(t), "deploy/systemd/ankusa.service"))
	svc := u["Service"]
	one := func(k string) string {
		t.Helper()
		if len(svc[k]) != 1 {
			t.Fatalf("[Service] %s = %q, want one value", k, svc[k])
		}
		return svc[k][0]
	}
	if got := one("Type"); got != "notify" {
		t.Errorf("Type=%s, want notify (the binary sends READY=1)", got)
	}
	if got := one("Restart"); got != "on-failure" {
		t.Errorf("Restart=%s, want on-failure", got)
	}
	stop, err := strconv.Atoi(one("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec=%s: want whole seconds", one("TimeoutStopSec"))
	}
	// The unit does not know the file: it is sized for the default.
	if drain := defaultDrain(); time.Duration(stop)*time.Second <= drain {
		t.Errorf("TimeoutStopSec=%d does not outlast the default drain (http.shutdown_timeout_ms, %v): systemd would SIGKILL a clean stop", stop, drain)
	}
	if !slices.Contains(strings.Fields(one("RestartPreventExitStatus")), strconv.Itoa(config.ExitConfig)) {
		t.Errorf("RestartPreventExitStatus=%s: must include %d (a bad config is not restarted)", one("RestartPreventExitStatus"), config.ExitConfig)
	}
	var dataDir string
	for _, e := range svc["Environment"] {
		if v, ok := strings.CutPrefix(e, "ANKUSA_DATA_DIR="); ok {
			dataDir = v
		}
	}
	if dataDir == "" {
		t.Fatal("the unit does not set ANKUSA_DATA_DIR")
	}
	if one("ProtectSystem") != "strict" {
		t.Errorf("ProtectSystem=%s, want strict", one("ProtectSystem"))
	}
	if !slices.Contains(strings.Fields(one("ReadWritePaths")), dataDir) {
		t.Errorf("ReadWritePaths=%s does not include the data directory %s: the store could not be written", one("ReadWritePaths"), dataDir)
	}
	if one("StateDirectory") != strings.TrimPrefix(dataDir, "/var/lib/") {
		t.Errorf("StateDirectory=%s does not create %s", one("StateDirectory"), dataDir)
	}
}

// defaultDrain is http.shutdown_timeout_ms at its default: how long a
// clean stop may take before the binary cuts what is left.
func defaultDrain() time.Duration {
	return time.Duration(config.Default().HTTP.ShutdownTimeoutMs) * time.Millisecond
}
