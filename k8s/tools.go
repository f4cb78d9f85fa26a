//go:build tools

// The control-plane main packages and the kubelet built by `make k8s`; listed here so that
// `go mod tidy` keeps everything they need in go.mod and go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
