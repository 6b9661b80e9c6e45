# zketcd — an etcd v3 server whose storage is Apache ZooKeeper.
#
#   make run            a local ZooKeeper (Debian's package, installed if missing) and zketcd on 127.0.0.1:2379
#   make build          bin/zketcd (version from git describe)
#   make install        bin/zketcd, the systemd unit, the zketcd user's sysusers.d entry and the
#                       example configuration under $(DESTDIR)$(PREFIX) (/usr/local)
#   make tools          bin/etcdctl and bin/etcdutl v3.7.3, built from the Go module proxy
#
# What CI runs (.ci/run installs ZooKeeper and the Go modules, then runs make ci):
#   make ci             test, the kube-apiserver build, e2e, etcdctl-test, snapshot-test,
#                       upgrade-test and fuzz, in that order, with each step's time
#   make test           lint, then the unit and ZooKeeper-backed tests of both modules: the
#                       engine and every package, the differential suite against embedded
#                       etcd 3.7.3, the gateway, watch and hostile-client tests, the compose
#                       checks and the short fault-injection variant
#   make lint           gofmt, go vet, staticcheck
#   make e2e            kube-apiserver on ZooKeeper through zketcd (builds kube-apiserver once, cached)
#   make etcdctl-test   the real etcdctl 3.7.3 against zketcd dev and etcd 3.7.3, outputs compared
#   make snapshot-test  etcd snapshot files into zketcd and back, and the live mirror
#   make upgrade-test   a rolling restart onto a build writing a newer log entry format
#   make fuzz           every fuzz target for FUZZTIME
#   make multihost      instances on three network namespaces (as root; part of make test too),
#                       following docs/operations.md "Instances on several hosts"
#
# Not in CI (long, or rewriting docs/):
#   make compose-test   docker-compose.yml run for real with Debian's docker.io (root; images built here)
#   make demo           the e2e scenarios printed as a lab notebook
#   make faults         the 33 fault-injection scenarios, 30 s of load each; rewrites docs/reliability.md
#   make soak           hours of load with a fault every few minutes; output in SOAK_OUT (out/soak)
#   make bench          zketcd vs etcd vs kine (~45 min); rewrites docs/benchmarks.md and docs/bench/
#   make bench-long     the same with longer cells and recovery over 1M keys
#   make bench-watch    watch latency, commit to event
#   make bench-tenants  100 tenants on one fleet against etcd per tenant and a shared etcd, and
#                       a quiet tenant beside a flooding neighbour (~30 min); rewrites its section
#                       of docs/benchmarks.md and docs/bench/tenants*
#   make bench-move     zketcd move under a kube-apiserver at 10,000 objects, and the mover's
#                       time and memory at 10,000 and 100,000 objects (~15 min; prints figures)
#
# docs/testing.md describes each target.

GO        ?= go
BIN       := bin
GOFLAGS   ?=
TEST_FLAGS ?= -race -count=1 -timeout 20m
STATICCHECK_VERSION := v0.8.2

.PHONY: all build install tools compose-test run ci test test-unit test-integration multihost e2e etcdctl-test snapshot-test demo kube-apiserver lint vet staticcheck fmt fuzz bench-watch bench bench-long bench-scale bench-tenants bench-move faults upgrade-test soak deps-zookeeper deps-postgresql clean

all: build

# The build's version, commit and modified flag, linked into
# internal/buildinfo (zketcd version, /version, the build-info metric):
# VERSION is `git describe` (the newest tag, commits since, the commit,
# -dirty), e.g. `make build VERSION=v1.2.3` overrides it.
VERSION   := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    := $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/zketcd/zketcd/internal/buildinfo
LDFLAGS   := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) \
	-X $(BUILDINFO).modified=$(if $(findstring -dirty,$(VERSION)),true,false)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/zketcd ./cmd/zketcd

# deps-zookeeper installs Debian's ZooKeeper if its jar is missing.
deps-zookeeper:
	@if [ ! -f /usr/share/java/zookeeper.jar ]; then \
		echo "installing zookeeper (apt-get)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq zookeeper; \
	fi

# deps-postgresql installs Debian's PostgreSQL server if no
# /usr/lib/postgresql/*/bin/initdb exists (the bench's kine-pg server; the
# harness runs its own private cluster, not the package's service).
deps-postgresql:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing postgresql (apt-get)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql; \
	fi

# install puts bin/zketcd, the systemd unit (its ExecStart pointing at the
# installed binary), the sysusers.d entry of the zketcd user, the example
# configuration, and the backup script with its service and timer
# (docs/kubernetes.md "Backups") under $(DESTDIR)$(PREFIX); it creates no
# user and writes nothing in /etc: docs/operations.md "Installing" has
# those steps.
PREFIX  ?= /usr/local
DESTDIR ?=
install: build
	install -D -m 0755 $(BIN)/zketcd $(DESTDIR)$(PREFIX)/bin/zketcd
	install -d -m 0755 $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed 's|/usr/local/bin/zketcd|$(PREFIX)/bin/zketcd|' docs/zketcd.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/zketcd.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/zketcd.service
	install -D -m 0644 docs/zketcd.sysusers.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/zketcd.conf
	install -D -m 0644 docs/zketcd.conf.yml $(DESTDIR)$(PREFIX)/share/zketcd/zketcd.conf.yml
	install -D -m 0755 docs/zketcd-backup $(DESTDIR)$(PREFIX)/bin/zketcd-backup
	sed 's|/usr/local/bin|$(PREFIX)/bin|g' docs/zketcd-backup.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/zketcd-backup.service
	install -m 0644 docs/zketcd-backup.timer $(DESTDIR)$(PREFIX)/lib/systemd/system/zketcd-backup.timer
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/zketcd-backup.service

# tools copies etcdctl and etcdutl v3.7.3 into bin/: build-peers.sh builds
# them from the Go module proxy (a wrapper module: etcd's own go.mod
# files carry replace directives, so `go install ...@v3.7.3` fails) into
# $${ZKETCD_CACHE:-$$HOME/.cache/zketcd} once (~3 min cold), as the tests use them.
tools:
	@out=$$($(PEERS_BUILD) etcdctl etcdutl) || { echo "tools: building etcdctl/etcdutl failed" >&2; exit 1; }; \
	for t in etcdctl etcdutl; do \
		p=$$(printf '%s\n' "$$out" | sed -n "s/^$$t=//p"); \
		[ -x "$$p" ] || { echo "tools: no $$t in: $$out" >&2; exit 1; }; \
		install -D -m 0755 "$$p" $(BIN)/$$t && echo "$(BIN)/$$t: $$($(BIN)/$$t version | head -n 1)"; \
	done

run: deps-zookeeper build
	$(BIN)/zketcd dev --data-dir zketcd-dev --listen-client-urls http://127.0.0.1:2379

# ci is what .ci/run runs once ZooKeeper and the Go modules are installed:
# every target CI covers, in order, each step's time echoed. Building
# kube-apiserver takes ~17 min cold on 2 cores and is a no-op when cached
# (keep $${ZKETCD_CACHE:-$$HOME/.cache/zketcd} between runs); etcdctl, etcd
# and etcdutl are built into the same cache (~3 min cold).
ci:
	@start=$$(date +%s); \
	$(MAKE) test || exit 1; \
	step=$$(date +%s); \
	out=$$($(KUBE_APISERVER_BUILD)) || { echo "ci: building kube-apiserver failed" >&2; exit 1; }; \
	echo "kube-apiserver: $$(printf '%s\n' "$$out" | tail -n 1) ($$(( $$(date +%s) - step ))s)"; \
	for t in e2e etcdctl-test snapshot-test upgrade-test; do \
		step=$$(date +%s); \
		$(MAKE) $$t || exit 1; \
		echo "$$t finished in $$(( $$(date +%s) - step ))s"; \
	done; \
	$(MAKE) fuzz || exit 1; \
	echo "CI finished in $$(( $$(date +%s) - start ))s"

test: deps-zookeeper lint test-unit test-integration

test-unit:
	$(GO) test $(TEST_FLAGS) ./...

test-integration:
	cd integration && $(GO) test $(TEST_FLAGS) ./...

# multihost runs zketcd instances in three network namespaces the test
# makes (each its own loopback and address on a bridge; ZooKeeper reached
# over it), forwarding over mutual TLS set up exactly as
# docs/operations.md "Instances on several hosts" says, the leader killed,
# and the default flags (~20 s). It needs root and ip(8) and skips
# otherwise; test-integration runs it too.
multihost: deps-zookeeper build
	cd integration && ZKETCD_BINARY="$(abspath $(BIN))/zketcd" $(GO) test $(TEST_FLAGS) -v ./multihost/

# kube-apiserver prints the path of the kube-apiserver binary, building it
# into $${ZKETCD_CACHE:-$$HOME/.cache/zketcd}/kube-apiserver-<version>/ once
# (~17 min cold on 2 cores; a no-op when cached).
KUBE_APISERVER_BUILD := integration/kube/build-kube-apiserver.sh
kube-apiserver:
	@out=$$($(KUBE_APISERVER_BUILD)) && printf '%s\n' "$$out" | tail -n 1

# e2e runs kube-apiserver (as a child process) on ZooKeeper through zketcd,
# every zketcd in the secure shape of docs/kubernetes.md (client TLS and
# certificates, authentication on, a ZooKeeper identity): integration/e2e,
# every scenario of integration/kubelab, the documented recipe with its
# backups (etcdctl and etcdutl, built by build-peers.sh), the move of a
# kube-apiserver's data from etcd to zketcd and back, `zketcd move` of the
# root under a serving kube-apiserver (integration/e2e/move_test.go), plus
# the checks of docker-compose.yml. Fails if kube-apiserver cannot be built.
E2E_FLAGS ?= -count=1 -timeout 30m -v
e2e: deps-zookeeper build
	@out=$$($(KUBE_APISERVER_BUILD)) || { echo "e2e: building kube-apiserver failed" >&2; exit 1; }; \
	bin=$$(printf '%s\n' "$$out" | tail -n 1); \
	[ -x "$$bin" ] || { echo "e2e: no kube-apiserver binary at '$$bin'" >&2; exit 1; }; \
	peers=$$($(PEERS_BUILD) etcdctl etcdutl) || { echo "e2e: building etcdctl/etcdutl failed" >&2; exit 1; }; \
	ctl=$$(printf '%s\n' "$$peers" | sed -n 's/^etcdctl=//p'); utl=$$(printf '%s\n' "$$peers" | sed -n 's/^etcdutl=//p'); \
	cd integration && KUBE_APISERVER="$$bin" ZKETCD_BINARY="$(abspath $(BIN))/zketcd" ETCDCTL="$$ctl" ETCDUTL="$$utl" \
		$(GO) test $(E2E_FLAGS) ./e2e/

# etcdctl-test runs the real etcdctl v3.7.3 against `zketcd dev` and etcd
# 3.7.3 with one command script and compares the outputs
# (integration/etcdctl). etcdctl and etcd are built once into
# $${ZKETCD_CACHE:-$$HOME/.cache/zketcd}/etcd-v3.7.3/ by build-peers.sh.
ETCDCTL_TEST_FLAGS ?= -race -count=1 -timeout 10m -v
PEERS_BUILD := integration/bench/build-peers.sh
etcdctl-test: deps-zookeeper build
	@out=$$($(PEERS_BUILD) etcdctl etcd) || { echo "etcdctl-test: building etcdctl/etcd failed" >&2; exit 1; }; \
	ctl=$$(printf '%s\n' "$$out" | sed -n 's/^etcdctl=//p'); etcd=$$(printf '%s\n' "$$out" | sed -n 's/^etcd=//p'); \
	[ -x "$$ctl" ] && [ -x "$$etcd" ] || { echo "etcdctl-test: no etcdctl/etcd binaries in: $$out" >&2; exit 1; }; \
	cd integration && ETCDCTL="$$ctl" ETCD_BINARY="$$etcd" ZKETCD_BINARY="$(abspath $(BIN))/zketcd" \
		$(GO) test $(ETCDCTL_TEST_FLAGS) ./etcdctl/

# snapshot-test moves data between etcd 3.7.3 and zketcd with snapshot files
# (integration/snapshot): etcdctl snapshot save against zketcd, etcdutl
# snapshot status/restore, etcd on the restored data dir, zketcd snapshot
# restore of etcd's file (library and command), bad inputs. etcdctl and
# etcdutl are built once into the cache by build-peers.sh.
SNAPSHOT_TEST_FLAGS ?= -race -count=1 -timeout 10m -v
snapshot-test: deps-zookeeper build
	@out=$$($(PEERS_BUILD) etcdctl etcdutl) || { echo "snapshot-test: building etcdctl/etcdutl failed" >&2; exit 1; }; \
	ctl=$$(printf '%s\n' "$$out" | sed -n 's/^etcdctl=//p'); utl=$$(printf '%s\n' "$$out" | sed -n 's/^etcdutl=//p'); \
	[ -x "$$ctl" ] && [ -x "$$utl" ] || { echo "snapshot-test: no etcdctl/etcdutl binaries in: $$out" >&2; exit 1; }; \
	cd integration && ETCDCTL="$$ctl" ETCDUTL="$$utl" ZKETCD_BINARY="$(abspath $(BIN))/zketcd" \
		$(GO) test $(SNAPSHOT_TEST_FLAGS) ./snapshot/

# demo runs the same experiment and prints it as a lab notebook
# (DEMO_FLAGS="-dir DIR" keeps the logs and data).
DEMO_FLAGS ?=
demo: deps-zookeeper build
	@out=$$($(KUBE_APISERVER_BUILD)) || { echo "demo: building kube-apiserver failed" >&2; exit 1; }; \
	bin=$$(printf '%s\n' "$$out" | tail -n 1); \
	[ -x "$$bin" ] || { echo "demo: no kube-apiserver binary at '$$bin'" >&2; exit 1; }; \
	cd integration && $(GO) run ./kubedemo -kube-apiserver "$$bin" -zketcd "$(abspath $(BIN))/zketcd" $(DEMO_FLAGS)

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

# fuzz runs each fuzz target for FUZZTIME. The default is an execution
# count, not a duration: a duration budget can end in a spurious "context
# deadline exceeded" failure on a loaded machine (Go issue 75804), while a
# count only runs slower. 300000 executions take ~6-20 s per target here.
FUZZTIME ?= 300000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEntry$$' -fuzztime $(FUZZTIME) ./internal/zkstore/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSnapshot$$' -fuzztime $(FUZZTIME) ./internal/zkstore/
	$(GO) test -run '^$$' -fuzz FuzzDecodeCompressedEntry -fuzztime $(FUZZTIME) ./internal/zkstore/
	$(GO) test -run '^$$' -fuzz FuzzDecodeCompressedSnapshot -fuzztime $(FUZZTIME) ./internal/zkstore/
	$(GO) test -run '^$$' -fuzz FuzzDecodeDelta -fuzztime $(FUZZTIME) ./internal/zkstore/
	$(GO) test -run '^$$' -fuzz FuzzTxn -fuzztime $(FUZZTIME) ./internal/translate/
	$(GO) test -run '^$$' -fuzz FuzzRange -fuzztime $(FUZZTIME) ./internal/translate/
	$(GO) test -run '^$$' -fuzz FuzzDecodeSnapshotDB -fuzztime $(FUZZTIME) ./internal/etcdformat/
	$(GO) test -run '^$$' -fuzz FuzzGatewayJSON -fuzztime $(FUZZTIME) ./internal/httpgw/
	$(GO) test -run '^$$' -fuzz FuzzClassify -fuzztime $(FUZZTIME) ./internal/httpgw/
	$(GO) test -run '^$$' -fuzz FuzzDecodeNeverPanics -fuzztime $(FUZZTIME) ./internal/auth/

# bench measures zketcd (on a standalone ZooKeeper and on a 3-member
# ensemble) against etcd 3.7.3 and kine 0.17.5 side by side, then the
# deployed shape: a 3-member etcd cluster, kine on PostgreSQL, 2 and 3
# zketcd instances on one root of a 3-member ensemble, the raw go-zookeeper
# floor of that ensemble and real kube-apiservers on etcd and zketcd (quick
# profile, ~45 min on 2 cores; the first run also builds the peers into
# $${ZKETCD_CACHE:-$$HOME/.cache/zketcd}, and the kube stacks kube-apiserver
# with integration/kube/build-kube-apiserver.sh, once, ~10-20 min)
# and rewrites docs/benchmarks.md and docs/bench/ (the standalone rows are
# compared with the docs/bench/results.json they replace). bench-long adds
# longer cells and recovery over 1M keys. Not run in CI. BENCH_FLAGS passes
# more zkbench flags (see -h), e.g. BENCH_FLAGS='-servers standalone'.
BENCH_FLAGS ?=
BENCH_BASELINE := $(if $(wildcard docs/bench/results.json),-baseline ../docs/bench/results.json)
bench: deps-zookeeper deps-postgresql build
	cd integration && $(GO) run ./bench/cmd/zkbench -profile quick -repo .. -zketcd ../$(BIN)/zketcd \
		$(BENCH_BASELINE) -md ../docs/benchmarks.md $(BENCH_FLAGS)
	$(MAKE) bench-scale

# bench-scale (also the last step of make bench) is issue 22's scale
# benchmark: a 3-member etcd 3.7.3 against zketcd on a 3-member ensemble
# (JVMs -Xmx3g), one stack at a time, at 100k, 300k and 1M kube-like
# objects (integration/kubedata, mean 3.2 KB): load, RSS of every process
# and ZooKeeper's zk_approximate_data_size, disk, a paginated LIST, a watch
# catching up, physical compaction with write/read p99 during it, a
# defragment, an instance and a whole-ensemble restart, and kube-apiserver's
# 10,000-object load over the 300k objects (~90 min on 2 cores; needs ~25 GB
# of disk and ~14 GB of memory at 1M). It rewrites its section of
# docs/benchmarks.md and docs/bench/scale.*. SCALE_FLAGS passes more zkbench
# flags, e.g. SCALE_FLAGS='-scale-sizes 100000,300000'.
SCALE_FLAGS ?=
bench-scale: deps-zookeeper build
	@kube=$$($(KUBE_APISERVER_BUILD) | tail -n 1) || kube=""; \
	cd integration && $(GO) run ./bench/cmd/zkbench -scale -repo .. -zketcd ../$(BIN)/zketcd \
		$${kube:+-kube-apiserver $$kube} -md ../docs/benchmarks.md $(SCALE_FLAGS)

# bench-tenants is issue 35's measurement (integration/bench/tenants*.go,
# cmd/zktenants): 100 tenants, each loaded with 500 kube-like objects
# and churned with a watch each, on one fleet (2 `zketcd serve --tenants`
# instances, a 3-member ZooKeeper ensemble, a client certificate per
# tenant), on one etcd 3.7.3 holding one tenant's worth and on one shared
# 3-member etcd in Kamaji's layout (/<tenant>/...): memory per tenant, per
# object and per byte, ZooKeeper sessions, connections and znodes,
# committers per instance, idle tenants; then a quiet tenant's put and
# linearizable-get latency alone, beside a neighbour flooding at its
# --requests-per-second limit (on its ZooKeeper session and on another) and
# beside one with no limit, with ZooKeeper's mntr and a CPU profile of the
# instance (~30 min on 2 cores; not in CI). It rewrites its section of
# docs/benchmarks.md and docs/bench/tenants.{json,md} and the plots; a
# hand-written docs/bench/tenants-analysis.md is embedded in the section.
# TENANTS_FLAGS passes more zktenants flags (-h), e.g. a smoke run:
# TENANTS_FLAGS='-tenants 4 -objects 50 -churn 5s -isolation-rounds 1 -isolation-phase 3s -md ../out/tenants/benchmarks.md'.
TENANTS_FLAGS ?=
bench-tenants: deps-zookeeper build
	cd integration && $(GO) run ./bench/cmd/zktenants -repo .. -zketcd ../$(BIN)/zketcd -md ../docs/benchmarks.md $(TENANTS_FLAGS)

# bench-move runs integration/e2e's move tests at bench size (not in CI):
# TestKubeAPIServerWhileItsRootMoves with MOVE_OBJECTS ConfigMaps and a churn
# of MOVE_RATE requests a second from MOVE_CLIENTS clients (the root moved
# to another root, then to a second ZooKeeper, with every check of the e2e
# run), the same cluster moved behind a TCP proxy from a shared etcd's
# prefix to zketcd (TestKubeAPIServerMovesFromASharedEtcdBehindAProxy) and
# from zketcd to etcd (TestKubeAPIServerMovesFromZketcdToEtcdBehindAProxy),
# then TestMoveCostByObjectCount at MOVE_COST_OBJECTS kube-like
# objects without kube-apiserver, once copying the whole log and once a base
# generation. It prints the figures (docs/benchmarks.md "Moving a root
# while it serves" quotes them); the output is kept in MOVE_OUT.
MOVE_OBJECTS ?= 10000
MOVE_RATE ?= 100
MOVE_CLIENTS ?= 8
MOVE_COST_OBJECTS ?= 10000,100000
MOVE_OUT ?= out/bench-move
bench-move: deps-zookeeper build
	@out=$$($(KUBE_APISERVER_BUILD)) || { echo "bench-move: building kube-apiserver failed" >&2; exit 1; }; \
	bin=$$(printf '%s\n' "$$out" | tail -n 1); mkdir -p $(MOVE_OUT); \
	cd integration && KUBE_APISERVER="$$bin" ZKETCD_BINARY="$(abspath $(BIN))/zketcd" \
		ZKETCD_MOVE_OBJECTS=$(MOVE_OBJECTS) ZKETCD_MOVE_RATE=$(MOVE_RATE) ZKETCD_MOVE_CLIENTS=$(MOVE_CLIENTS) \
		$(GO) test -count=1 -timeout 60m -v -run '^(TestKubeAPIServerWhileItsRootMoves|TestKubeAPIServerMovesFromASharedEtcdBehindAProxy|TestKubeAPIServerMovesFromZketcdToEtcdBehindAProxy)$$' ./e2e/ | tee $(abspath $(MOVE_OUT))/kube.log; \
	grep -q '^ok' $(abspath $(MOVE_OUT))/kube.log || exit 1; : > $(abspath $(MOVE_OUT))/cost.log; \
	for compact in "" 1; do \
		ZKETCD_BINARY="$(abspath $(BIN))/zketcd" ZKETCD_MOVE_COST_OBJECTS=$(MOVE_COST_OBJECTS) ZKETCD_MOVE_COST_COMPACT=$$compact \
		$(GO) test -count=1 -timeout 60m -v -run '^TestMoveCostByObjectCount$$' ./e2e/ | tee -a $(abspath $(MOVE_OUT))/cost.log; \
	done; \
	[ "$$(grep -c '^ok' $(abspath $(MOVE_OUT))/cost.log)" = 2 ]

bench-long: deps-zookeeper deps-postgresql build
	cd integration && $(GO) run ./bench/cmd/zkbench -profile long -repo .. -zketcd ../$(BIN)/zketcd \
		$(BENCH_BASELINE) -md ../docs/benchmarks.md $(BENCH_FLAGS)

# faults runs the 33 fault-injection scenarios of integration/faults (a real
# 3-member ZooKeeper ensemble and two zketcd processes on 127.0.0.1;
# ZooKeeper leaders and followers killed, the ensemble restarted, zketcd
# SIGSTOPped, killed and partitioned from ZooKeeper, the leader instance
# killed, paused and cut off from the follower for a short and a long
# while, a rolling restart of the ensemble, zketcd restarted onto another
# --zk list, a slow disk, a ZooKeeper follower cut off from its quorum under
# the zketcd leader, six on --read-lease (one on a ZooKeeper granting a
# shorter session timeout than asked), four with --commit-pipeline 8 (the
# leader killed and SIGSTOPped, the ZooKeeper leader killed, the leader's
# ZooKeeper link slowed), two instances both committing with
# --commit-pipeline 4 while one's ZooKeeper links are slow or reset for
# 50-200 ms at a time, and two over a log kept as the generation: the
# zketcd leader and the ZooKeeper leader killed, and three moves of the
# cluster to another root while it serves: the mover, zketcd A or the
# ZooKeeper leader killed during it) for
# FAULTS_DURATION of workload each, checks
# linearizability, watch guarantees, lost and duplicated writes and lease
# expiry, prints the summary table and writes it into docs/reliability.md
# (down to the marker line; the rest of the file is kept). make test runs a
# short variant (two scenarios, 12 s each).
# FAULTS_ARTIFACTS=DIR keeps every scenario's operations and watch events.
FAULTS_DURATION ?= 30s
FAULTS_ARTIFACTS ?=
faults: deps-zookeeper build
	cd integration/faults && FAULTS_DURATION=$(FAULTS_DURATION) FAULTS_REPORT=$(abspath docs/reliability.md) \
		FAULTS_ARTIFACTS=$(FAULTS_ARTIFACTS) ZKETCD_BINARY=$(abspath $(BIN))/zketcd \
		$(GO) test -count=1 -timeout 100m -run '^TestFaults$$'

# upgrade-test restarts two zketcd instances on one root, one at a time, from
# this build onto one patched to write a newer log entry format
# (integration/upgrade): the instance left on the old build refuses the new
# entries naming both versions, and nothing is lost. Builds zketcd twice.
upgrade-test: deps-zookeeper
	cd integration && ZKETCD_UPGRADE_TEST=1 $(GO) test -count=1 -timeout 20m -v ./upgrade/

# soak (not in CI) runs kube-apiserver-like load (integration/faults'
# workload: creates, updates and deletes, lists, leases granted and expired,
# watchers opened and closed, compaction every minute) against a 3-member
# ensemble and two zketcd processes for SOAK_DURATION, with one fault every
# SOAK_FAULT_EVERY (the make faults injectors in turn); it samples RSS, Go
# heap, goroutines, znodes and ZooKeeper's data size into SOAK_OUT/soak.csv
# and soak.png (out/soak by default, not committed; the figure
# docs/reliability.md shows is docs/img/soak.png, copied there by hand) and
# checks the whole history with the faults checker. SOAK_DURATION=5m makes
# a quick check.
SOAK_DURATION ?= 2h
SOAK_FAULT_EVERY ?= 3m
SOAK_OUT ?= $(abspath out/soak)
soak: deps-zookeeper build
	cd integration/faults && SOAK_DURATION=$(SOAK_DURATION) SOAK_FAULT_EVERY=$(SOAK_FAULT_EVERY) SOAK_OUT=$(SOAK_OUT) \
		ZKETCD_BINARY=$(abspath $(BIN))/zketcd $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v

# compose-test (not in CI; root) runs docker-compose.yml for real:
# integration/compose/compose-test.sh starts Debian's dockerd if none runs
# (with its host networking off), builds every image locally (debootstrap
# base with Debian's zookeeper, this host's Go toolchain, the kube-apiserver
# make e2e builds; nothing pulled), checks the file with Compose v1 and v2,
# runs the stack, checks /readyz, a create, a LIST and a WATCH through
# kube-apiserver and a key through etcdctl, takes it down, stops the daemon
# it started and restores the host's network settings (compared with those
# before). ~5 min warm; the first run also debootstraps (~5 min).
compose-test:
	integration/compose/compose-test.sh

clean:
	rm -rf $(BIN)
