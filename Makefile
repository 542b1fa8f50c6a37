# make test: the one command that runs every test on a fresh machine. It
# installs what the tests need (scripts/setup.sh), then checks formatting,
# vets, runs staticcheck and deadcode, and runs every test with the race
# detector. Tests
# start their own private redis-server, nats-server and PostgreSQL on
# loopback.
#
# make bench: the main job, the end-to-end benchmark on the in-process
# mem:// backend.

GO ?= go
export PATH := $(PATH):/usr/local/go/bin:/usr/sbin
GOBIN := $(shell $(GO) env GOPATH)/bin
# The library, the command (cmd/bus), the Protobuf codec
# (contrib/protobuf), the Watermill adapter (contrib/watermill) and the
# CloudEvents SDK interop test (internal/cloudeventsinterop), each of the
# last four a module of its own; go.work joins them in this checkout.
PKGS := ./... ./cmd/bus/... ./contrib/protobuf/... ./contrib/watermill/... ./internal/cloudeventsinterop/...
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(GOBIN)/staticcheck)
DEADCODE ?= $(shell command -v deadcode 2>/dev/null || echo $(GOBIN)/deadcode)

.PHONY: test setup fmt vet staticcheck deadcode unit fuzz bench

test: setup fmt vet staticcheck deadcode unit fuzz

setup:
	./scripts/setup.sh

fmt:
	@files="$$(gofmt -l .)"; \
	if [ -n "$$files" ]; then echo "gofmt: these files need formatting:"; echo "$$files"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(STATICCHECK) $(PKGS)

# deadcode: no function that neither a program nor a test reaches.
deadcode:
	@out="$$($(DEADCODE) -test $(PKGS))"; \
	if [ -n "$$out" ]; then echo "deadcode: unreachable functions:"; echo "$$out"; exit 1; fi

# The packages whose tests take longest go first, so that they start
# before the short ones instead of after them (go test runs -p packages
# at a time, in the order they are named, and names each one once).
SLOWEST := ./nats ./redisstream ./kafka ./postgres ./rabbitmq ./sqs ./inmemory ./cmd/bus ./contrib/watermill .

# UNIT_P packages run at once. The broker-backed packages spend most of
# their time waiting on their servers, leases and timeouts rather than
# on the CPU, so three at a time keeps two cores busy.
UNIT_P ?= 3

# -vet=off: go test's own vet pass runs a subset of the analyzers of make
# vet, which vets the same packages and their tests.
unit:
	$(GO) test -race -vet=off -p $(UNIT_P) -timeout 20m $(SLOWEST) $(PKGS)

# fuzz: every Fuzz* target for FUZZTIME (default 5s) each; see scripts/fuzz.sh.
fuzz:
	GO=$(GO) ./scripts/fuzz.sh

bench:
	$(GO) run ./cmd/bus bench --scenario e2e -n 1000000 --size 256 --json
