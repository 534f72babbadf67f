package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/ankusa/ankusa/internal/config"
)

// helmBinary is the helm scripts/test.sh installs ($DEPLOY_HELM), else one
// on PATH; without either the chart tests skip, saying so.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DEPLOY_HELM"); p != "" {
		return p
	}
	p, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm not found: set DEPLOY_HELM (make test installs it) to render the chart")
	}
	return p
}

// manifest is one rendered object, decoded loosely: the test reads only
// the fields it checks (kubeconform -strict checks the rest).
type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Template struct {
			Spec struct {
				InitContainers []container `yaml:"initContainers"`
				Containers     []container `yaml:"containers"`
				Grace          int         `yaml:"terminationGracePeriodSeconds"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type container struct {
	Name string   `yaml:"name"`
	Args []string `yaml:"args"`
	Env  []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	EnvFrom []struct {
		SecretRef struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

func render(t *testing.T, helm, release, values string) []manifest {
	t.Helper()
	chart := filepath.Join(repoRoot(t), "deploy/helm/ankusa")
	args := []string{"template", release, chart, "--kube-version", "1.37.2"}
	if values != "" {
		args = append(args, "-f", values)
	}
	cmd := exec.Command(helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var ms []manifest
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decode helm output: %v", err)
		}
		if m.Kind != "" {
			ms = append(ms, m)
		}
	}
	return ms
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)

// TestDeploy_ChartConfigsLoad renders the chart with its default values
// and each ci/*-values.yaml and loads the ankusa.yml it ships exactly as
// the pod would: with the container's environment (the per-pod ANKUSA_*
// keys, $(POD_NAME) as pod 0's name) and the Secret's keys. Every variable
// the file references must come from the rendered Secret, or, with
// secret.existingSecret, is given a placeholder (that Secret is the
// operator's). It then checks the wiring the ADR and the probes rely on.
func TestDeploy_ChartConfigsLoad(t *testing.T) {
	helm := helmBinary(t)
	valueFiles, _ := filepath.Glob(filepath.Join(repoRoot(t), "deploy/helm/ankusa/ci/*-values.yaml"))
	if len(valueFiles) < 3 {
		t.Fatalf("want the disk, dual-jetstream and dual-kafka values, found %v", valueFiles)
	}
	for _, vf := range append([]string{""}, valueFiles...) {
		name := "default"
		if vf != "" {
			name = strings.TrimSuffix(filepath.Base(vf), "-values.yaml")
		}
		t.Run(name, func(t *testing.T) {
			const release = "ankusa"
			ms := render(t, helm, release, vf)
			var cm, secret, sts *manifest
			monitored := false
			for i := range ms {
				switch ms[i].Kind {
				case "ServiceMonitor":
					monitored = true
				case "ConfigMap":
					cm = &ms[i]
				case "Secret":
					secret = &ms[i]
				case "StatefulSet":
					sts = &ms[i]
				}
			}
			if cm == nil || sts == nil {
				t.Fatalf("rendered no ConfigMap or StatefulSet: %d objects", len(ms))
			}
			text, ok := cm.Data["ankusa.yml"]
			if !ok {
				t.Fatal("the ConfigMap has no ankusa.yml")
			}
			pod := sts.Metadata.Name + "-0"
			cs := sts.Spec.Template.Spec.Containers
			if len(cs) != 1 {
				t.Fatalf("want one container, got %d", len(cs))
			}
			c := cs[0]
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = strings.ReplaceAll(e.Value, "$(POD_NAME)", pod)
			}
			if secret != nil {
				for k, v := range secret.StringData {
					env[k] = v
				}
			} else {
				for _, m := range envRef.FindAllStringSubmatch(text, -1) {
					if _, ok := env[m[1]]; !ok {
						env[m[1]] = fmt.Sprintf("placeholder-from-existing-secret-%s", m[1])
					}
				}
			}
			cfg, err := config.LoadBytes([]byte(text), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatalf("the chart's ankusa.yml does not load in the pod's environment: %v\n%s", err, text)
			}

			if cfg.Node.Instance != pod || cfg.Intake.NodeID != pod {
				t.Errorf("instance %q, intake.node_id %q: want the pod name %q", cfg.Node.Instance, cfg.Intake.NodeID, pod)
			}
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			if mounts["data"] == "" || cfg.Node.DataDir != mounts["data"] {
				t.Errorf("node.data_dir %q is not the data volume's mount %q", cfg.Node.DataDir, mounts["data"])
			}
			ports := map[string]int{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if cfg.HTTP.Port != ports["ingest"] || cfg.Admin.Port != ports["admin"] {
				t.Errorf("listens on %d/%d, container ports ingest %d admin %d", cfg.HTTP.Port, cfg.Admin.Port, ports["ingest"], ports["admin"])
			}
			if cfg.Admin.IP != "0.0.0.0" {
				t.Errorf("admin.ip %q: a scraper on another pod could not reach /metrics", cfg.Admin.IP)
			}
			// Kubernetes sends SIGKILL after the grace period: the drain
			// this very config allows must end before it.
			drain := time.Duration(cfg.HTTP.ShutdownTimeoutMs) * time.Millisecond
			if grace := time.Duration(sts.Spec.Template.Spec.Grace) * time.Second; grace <= drain {
				t.Errorf("terminationGracePeriodSeconds %v does not outlast http.shutdown_timeout_ms %v", grace, drain)
			}
			if monitored && !slices.Contains(cfg.Admin.Open, "metrics") {
				t.Errorf("a ServiceMonitor scrapes /metrics without a token, but admin.open is %v", cfg.Admin.Open)
			}
			if p := c.ReadinessProbe.HTTPGet; p.Path != "/ready" || p.Port != "ingest" {
				t.Errorf("readiness probe %+v, want /ready on ingest", p)
			}
			if p := c.LivenessProbe.HTTPGet; p.Path != "/health" || p.Port != "ingest" {
				t.Errorf("liveness probe %+v, want /health on ingest", p)
			}
			// The config-check init container sees what serve sees.
			ics := sts.Spec.Template.Spec.InitContainers
			if len(ics) != 1 || strings.Join(ics[0].Args[:2], " ") != "config check" {
				t.Fatalf("want one init container running config check, got %+v", ics)
			}
			if fmt.Sprint(ics[0].Env) != fmt.Sprint(c.Env) || fmt.Sprint(ics[0].EnvFrom) != fmt.Sprint(c.EnvFrom) {
				t.Error("the config-check init container's environment differs from the server's")
			}
			if ics[0].Args[len(ics[0].Args)-1] != c.Args[len(c.Args)-1] {
				t.Errorf("config check reads %s, serve reads %s", ics[0].Args, c.Args)
			}
			t.Logf("%s: wal.type %s, intake %q, pod %s", name, cfg.WAL.Type, cfg.Intake.Type, pod)
		})
	}
}
