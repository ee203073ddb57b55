package main

import (
	"context"

	"k8s.io/client-go/rest"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/kube"
	"github.com/strait-net/strait/lab/kube/linkemu"
	"github.com/strait-net/strait/lab/run"
)

// clusterEmulator is the link emulation runs on clusters use:
// lab/kube/linkemu's privileged DaemonSet (docs/lab-clusters-emulation.md).
var clusterEmulator kube.Emulator = linkEmulator{}

// linkEmulator is linkemu as a kube.Emulator. The adapter lives here, not
// in lab/kube, so that the runner's package does not depend on how links
// are emulated.
type linkEmulator struct{}

func (linkEmulator) Apply(ctx context.Context, run string, targets []kube.EmuTarget, p emulation.Params) (kube.Applied, error) {
	ts := make([]linkemu.Target, 0, len(targets))
	for _, t := range targets {
		ts = append(ts, linkemu.Target{Cluster: t.Cluster, Config: t.Config, Nodes: t.Nodes, Remote: t.Remote, ResetPorts: t.ResetPorts})
	}
	a, err := linkemu.Apply(ctx, run, ts, p)
	if err != nil {
		// Not a typed nil in the interface: the caller tests for nil.
		return nil, err
	}
	return a, nil
}

func (linkEmulator) Down(ctx context.Context, cfg *rest.Config, run string) error {
	return linkemu.Down(ctx, cfg, run)
}

func (linkEmulator) Needs() kube.EmuNeeds {
	n := kube.EmuNeeds{Namespace: linkemu.Namespace, PodSecurity: linkemu.PodSecurity, What: linkemu.What}
	for _, r := range linkemu.Rights {
		n.Rights = append(n.Rights, kube.EmuRight{Verb: r.Verb, Group: r.Group, Resource: r.Resource})
	}
	return n
}

// clusterBackend is `strait lab run --clusters FILE`'s backend.
func clusterBackend(path string) (run.Backend, error) {
	m, err := kube.LoadClusterMap(path)
	if err != nil {
		return nil, err
	}
	// The emulation's DaemonSet runs strait's image too: the one the
	// clusters file names, which its clusters can pull.
	linkemu.Image = m.Image
	return kube.New(kube.Options{Clusters: m, Emulator: clusterEmulator, Logger: logger()})
}

// downClusters is `strait lab down --clusters FILE`.
func downClusters(ctx context.Context, path string) error {
	m, err := kube.LoadClusterMap(path)
	if err != nil {
		return err
	}
	linkemu.Image = m.Image // its cleaning pods, as clusterBackend's
	return kube.Down(ctx, m, clusterEmulator)
}
