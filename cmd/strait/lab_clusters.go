package main

import (
	"context"

	"github.com/strait-net/strait/lab/kube"
	"github.com/strait-net/strait/lab/run"
)

// clusterEmulator is the link emulation runs on clusters use; nil until
// lab/kube/linkemu provides one, so emulated scenarios are refused.
var clusterEmulator kube.Emulator

// clusterBackend is `strait lab run --clusters FILE`'s backend.
func clusterBackend(path string) (run.Backend, error) {
	m, err := kube.LoadClusterMap(path)
	if err != nil {
		return nil, err
	}
	return kube.New(kube.Options{Clusters: m, Emulator: clusterEmulator, Logger: logger()})
}

// downClusters is `strait lab down --clusters FILE`.
func downClusters(ctx context.Context, path string) error {
	m, err := kube.LoadClusterMap(path)
	if err != nil {
		return err
	}
	return kube.Down(ctx, m, clusterEmulator)
}
