#!/usr/bin/env bash
# The whole test suite. Needs Go and the loopback services the machine runs
# (RabbitMQ, NATS, Redis, PostgreSQL; see README): every test uses Pebble
# on a temp dir and loopback listeners, and makes its own streams, key
# prefixes and tables. The deployment files are checked by helm, kubeconform,
# promtool and systemd-analyze, which scripts/tools.sh installs (pinned,
# once per machine) from the Go module proxy and Debian, as is Debian's
# chromium for the console's browser test.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== deploy/ (helm, kubeconform, promtool, systemd-analyze)"
./scripts/deploy-check.sh
# test/deploy renders the chart with the same helm.
eval "$(./scripts/tools.sh)"

echo "== staticcheck (pinned by scripts/tools.sh)"
"$STATICCHECK" ./...

echo "== chromium (the web console's browser test, test/console)"
# Debian's chromium, driven by chromedp. Installed once per machine; the
# test skips, saying why, only if this could not install it.
if [ ! -x /usr/bin/chromium ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null \
      || echo "warning: apt-get install chromium failed: test/console will skip"
  else
    echo "warning: no apt-get and no /usr/bin/chromium: test/console will skip"
  fi
fi

# The fleet drill (test/fleet) runs three real nats-server processes: the
# Debian binary (/usr/sbin/nats-server, not always on a user's PATH),
# installed once per machine. No skip: a failed install stops make test.
echo "== nats-server (for the fleet drill's three processes)"
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
fi

echo "== go test (all packages, long drills included)"
# The simulator runs on its own below, so that its one line is printed.
go test -count=1 -timeout 10m $(go list ./... | grep -v '/internal/sim$')

echo "== fault simulator (docs/testing.md, Simulation)"
go test -count=1 -timeout 10m -v -run '^TestSim$' ./internal/sim

# The providers' official libraries as oracles (stripe-go, standard-webhooks,
# svix, twilio-go, slack-go, go-github): a module of its own, so they never
# become dependencies of the binary. It uses the parent module through a
# replace directive; its fuzz target runs on its seeds here.
echo "== go test (test/interop: provider libraries as oracles)"
(cd test/interop && go vet ./... && go test -count=1 -timeout 5m ./...)

# Every package under the race detector (-short: the long drills ran
# above); the simulator is left out, it ran above and runs one synctest
# bubble per process.
echo "== go test -race (every package)"
go test -count=1 -race -short -timeout 15m $(go list ./... | grep -v '/internal/sim$')
