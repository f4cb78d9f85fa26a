// Package iptables stands in for sigs.k8s.io/iptables-wrappers/pkg/iptables, the iptables
// client the kubelet of Kubernetes 1.38 sets up its KUBE-IPTABLES-HINT and KUBE-FIREWALL
// chains with (k8s.io/kubernetes@v1.38.0-beta.0 pkg/kubelet/kubelet_network_linux.go, its only
// user among the binaries scripts/k8s-build makes). It finds no iptables, as on a host that has
// none: that kubelet then logs so and sets up no chain, which nothing in dralet's tests needs
// (DRA does not touch the node's packet filter). It declares only what that file uses.
package iptables

import (
	"context"
	"time"
)

// Chain is an iptables chain name.
type Chain string

// Table is an iptables table name.
type Table string

// RulePosition says where EnsureRule puts a rule that is missing.
type RulePosition string

// Protocol is the IP family a client works on.
type Protocol string

// Mode says which iptables backend NewBestEffort looks for.
type Mode int

const (
	TableFilter Table = "filter"
	TableMangle Table = "mangle"
	TableNAT    Table = "nat"

	ChainInput  Chain = "INPUT"
	ChainOutput Chain = "OUTPUT"

	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"

	ProtocolIPv4 Protocol = "IPv4"
	ProtocolIPv6 Protocol = "IPv6"
)

// UseInstalledMode uses whichever backend the host has.
const UseInstalledMode Mode = 0

// Interface is what the kubelet calls on a client.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	IsIPv6() bool
	Protocol() Protocol
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// NewBestEffort returns a client per IP family whose iptables works: none here.
func NewBestEffort(_ context.Context, _ Mode) map[Protocol]Interface {
	return nil
}
