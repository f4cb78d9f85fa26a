// A stand-in for sigs.k8s.io/iptables-wrappers, which the Go module proxy here does not serve
// (403) and the kubelet of Kubernetes 1.38 imports; see pkg/iptables.
module sigs.k8s.io/iptables-wrappers

go 1.24.0
