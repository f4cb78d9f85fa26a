// Command etcd runs a single-member etcd on loopback for dralet's real-cluster tests.
//
// It is a thin wrapper over go.etcd.io/etcd/server/v3/embed so that the etcd
// version is the one k8s.io/kubernetes pins in go.mod, built by the same
// toolchain as the control-plane binaries.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for the member's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL to listen on")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL to listen on")
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}
	if err := run(*dataDir, *clientURL, *peerURL); err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		os.Exit(1)
	}
}

func run(dataDir, clientURL, peerURL string) error {
	client, err := url.Parse(clientURL)
	if err != nil {
		return fmt.Errorf("--listen-client-url: %w", err)
	}
	peer, err := url.Parse(peerURL)
	if err != nil {
		return fmt.Errorf("--listen-peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "dralet-test"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Test data: no need to survive power loss, and fsync dominates on shared disks.
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer server.Close()
	select {
	case <-server.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		server.Server.Stop()
		return fmt.Errorf("not ready after 60s")
	}
	fmt.Fprintf(os.Stderr, "etcd: ready on %s\n", client)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-server.Err():
		return err
	case <-signals:
		return nil
	}
}
