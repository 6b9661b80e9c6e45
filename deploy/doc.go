// Package deploy holds what an operator deploys beside zketcd rather than
// code: Prometheus rules (prometheus/zketcd-rules.yml, with their unit
// tests in prometheus/zketcd-rules.test.yml) and a Grafana dashboard
// (grafana/zketcd-dashboard.json). Its test runs promtool over the rules
// and checks that every series the rules and the dashboard query is one a
// live instance exports. docs/metrics.md describes the series.
package deploy
