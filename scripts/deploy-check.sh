#!/usr/bin/env bash
# Validates deploy/ with the ecosystem's own tools (installed, pinned, by
# scripts/tools.sh): helm lint, helm template | kubeconform -strict,
# promtool check/test rules, systemd-analyze verify. The Go side
# (test/deploy) runs with the rest of the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/tools.sh)"

chart=deploy/helm/ankusa
values=("" $chart/ci/*-values.yaml)
schema_loc="$DEPLOY_K8S_SCHEMAS/{{ .ResourceKind }}{{ .KindSuffix }}.json"
kubeconform() {
  "$DEPLOY_KUBECONFORM" -strict -summary -kubernetes-version "$DEPLOY_K8S_VERSION" -schema-location "$schema_loc" "$@"
}

echo "== helm lint"
for v in "${values[@]}"; do
  "$DEPLOY_HELM" lint --strict --kube-version "$DEPLOY_K8S_VERSION" "$chart" ${v:+-f "$v"} >/dev/null \
    || { "$DEPLOY_HELM" lint --strict --kube-version "$DEPLOY_K8S_VERSION" "$chart" ${v:+-f "$v"}; exit 1; }
  echo "ok   ${v:-values.yaml}"
done

echo "== helm template | kubeconform -strict (Kubernetes $DEPLOY_K8S_VERSION)"
for v in "${values[@]}"; do
  echo "-- ${v:-values.yaml}"
  "$DEPLOY_HELM" template ankusa "$chart" --kube-version "$DEPLOY_K8S_VERSION" ${v:+-f "$v"} | kubeconform -
done
# The schemas must refuse what the API server would: a misspelt field in
# the pod template, and in the ServiceMonitor.
echo "-- a misspelt field must be refused"
bad=$("$DEPLOY_HELM" template ankusa "$chart" --kube-version "$DEPLOY_K8S_VERSION" -f $chart/ci/disk-values.yaml \
  | sed 's/^\(  *\)terminationGracePeriodSeconds:/\1terminationGracePeriodSecond:/; s/^\(  *\)interval: 15s/\1intervall: 15s/')
if echo "$bad" | kubeconform - >/tmp/ankusa-kubeconform-neg.$$ 2>&1; then
  cat /tmp/ankusa-kubeconform-neg.$$; rm -f /tmp/ankusa-kubeconform-neg.$$
  echo "kubeconform accepted unknown fields: the schemas are not strict"; exit 1
fi
grep -q "terminationGracePeriodSecond" /tmp/ankusa-kubeconform-neg.$$ && grep -q "intervall" /tmp/ankusa-kubeconform-neg.$$ \
  || { cat /tmp/ankusa-kubeconform-neg.$$; rm -f /tmp/ankusa-kubeconform-neg.$$; echo "kubeconform failed for another reason"; exit 1; }
rm -f /tmp/ankusa-kubeconform-neg.$$
echo "ok   refused"

echo "== promtool check rules / test rules"
"$DEPLOY_PROMTOOL" check rules deploy/prometheus/alerts.yml
"$DEPLOY_PROMTOOL" test rules deploy/prometheus/alerts_test.yml

echo "== systemd-analyze verify"
if command -v systemd-analyze >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # verify checks that ExecStart exists: point it at a release build.
  make -s build OUT="$tmp/ankusa" >/dev/null
  sed "s#/usr/local/bin/ankusa#$tmp/ankusa#g" deploy/systemd/ankusa.service >"$tmp/ankusa.service"
  out=$(systemd-analyze verify "$tmp/ankusa.service" 2>&1) || { echo "$out"; exit 1; }
  # verify exits 0 on unknown keys and misplaced settings; any output is a finding.
  if [ -n "$out" ]; then echo "$out"; exit 1; fi
  echo "ok   deploy/systemd/ankusa.service"
else
  echo "SKIPPED: systemd-analyze is not installed and could not be (apt-get); the unit's syntax is unchecked"
fi
