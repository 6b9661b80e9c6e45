# zketcd — an etcd v3 server whose storage is Apache ZooKeeper.
#
#   make run     start a local ZooKeeper (installed if missing) and zketcd on it
#   make test    every test that runs in CI: unit, ZooKeeper-backed, differential
#
# Long-running targets (benchmarks, soaks, faults) are listed in README.md.

GO        ?= go
BIN       := bin
GOFLAGS   ?=
TEST_FLAGS ?= -race -count=1 -timeout 20m
STATICCHECK_VERSION := v0.8.2

.PHONY: all build run test test-unit test-integration lint vet staticcheck fmt fuzz bench-watch deps-zookeeper clean

all: build

build:
	$(GO) build -o $(BIN)/zketcd ./cmd/zketcd

# deps-zookeeper installs Debian's ZooKeeper if its jar is missing.
deps-zookeeper:
	@if [ ! -f /usr/share/java/zookeeper.jar ]; then \
		echo "installing zookeeper (apt-get)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq zookeeper; \
	fi

run: deps-zookeeper build
	$(BIN)/zketcd dev --data-dir zketcd-dev --listen-client-urls http://127.0.0.1:2379

test: deps-zookeeper lint test-unit test-integration

test-unit:
	$(GO) test $(TEST_FLAGS) ./...

test-integration:
	cd integration && $(GO) test $(TEST_FLAGS) ./...

lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd integration && $(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd integration && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# bench-watch measures watch latency (commit to event, p50/p99).
bench-watch:
	cd integration && $(GO) test -run '^$$' -bench WatchLatency -benchtime 2000x ./watchtest/

# fuzz runs each fuzz target for FUZZTIME (CI runs them briefly).
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeEntry -fuzztime $(FUZZTIME) ./zkstore/
	$(GO) test -run '^$$' -fuzz FuzzDecodeSnapshot -fuzztime $(FUZZTIME) ./zkstore/
	$(GO) test -run '^$$' -fuzz FuzzTxn -fuzztime $(FUZZTIME) ./translate/
	$(GO) test -run '^$$' -fuzz FuzzRange -fuzztime $(FUZZTIME) ./translate/

clean:
	rm -rf $(BIN)
