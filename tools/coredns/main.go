// Command coredns is CoreDNS with the plugins a Kubernetes cluster's DNS
// uses (kubeadm's and k3s's Corefiles), for strait's lab clusters
// (scripts/k8s-tools.sh, docs/k8s-nodes.md). Upstream's main imports every
// plugin, cloud DNS providers included; those add minutes of compile time on
// a 2-core host and nothing a cluster's Corefile asks for.
package main

import (
	"github.com/coredns/coredns/coremain"

	// The plugins of kubeadm's and k3s's default Corefiles.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
