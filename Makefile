# Every Go module in the repository: the root (the library), each module
# that keeps a heavy dependency away from a library user (cmd/mqlite, the
# NATS, RabbitMQ and Kafka sinks, replicate (Litestream), the dashboard's
# browser test, Watermill) and the examples/bench modules. Every target below runs over all of them.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \;)

# staticcheck at a pinned version, fetched from the module proxy by go run.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test race crash soak bench bench-brokers bench-postgres lint screenshots release tidy

test:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && go test -race -shuffle=on -count=1 -timeout 20m ./...); done

race: test

# The failure tests: SIGKILL crash injection (of a store's process, and of a
# broker under client load: TestBrokerCrash), the integrity sweep at its
# full size under the race detector (make test runs it smaller under -race),
# and power loss (powerloss/, its own module; make test runs it short, under
# -race): 100 cuts per scenario and synchronous setting, and every step of a
# Backup and of an upgrade, without -race: the workers are that test binary,
# and SQLite under the race detector runs ten times slower. Every module is
# searched, so cmd/mqlite's TestStandbyTakeoverCrash and relay/kafka's
# TestRelayCrashDuplicates run too. relay/nats's cluster tests
# (TestClusterRelayCrash, TestClusterLeaderLoss at 20,000 messages; three
# servers, relay workers and leader nodes SIGKILLed) run without
# -race, as power loss does: under the race detector the worker relays too
# slowly to reach its kill points in time. internal/crashtest's PostgreSQL
# tests (TestCrashInjectionPostgres, TestCrashLoopTxPostgres,
# TestCrashPostgresServer: the server itself SIGKILLed and restarted) run on
# the shared server and on a server of their own; without PostgreSQL they
# skip.
crash:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && MQLITE_INTEGRITY_MESSAGES=50000 go test -race -tags crash_injection -count=1 -timeout 30m -run 'Crash|IntegritySweep' -skip 'TestCluster' ./...); done
	cd relay/nats && go test -tags crash_injection -count=1 -timeout 20m -run 'TestClusterRelayCrash|TestClusterLeaderLoss' .
	cd watermill && go test -race -tags stress -count=1 -timeout 25m -run 'TestPubSubStress' ./...
	cd powerloss && MQLITE_POWERLOSS_CUTS=100 go test -count=1 -timeout 30m -v -run 'TestPowerLoss' .

# The store's crash test at 1,000 SIGKILLs, outside CI (about 35 minutes
# under the race detector): every acknowledged commit present after each
# kill, no delivery past the bound; then LoopTx's at 1,000 SIGKILLs: every
# effect row present exactly when its message is completed, never twice
# (docs/conformance.md gives the figures).
soak:
	cd internal/crashtest && MQLITE_CRASH_KILLS=1000 go test -race -tags crash_injection -count=1 -timeout 2h -v -run 'TestCrashInjection$$' .
	cd internal/crashtest && MQLITE_CRASH_KILLS=1000 go test -race -tags crash_injection -count=1 -timeout 2h -v -run 'TestCrashLoopTx$$' .

# Each benchmark with the work size docs/benchmark.md reports. Send and drain
# run three times over, so that mqlite and the raw baseline alternate.
bench:
	for i in 1 2 3; do go test -run '^$$' -bench 'BenchmarkSend$$' -benchtime 20000x ./outbox/; done
	go test -run '^$$' -bench BenchmarkSendTopic -benchtime 3000x ./outbox/
	for i in 1 2 3; do go test -run '^$$' -bench BenchmarkDrain -benchtime 1x ./internal/engine/; done
	for i in 1 2 3; do go test -run '^$$' -bench BenchmarkHotPath -benchtime 1x ./internal/engine/; done   # the hot path's levers beside raw SQL
	go test -run '^$$' -bench 'BenchmarkLargeMessage|BenchmarkJanitor|BenchmarkPages' -benchtime 1x ./internal/engine/
	go test -run '^$$' -bench 'BenchmarkStats' -benchtime 20x ./internal/engine/
	go test -run '^$$' -bench 'BenchmarkLatency/single' -benchtime 1000x ./internal/engine/
	go test -run '^$$' -bench 'BenchmarkLatency/load' -benchtime 1x -timeout 20m ./internal/engine/
	go test -run '^$$' -bench BenchmarkClaimCost -benchtime 3000x ./internal/engine/
	go test -run '^$$' -bench BenchmarkLoopLatency -benchtime 1000x ./consumer/
	go test -run '^$$' -bench BenchmarkLoopIdleCPU -benchtime 1x ./consumer/
	go test -run '^$$' -bench BenchmarkLoopThroughput -benchtime 20000x ./consumer/
	go test -run '^$$' -bench BenchmarkEightProducers -benchtime 10000x -count 3 ./outbox/   # group commit beside raw SQL, NORMAL and FULL
	go test -run '^$$' -bench BenchmarkGroupLatency -benchtime 10000x -count 3 ./consumer/
	go test -run '^$$' -bench 'BenchmarkBroker$$' -benchtime 50000x ./client/
	go test -run '^$$' -bench 'BenchmarkBrokerMemory|BenchmarkStreamCommitStall' -benchtime 1x ./broker/
	go test -run '^$$' -bench BenchmarkBrokerPeekRSS -benchtime 1x -timeout 30m ./client/
	go test -C relay/nats -run '^$$' -bench BenchmarkRelayJetStream -benchtime 20000x .
	go test -run '^$$' -bench BenchmarkRelayWebhook -benchtime 20000x ./relay/webhook/
	go run -C bench .   # the peer table: mqlite, goqite, River, raw SQL (docs/benchmark.md)
	for i in 1 2 3; do (cd powerloss && go test -run '^$$' -bench BenchmarkSyncMode -benchtime 3000x .); done   # FULL beside NORMAL (docs/operations.md, "Power loss")
	$(MAKE) bench-brokers
	$(MAKE) bench-postgres

# mqlite on PostgreSQL beside River (its pgx driver) and a hand-written
# SKIP LOCKED queue, on a database of the benchmark's own on the local
# server (127.0.0.1:5432; -url for another), three runs a cell
# (docs/benchmark.md, "On PostgreSQL"); then the send rows again with every
# commit waiting for the disk (synchronous_commit on).
bench-postgres:
	go run -C bench ./postgres -v
	go run -C bench ./postgres -v -sync on -rows '^send,'

# The broker's five scenarios beside the local RabbitMQ (5672) and JetStream
# (4222) in one run, with each server's CPU per message (docs/benchmark.md,
# "The consume path against RabbitMQ and JetStream"). A side whose server
# is down is left out (MQLITE_REQUIRE_SERVICES=1: the run fails instead).
bench-brokers:
	go run -C bench/brokers . -v

# gofmt, go vet and staticcheck over every module (staticcheck with the
# build tags of the crash and stress tests, so that it sees their helpers),
# then citecheck: no comment in Go code, tests included, cites a document outside the
# repository.
lint:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && \
		unformatted="$$(gofmt -l .)" && if [ -n "$$unformatted" ]; then echo "gofmt -l: $$unformatted"; exit 1; fi && \
		go vet ./... && go run $(STATICCHECK) -tags crash_injection,stress ./...); done
	go run ./internal/citecheck .

# docs/dashboard.png, taken anew by the dashboard's browser test (broker/chromium, which needs
# chromium): the test keeps its screenshots as artifacts, and the one of the
# queues view becomes the docs' picture.
screenshots:
	rm -rf .screenshots && mkdir .screenshots
	go test -C broker/chromium -count=1 -run 'TestDashboardChromium$$' -artifacts -outputdir $(CURDIR)/.screenshots .
	cp "$$(find .screenshots -name dashboard.png | head -1)" docs/dashboard.png
	rm -rf .screenshots

# Tags every module at VERSION (v0.1.0, cmd/mqlite/v0.1.0, relay/nats/v0.1.0,
# ...: Go's tags for a repository of several modules) after checking that
# every go.mod requires the others at VERSION and names no replace, that
# go.work builds each from the checkout, that nothing is uncommitted and that
# CHANGELOG.md has the version's section. DRY_RUN=1 checks and prints the
# tags without creating them. The tags stay local: pushing is the
# releaser's step (internal/release's TestTagDryRun runs both modes).
# go run ./internal/release bump vX.Y.Z moves every go.mod and go.work to
# the next version first.
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z [DRY_RUN=1]"; exit 2; }
	go run ./internal/release tag $(if $(DRY_RUN),-dry-run) $(VERSION)

# go mod tidy in every module. go mod tidy (and go get) ignore go.work, and
# the modules require each other at a version no proxy serves before it is
# tagged: this publishes the tree at that version to a proxy on disk, tidies
# each module against it, and keeps those copies' checksums out of go.sum.
tidy:
	go run ./internal/release tidy
