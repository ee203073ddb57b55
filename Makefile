# The two entry points the README starts with. Both set up the machine first.
.PHONY: demo test setup build vet fuzz clean k8s-tools k8s-nodes-test bpf

# Fuzz targets run briefly by `make test`; `make fuzz FUZZTIME=5m` digs deeper.
FUZZTIME ?= 5s

setup:
	scripts/setup.sh

build: setup

demo: setup
	bin/strait lab run quickstart

# The data path is Linux's; everything else, tests included, also builds for
# macOS, where the packet mode, the emulator and strait's congestion control
# say they are not supported.
vet:
	go vet ./...
	GOOS=darwin go vet ./...
	@test -z "$$(gofmt -l .)" || (echo "gofmt needed:"; gofmt -l .; exit 1)

test: setup vet k8s-tools
	scripts/gotest.sh -count=1 -p 1 -timeout 30m ./...
	scripts/fuzz.sh $(FUZZTIME)

# kube-apiserver, etcd and kubectl for the Kubernetes tests, and kubelet,
# kube-proxy, CoreDNS and the images for the tests on real nodes
# (docs/k8s-nodes.md), built from Go modules and cached outside the checkout
# (a no-op when cached; the tests call them too, this only moves a cold build,
# about 20 minutes on 2 cores, out of the test timeout). Images need root.
k8s-tools:
	scripts/k8s-tools.sh --nodes >/dev/null
	if [ "$$(id -u)" = 0 ] && command -v buildah >/dev/null; then scripts/k8s-images.sh >/dev/null; fi

# Only the end-to-end test on real nodes (two clusters, deploy/ in pods).
k8s-nodes-test: setup k8s-tools
	go test -count=1 -run TestDeployInPods -v -timeout 30m ./k8s/e2e

fuzz:
	scripts/fuzz.sh $(FUZZTIME)

# Recompiles the BPF programs of packet and tunnel/wancc (installing clang-14 and libbpf
# headers if missing); commit the regenerated *_bpf*.{o,go}.
bpf:
	scripts/bpf.sh

clean:
	bin/strait lab down --all || true
	rm -rf bin
