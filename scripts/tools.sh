#!/usr/bin/env bash
# Installs the pinned tools `make test` validates deploy/ with (and
# staticcheck, which lints every package), into
# $DEPLOY_TOOLS_DIR (default ./.tools), and prints the variables that point
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
# A failed install inside $(…) must stop the script too.
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
root=$PWD

# Pins.
KUBECONFORM=github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
HELM=helm.sh/helm/v3/cmd/helm@v3.22.0
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2
# promtool: Debian's (package prometheus, bookworm: 2.42.0) when apt-get
# can install it, in seconds; else built from this pin, which costs about
# four minutes of compiling on a cold cache.
PROMTOOL_DEBIAN_VERSION=2.42.0
PROMTOOL=github.com/prometheus/prometheus/cmd/promtool@v0.316.0
K8S_VERSION=1.37.2                      # the schemas' Kubernetes version
K8S_MODULE=k8s.io/kubernetes@v$K8S_VERSION
PROM_OPERATOR_MODULE=github.com/prometheus-operator/prometheus-operator@v0.85.0

tools=${DEPLOY_TOOLS_DIR:-$root/.tools}
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
    GOFLAGS= GOBIN="$dir" go install -trimpath ${tags:+-tags "$tags"} "$pkg" >&2
    [ -x "$dir/$name" ] || { log "go install $pkg made no $name"; return 1; }
    log "$name built in $((SECONDS - start))s"
  fi
  echo "$dir/$name"
}

apt_ok() { command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; }
apt_updated=
apt_install() {
  apt_ok || return 1
  if [ -z "$apt_updated" ]; then apt-get update -qq >/dev/null 2>&1 || return 1; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
}

kubeconform=$(install kubeconform "$KUBECONFORM")
helm=$(install helm "$HELM")
staticcheck=$(install staticcheck "$STATICCHECK")

promtool_debian() {
  command -v promtool >/dev/null 2>&1 && promtool --version 2>&1 | grep -q "version $PROMTOOL_DEBIAN_VERSION"
}
if promtool_debian; then
  promtool=$(command -v promtool)
elif [ -x "$tools/promtool-${PROMTOOL##*@}/promtool" ]; then
  promtool="$tools/promtool-${PROMTOOL##*@}/promtool"
elif log "installing promtool from Debian (prometheus)" && apt_install prometheus && promtool_debian; then
  promtool=$(command -v promtool)
else
  # remove_all_sd leaves out the cloud service-discovery plugins: promtool
  # only checks and tests rules here, and they are most of its build.
  promtool=$(install promtool "$PROMTOOL" remove_all_sd)
fi

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
if ! command -v systemd-analyze >/dev/null 2>&1 && apt_ok; then
  log "installing systemd (for systemd-analyze)"
  apt_install systemd || log "apt-get install systemd failed"
fi

# Not ANKUSA_*: the binary refuses (exit 78) an ANKUSA_ variable it does
# not know, and the suite's child processes inherit this environment.
echo "export DEPLOY_KUBECONFORM='$kubeconform'"
echo "export DEPLOY_HELM='$helm'"
echo "export DEPLOY_PROMTOOL='$promtool'"
echo "export DEPLOY_K8S_SCHEMAS='$schemas'"
echo "export DEPLOY_K8S_VERSION='$K8S_VERSION'"
echo "export STATICCHECK='$staticcheck'"
