// Package grafana holds Turbine's Grafana dashboards (deploy/grafana/turbine-*.json,
// written by go run ./deploy/grafana/gen) and the test that checks every query of them
// against the metric families a live turbine serve exports (docs/grafana.md).
//
// Subpackages: dashboard (the JSON model, its checks and the metric names of its
// queries), gen (the panel lists the JSON files are written from) and render (PNG
// screenshots of the dashboards from a recorded run).
package grafana
