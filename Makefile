# The two commands of the README: `make run` and `make test`.
GO ?= go

# Build information stamped into the binary (`ankusa version`, GET /health).
# Outside a git checkout (the Docker build context has no .git) pass them:
#   make build VERSION=v1.2.3 COMMIT=0123abcd
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
OUT     ?= bin/ankusa
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: run test test-quick vet build bench drill-fleet sim

run:
	$(GO) run ./cmd/ankusa

# The one release build: a static binary (CGO_ENABLED=0) with build info.
# The Dockerfile's build stage runs this target, so the image holds exactly
# what this produces (test/deploy checks both).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(OUT) ./cmd/ankusa

vet:
	$(GO) vet ./...

# The whole suite, as CI runs it: vet, every package, the race detector on
# the core packages, the long drills (crash drill with kill -9), and the
# deployment artefacts checked by helm, kubeconform and promtool.
test:
	./scripts/test.sh

# The inner loop: skips the long drills (-short).
test-quick:
	$(GO) test -short ./...

bench:
	$(GO) run ./cmd/ankusa bench

# The fleet drill at a longer pace (make test runs it bounded): three
# nats-server processes (R3 stream), the loopback Redis and Postgres,
# two ankusa nodes; two host losses and a log outage, in dual and disk.
# PHASE_MS and RATE tune it. Prints the loadgen verify figures of each mode.
PHASE_MS ?= 6000
RATE ?= 150
drill-fleet:
	ANKUSA_DRILL_PHASE_MS=$(PHASE_MS) ANKUSA_DRILL_RATE=$(RATE) $(GO) test -count=1 -v -timeout 30m -run TestFleetDrill ./test/fleet
# The deterministic fault simulator (docs/testing.md, "Simulation"). make sim
# runs the default 1000 schedules; SEED=n replays one schedule (twice: the
# traces must match) and prints its trace; N=100000 runs long, from START
# (default 1); EXCLUDE=a,b overrides the fault classes left out (EXCLUDE=
# for none).
SIM_FLAGS = $(if $(SEED),-sim.seed=$(SEED)) $(if $(N),-sim.n=$(N)) $(if $(START),-sim.start=$(START)) \
	$(if $(filter command line,$(origin EXCLUDE)),-sim.exclude=$(EXCLUDE))
sim:
	$(GO) test -count=1 -timeout 0 -v -run '^TestSim$$' ./internal/sim $(SIM_FLAGS)
