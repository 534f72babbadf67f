package deploy_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

// dockerfile is the Dockerfile split into stages, each a list of
// instructions (continuation lines joined, comments dropped).
type stage struct {
	from  string
	instr []string // "RUN make build …", "USER 65532:65532", …
}

func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		if strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			stages = append(stages, stage{from: line})
			return
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, line)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		flush()
	}
	return stages
}

func (s stage) find(prefix string) []string {
	var out []string
	for _, in := range s.instr {
		if strings.HasPrefix(strings.ToUpper(in), prefix+" ") {
			out = append(out, strings.TrimSpace(in[len(prefix):]))
		}
	}
	return out
}

// TestDeploy_Dockerfile checks what the issue asks of the image and that
// its build stage runs `make build`, the Makefile's one release build.
// No Docker engine runs here: the binary that target makes is tested
// below (TestDeploy_ReleaseBinary) instead of the image.
func TestDeploy_Dockerfile(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join(repoRoot(t), "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage Dockerfile, got %d stages", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	var makeRun string
	for _, r := range build.find("RUN") {
		if strings.Contains(r, "go build") {
			t.Errorf("build stage runs go build itself (%q): it must call make build, the single source of the build command", r)
		}
		if strings.HasPrefix(r, "make build") {
			makeRun = r
		}
	}
	if makeRun == "" {
		t.Fatalf("build stage has no `RUN make build …`: %q", build.instr)
	}
	for _, arg := range []string{"VERSION=${VERSION}", "COMMIT=${COMMIT}"} {
		if !strings.Contains(makeRun, arg) {
			t.Errorf("RUN %s: does not pass %s (the image would say dev/unknown)", makeRun, arg)
		}
	}

	// The build image's Go is the one go.mod names, so the build does not
	// fetch another toolchain (GOTOOLCHAIN=auto) or build with an older one.
	gomod, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	dockerGo := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)$`).FindSubmatch(readDockerfile(t))
	if goLine == nil || dockerGo == nil || string(goLine[1]) != string(dockerGo[1]) {
		t.Errorf("Dockerfile ARG GO_VERSION %q, go.mod go %q: want them equal", dockerGo, goLine)
	}

	if !regexp.MustCompile(`(?i)^FROM (gcr\.io/distroless/static\S*|scratch)( |$)`).MatchString(final.from) {
		t.Errorf("final stage %q: want distroless/static or scratch", final.from)
	}
	users := final.find("USER")
	if len(users) == 0 {
		t.Error("final stage has no USER: it would run as root")
	}
	for _, u := range users {
		if name, _, _ := strings.Cut(u, ":"); name == "0" || name == "root" {
			t.Errorf("USER %s: must not be root", u)
		}
	}
	if v := strings.Join(final.find("VOLUME"), " "); !strings.Contains(v, "/data") {
		t.Errorf("VOLUME %q: want /data", v)
	}
	if got := strings.Fields(strings.Join(final.find("EXPOSE"), " ")); strings.Join(got, " ") != "4000 4002" {
		t.Errorf("EXPOSE %v, want 4000 4002", got)
	}
	for _, s := range stages {
		if len(s.find("HEALTHCHECK")) > 0 {
			t.Error("the Dockerfile has a HEALTHCHECK: Kubernetes probes /ready and /health")
		}
	}
	if env := strings.Join(final.find("ENV"), " "); !strings.Contains(env, "ANKUSA_DATA_DIR=/data") {
		t.Errorf("ENV %q: the store must default to the /data volume", env)
	}

	// The Makefile's build is static and stamped.
	out, err := exec.Command("make", "-s", "-n", "-C", repoRoot(t), "build", "VERSION=v9.9.9-x", "COMMIT=c0ffee", "OUT=/tmp/x").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	cmd := string(out)
	for _, want := range []string{"CGO_ENABLED=0", "go build", "-X main.version=v9.9.9-x", "-X main.commit=c0ffee", "-o /tmp/x", "./cmd/ankusa"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("make build runs %q: missing %q", strings.TrimSpace(cmd), want)
		}
	}
}

func readDockerfile(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buildRelease runs `make build` (what the Dockerfile runs) into a temp dir.
func buildRelease(t *testing.T, version, commit string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ankusa")
	cmd := exec.Command("make", "-s", "-C", repoRoot(t), "build", "VERSION="+version, "COMMIT="+commit, "OUT="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	return bin
}

// TestDeploy_ReleaseBinary builds the binary the image ships and runs it
// as a supervisor would: static (nothing for distroless to provide), its
// build info in `version` and /health, `config check` exiting 0 or 78,
// READY=1 on $NOTIFY_SOCKET once serving, and a clean exit on SIGTERM
// within the drain.
func TestDeploy_ReleaseBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release binary; not in -short")
	}
	const version, commit = "v9.9.9-deploytest", "c0ffee123456"
	bin := buildRelease(t, version, commit)

	t.Run("static", func(t *testing.T) {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Fatal("the binary has a dynamic loader (PT_INTERP): distroless/static cannot run it")
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Fatalf("the binary links %v", libs)
		}
	})

	t.Run("version", func(t *testing.T) {
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatal(err)
		}
		if s := string(out); !strings.Contains(s, version) || !strings.Contains(s, commit) {
			t.Fatalf("ankusa version = %q, want %s and %s", s, version, commit)
		}
	})

	dir := t.TempDir()
	good := filepath.Join(dir, "good.yml")
	writeFile(t, good, `
node: {instance: deploy-bin, data_dir: `+filepath.Join(dir, "data")+`}
http: {ip: 127.0.0.1, port: 0}
admin: {ip: 127.0.0.1, port: 0}
sources:
  orders:
    verify: {type: github, secret: "${ORDERS_SECRET}"}
    sinks:
      - {type: http, http: {url: "http://127.0.0.1:9/hooks"}}
`)
	const secret = "deploy-test-secret-value-77"

	t.Run("config check", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			env  []string
			code int
		}{
			{"valid", []string{"ORDERS_SECRET=" + secret}, 0},
			{"secret unset", nil, config.ExitConfig},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cmd := exec.Command(bin, "config", "check", "--config", good)
				cmd.Env = append(childEnv(), tc.env...)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				if code != tc.code {
					t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
				}
				if strings.Contains(stdout.String()+stderr.String(), secret) {
					t.Fatal("config check printed the secret")
				}
				if code == 0 && !json.Valid(stdout.Bytes()) {
					t.Fatalf("stdout is not the effective config as JSON: %s", stdout.String())
				}
				if code != 0 && !strings.Contains(stderr.String(), "ORDERS_SECRET") {
					t.Fatalf("stderr does not name the missing variable: %s", stderr.String())
				}
			})
		}
	})

	t.Run("serve under a notify socket", func(t *testing.T) {
		sockPath := filepath.Join(t.TempDir(), "notify.sock")
		sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer sock.Close()
		logPath := filepath.Join(t.TempDir(), "serve.log")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.Command(bin, "serve", "--config", good)
		testutil.DiesWithTest(cmd)
		cmd.Env = append(childEnv(), "ORDERS_SECRET="+secret, "NOTIFY_SOCKET="+sockPath, "ANKUSA_LOG_FORMAT=json")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// done is closed when the process exits; exited carries its error.
		done, exited := make(chan struct{}), make(chan error, 1)
		go func() { exited <- cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			select {
			case <-done:
			default:
				_ = cmd.Process.Kill()
				<-done
			}
		})

		notes := notifications(sock)
		if got := nextNotify(t, notes, done, logPath, 60*time.Second); !strings.Contains(got, "READY=1") {
			t.Fatalf("first notification %q, want READY=1", got)
		}
		// READY=1 comes after the listeners are up: the ingest address is
		// in the "ankusa serving" log line.
		ingest := servingAddr(t, logPath)
		resp, err := http.Get("http://" + ingest + "/health")
		if err != nil {
			t.Fatal(err)
		}
		var health map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&health)
		resp.Body.Close()
		if health["version"] != version || health["commit"] != commit {
			t.Fatalf("/health = %v, want version %s commit %s", health, version, commit)
		}

		start := time.Now()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if got := nextNotify(t, notes, done, logPath, 10*time.Second); !strings.Contains(got, "STOPPING=1") {
			t.Fatalf("notification after SIGTERM %q, want STOPPING=1", got)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("exit after SIGTERM: %v (want 0)\n%s", err, readFile(t, logPath))
			}
		case <-time.After(defaultDrain() + 5*time.Second):
			t.Fatalf("still running %v after SIGTERM (drain is %v)", time.Since(start), defaultDrain())
		}
	})
}

// childEnv is this process's environment without ANKUSA_* variables: the
// binary refuses one it does not know, and a developer's shell may hold
// some.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANKUSA_") {
			env = append(env, kv)
		}
	}
	return env
}

// notifications delivers each datagram the socket receives until it is
// closed.
func notifications(c *net.UnixConn) <-chan string {
	ch := make(chan string, 8)
	go func() {
		defer close(ch)
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return ch
}

// nextNotify waits for the next datagram, failing at once if the process
// exits first.
func nextNotify(t *testing.T, notes <-chan string, done <-chan struct{}, logPath string, wait time.Duration) string {
	t.Helper()
	select {
	case s, ok := <-notes:
		if !ok {
			t.Fatal("the notify socket closed")
		}
		return s
	case <-done:
		t.Fatalf("the process exited before notifying:\n%s", readFile(t, logPath))
	case <-time.After(wait):
		t.Fatalf("no sd_notify datagram within %v:\n%s", wait, readFile(t, logPath))
	}
	return ""
}

// servingAddr reads the ingest address from the JSON "ankusa serving" line.
func servingAddr(t *testing.T, logPath string) string {
	t.Helper()
	var addr string
	testutil.Eventually(t, 5*time.Second, "the serving line is logged", func() bool {
		for _, line := range strings.Split(readFile(t, logPath), "\n") {
			var rec struct {
				Msg    string `json:"msg"`
				Ingest string `json:"ingest"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "ankusa serving" {
				addr = rec.Ingest
				return true
			}
		}
		return false
	})
	return addr
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
