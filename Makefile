# The two entry points the README starts with. Both set up the machine first.
.PHONY: demo test setup build vet fuzz clean k8s-tools bpf

# Fuzz targets run briefly by `make test`; `make fuzz FUZZTIME=5m` digs deeper.
FUZZTIME ?= 5s

setup:
	scripts/setup.sh

build: setup

demo: setup
	bin/strait lab run quickstart

vet:
	go vet ./...
	@test -z "$$(gofmt -l .)" || (echo "gofmt needed:"; gofmt -l .; exit 1)

test: setup vet k8s-tools
	go test -count=1 -p 1 -timeout 30m ./...
	scripts/fuzz.sh $(FUZZTIME)

# kube-apiserver, etcd and kubectl for the Kubernetes tests, built from Go
# modules and cached outside the checkout (a no-op when cached; the tests
# call it too, this only moves a cold build out of the test timeout).
k8s-tools:
	scripts/k8s-tools.sh >/dev/null

fuzz:
	scripts/fuzz.sh $(FUZZTIME)

# Recompiles package packet's BPF programs (installing clang-14 and libbpf
# headers if missing); commit the regenerated packet/packet_bpf*.{o,go}.
bpf:
	scripts/bpf.sh

clean:
	bin/strait lab down --all || true
	rm -rf bin
