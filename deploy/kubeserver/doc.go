// Package kubeserver runs the Helm chart's objects against a real Kubernetes API server:
// etcd and kube-apiserver built from the Go module proxy by scripts/ensure-kube.sh
// (docs/kubernetes.md, "Checked against a real API server"). It has only tests.
package kubeserver
