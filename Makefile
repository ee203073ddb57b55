# The two entry points the README starts with. Both set up the machine first.
.PHONY: demo test setup build vet fuzz clean

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

test: setup vet
	go test -count=1 -p 1 -timeout 30m ./...
	scripts/fuzz.sh $(FUZZTIME)

fuzz:
	scripts/fuzz.sh $(FUZZTIME)

clean:
	bin/strait lab down --all || true
	rm -rf bin
