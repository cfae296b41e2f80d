# Every Go module in the repository (the root and the examples/bench modules).
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \;)

.PHONY: test race crash bench lint screenshots

test:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && go test -race -shuffle=on -count=1 ./...); done

race: test

# The failure tests: SIGKILL crash injection (of a store's process, and of a
# broker under client load: TestBrokerCrash), and the integrity sweep at its
# full size under the race detector (make test runs it smaller under -race).
crash:
	MQLITE_INTEGRITY_MESSAGES=50000 go test -race -tags crash_injection -count=1 -timeout 30m -run 'Crash|IntegritySweep' ./...
	cd watermill && go test -race -tags stress -count=1 -timeout 25m -run 'TestPubSubStress' ./...

# Each benchmark with the work size docs/benchmark.md reports. Send and drain
# run three times over, so that mqlite and the raw baseline alternate.
bench:
	for i in 1 2 3; do go test -run '^$$' -bench 'BenchmarkSend$$' -benchtime 20000x ./outbox/; done
	go test -run '^$$' -bench BenchmarkSendTopic -benchtime 3000x ./outbox/
	for i in 1 2 3; do go test -run '^$$' -bench BenchmarkDrain -benchtime 1x ./internal/engine/; done
	go test -run '^$$' -bench 'BenchmarkLargeMessage|BenchmarkJanitor' -benchtime 1x ./internal/engine/
	go test -run '^$$' -bench 'BenchmarkStats' -benchtime 20x ./internal/engine/
	go test -run '^$$' -bench 'BenchmarkLatency/single' -benchtime 1000x ./internal/engine/
	go test -run '^$$' -bench 'BenchmarkLatency/load' -benchtime 1x -timeout 20m ./internal/engine/
	go test -run '^$$' -bench BenchmarkClaimCost -benchtime 3000x ./internal/engine/
	go test -run '^$$' -bench BenchmarkLoopLatency -benchtime 1000x ./consumer/
	go test -run '^$$' -bench BenchmarkLoopIdleCPU -benchtime 1x ./consumer/
	go test -run '^$$' -bench BenchmarkLoopThroughput -benchtime 20000x ./consumer/
	go test -run '^$$' -bench BenchmarkBroker -benchtime 50000x ./client/
	go test -run '^$$' -bench BenchmarkRelayJetStream -benchtime 20000x ./relay/nats/
	go test -run '^$$' -bench BenchmarkRelayWebhook -benchtime 20000x ./relay/webhook/
	go run -C bench .   # the peer table: mqlite, goqite, River, raw SQL (docs/benchmark.md)

lint:
	@set -e; for m in $(MODULES); do (cd $$m && test -z "$$(gofmt -l .)" && go vet ./...); done

# docs/dashboard.png, taken anew by the dashboard's browser test (it needs
# chromium): the test keeps its screenshots as artifacts, and the one of the
# queues view becomes the docs' picture.
screenshots:
	rm -rf .screenshots && mkdir .screenshots
	go test -count=1 -run 'TestDashboardChromium$$' -artifacts -outputdir $(CURDIR)/.screenshots ./broker/
	cp "$$(find .screenshots -name dashboard.png | head -1)" docs/dashboard.png
	rm -rf .screenshots
