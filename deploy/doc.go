// Package deploy holds the tests of Governor's Kubernetes manifests.
//
// The manifests themselves are kustomizations in this directory: base (an
// application with Governor as a native sidecar), shared (one Governor per
// namespace behind a Service) and overlays. The tests render every
// kustomization found under this directory, decode each rendered document
// strictly into the Kubernetes API types, so that an unknown or misspelt
// field fails, and check the properties that matter: the sidecar wiring,
// the probes, the termination grace period against the drain timeout, the
// security context and the metrics annotations.
//
// monitoring/ is the monitoring bundle: a Grafana dashboard and alerting
// rules (a plain rules file and the same rules as a PrometheusRule). Its
// tests check the rules and their unit tests with promtool, the dashboard's
// queries as PromQL, that the PrometheusRule and the file agree, and that
// every metric they use is exported by a Governor built from this
// repository and run with -demo.
//
// It is a module of its own so that the Kubernetes and kustomize
// dependencies stay out of Governor's module.
package deploy
