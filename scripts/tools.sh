#!/usr/bin/env bash
# Installs the pinned tools `make test` validates deploy/ with, into
# $ANKUSA_TOOLS_DIR (default ./.tools), and prints the variables that point
# at them (eval "$(scripts/tools.sh)"). Idempotent: a tool whose pinned
# version is already installed is not rebuilt, and every build goes
# through the Go module and build caches, so only the first run on a
# machine pays for compiling (measured in docs/deployment.md, "How the
# deployment files are tested").
#
# Everything comes from the Go module proxy (the only registry for Go code
# here): the tools by `go install module@version`, and kubeconform's
# schemas generated from the Kubernetes and Prometheus Operator modules by
# test/deploy/k8sschema, because kubeconform's default schema location
# (GitHub) cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# Pins. promtool is the one from the Prometheus release whose Kubernetes
# client matches helm's (k8s.io/client-go v0.37.0), so the second build
# reuses the first's compiled Kubernetes packages.
KUBECONFORM=github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
HELM=helm.sh/helm/v3/cmd/helm@v3.22.0
PROMTOOL=github.com/prometheus/prometheus/cmd/promtool@v0.315.1
K8S_VERSION=1.37.2                      # the schemas' Kubernetes version
K8S_MODULE=k8s.io/kubernetes@v$K8S_VERSION
PROM_OPERATOR_MODULE=github.com/prometheus-operator/prometheus-operator@v0.85.0

tools=${ANKUSA_TOOLS_DIR:-$root/.tools}
mkdir -p "$tools"
log() { echo "tools: $*" >&2; }

# install NAME MODULE@VERSION [go build tags]
install() {
  local name=$1 pkg=$2 tags=${3:-}
  local dir="$tools/${name}-${pkg##*@}"
  if [ ! -x "$dir/$name" ]; then
    log "installing $pkg${tags:+ (tags $tags)}"
    local start=$SECONDS
    # GOFLAGS from the caller (for example -mod=vendor) must not reach
    # another module's build.
    GOFLAGS= GOBIN="$dir" go install -trimpath ${tags:+-tags "$tags"} "$pkg"
    log "$name built in $((SECONDS - start))s"
  fi
  echo "$dir/$name"
}

kubeconform=$(install kubeconform "$KUBECONFORM")
helm=$(install helm "$HELM")
# remove_all_sd leaves out the cloud service-discovery plugins: promtool
# only checks and tests rules here, and they are most of its build.
promtool=$(install promtool "$PROMTOOL" remove_all_sd)

# The schemas depend on the generator's source too: a change regenerates.
gen_hash=$(sha256sum test/deploy/k8sschema/main.go | cut -c1-12)
schemas="$tools/k8s-schemas-v$K8S_VERSION-$gen_hash"
if [ ! -f "$schemas/.complete" ]; then
  log "generating Kubernetes $K8S_VERSION schemas"
  start=$SECONDS
  k8s_dir=$(GOFLAGS= go mod download -json "$K8S_MODULE" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  po_dir=$(GOFLAGS= go mod download -json "$PROM_OPERATOR_MODULE" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$k8s_dir" ] && [ -n "$po_dir" ] || { log "go mod download did not report a Dir"; exit 1; }
  rm -rf "$schemas"
  go run ./test/deploy/k8sschema \
    -swagger "$k8s_dir/api/openapi-spec/swagger.json" \
    -crd "$po_dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" \
    -out "$schemas" >&2
  touch "$schemas/.complete"
  log "schemas in $((SECONDS - start))s"
fi

# systemd-analyze comes from Debian's systemd package; where it cannot be
# installed the unit check is skipped, and says so.
if ! command -v systemd-analyze >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  log "installing systemd (for systemd-analyze)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd; } >/dev/null 2>&1; then
    log "apt-get install systemd failed"
  fi
fi

echo "export ANKUSA_KUBECONFORM='$kubeconform'"
echo "export ANKUSA_HELM='$helm'"
echo "export ANKUSA_PROMTOOL='$promtool'"
echo "export ANKUSA_K8S_SCHEMAS='$schemas'"
echo "export ANKUSA_K8S_VERSION='$K8S_VERSION'"
