//go:build tools

// containerd, its runc shim and ctr, for the optional real kubelet of the `k8s` tests:
// built by `make k8s` from this module (kept apart from ../go.mod so that containerd's
// dependencies never move the versions Kubernetes pins).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
