# The two commands of the README: `make run` and `make test`.
GO ?= go


.PHONY: run test test-quick vet build bench

run:
	$(GO) run ./cmd/ankusa

build:
	$(GO) build -o bin/ankusa ./cmd/ankusa

vet:
	$(GO) vet ./...

# The whole suite, as CI runs it: vet, every package, the race detector on
# the core packages, and the long drills (crash drill with kill -9).
test:
	./scripts/test.sh

# The inner loop: skips the long drills (-short).
test-quick:
	$(GO) test -short ./...

bench:
	$(GO) run ./cmd/ankusa bench
