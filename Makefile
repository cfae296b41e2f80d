# Every Go module in the repository (the root and the examples/bench modules).
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \;)

.PHONY: test race crash bench lint

test:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && go test -race -shuffle=on -count=1 ./...); done

race: test

# The failure tests: SIGKILL crash injection, and the integrity sweep at its
# full size under the race detector (make test runs it smaller under -race).
crash:
	MQLITE_INTEGRITY_MESSAGES=50000 go test -race -tags crash_injection -count=1 -timeout 30m -run 'Crash|IntegritySweep' ./...

bench:
	go test -run '^$$' -bench . -benchtime 20000x ./...

lint:
	@set -e; for m in $(MODULES); do (cd $$m && test -z "$$(gofmt -l .)" && go vet ./...); done
