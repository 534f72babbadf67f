// Package deploy_test checks the deployment artefacts under deploy/ and
// the Dockerfile against the code they ship:
//
//   - the dashboard and the alert rules name only series a running node
//     exports (metrics_test.go);
//   - the Dockerfile's build stage is `make build`, and the binary that
//     target makes is static, stamped, and speaks sd_notify (build_test.go);
//   - the supervisors' stop timeouts outlast the drain, and the chart's
//     rendered configurations load (supervisor_test.go, helm_test.go).
//
// helm, kubeconform, promtool and systemd-analyze themselves are run by
// scripts/test.sh, which installs them.
package deploy_test
