# Agent-Reach — the two commands a newcomer needs are `make run` and `make test`.
GO       ?= go
BIN      := $(CURDIR)/bin
TESTTIME ?= 20m
FUZZTIME ?= 1m
NATSCLI_VERSION := v0.5.0
NATS     := $(BIN)/nats
# The Python SDK's package and the venv its tests, the conformance runs and
# the Go tests that start Python MCP servers use (defined before any rule
# names them: make expands prerequisites as it reads them).
VENV     := $(CURDIR)/.venv
PYPKG    := agentkit/python

.PHONY: run test go-test fuzz build vet fmt-check bench tools chromium clean chaos chaos-short \
	sdk-test mypy pytest conformance-python conformance-node conformance-python-auth conformance-node-auth

## bench: every benchmark scenario (about 12 minutes on 2 cores; see BENCHMARKS.md).
bench: build
	$(BIN)/agentreach bench all --json-file bench.json

## run: the local stack — embedded NATS, a dispatcher and demo agents.
## (Built, then run directly, so that Ctrl-C reaches only the stack.)
run: build
	exec $(BIN)/agentreach up --demo

## build: the agentreach binary in ./bin, stamped with the VCS revision that
## `agentreach version` prints (-buildvcs=auto overrides a GOFLAGS that turns
## it off).
build:
	$(GO) build -buildvcs=auto -o $(BIN)/agentreach ./cmd/agentreach

## test: every part of the check, in this order: vet, the format check,
## every Go test with the race detector (which replays every fuzz target's
## seeds and committed corpus), the chaos suite's short form, then mypy --strict and the pytest suite of
## the Python SDK, and the conformance suite against the Python and the
## Node.js agents, without and with --auth. Each part runs even when an earlier one failed; the run
## fails at the end, listing every part that failed (.ci/parts).
## It does not explore new fuzz inputs: that is random, so a run could fail
## on an input no change brought in — `make fuzz` does it.
TEST_PARTS := vet fmt-check go-test chaos-short mypy pytest conformance-python conformance-node \
	conformance-python-auth conformance-node-auth
test:
	@MAKE="$(MAKE)" .ci/parts $(TEST_PARTS)

## go-test: every Go test with -race. The nats CLI is installed into ./bin
## first: a test checks the wire contract with it; and Chromium, when
## missing: a test drives the dashboard in it and keeps its screenshot as
## .artifacts/dashboard.png; and ./.venv: the MCP connector's tests run a
## fastmcp server in it.
go-test: tools chromium $(VENV)/.installed
	mkdir -p $(CURDIR)/.artifacts
	AGENTREACH_NATS_CLI=$(NATS) AGENTREACH_SCREENSHOT=$(CURDIR)/.artifacts/dashboard.png \
		AGENTREACH_PYTHON=$(VENV)/bin/python \
		$(GO) test -race -count=1 -timeout $(TESTTIME) ./...

## chaos: the chaos suite (integration/chaos, build tag chaos): a 3-node
## nats-server cluster of real processes with deploy/nats/common.conf's
## settings (R3, sync_interval always, cluster ping_interval 1 s), two
## dispatcher processes, four agents and a steady durable and direct load,
## through a node bounce, a dispatcher SIGKILL and SIGSTOP, every agent
## killed together, and — in network namespaces, as root — a minority
## partition, the isolation of the node leading every JetStream group, and
## a flapping link. Each scenario prints its ledger (accepted, lost,
## doubled, executed twice), its time to converge and what the fault cost;
## any lost, doubled or twice-executed task, or convergence over 5 s, fails
## it. The nats-server is the one go.mod pins, built into ./bin
## (docs/operations.md, "Chaos: what each fault costs").
CHAOSTIME ?= 30m
chaos: build
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2
	AGENTREACH_CHAOS_BIN=$(BIN) $(GO) test -tags chaos -count=1 -v -timeout $(CHAOSTIME) ./integration/chaos

## chaos-short: the chaos suite's short form, a part of `make test` (about
## 2 minutes on 2 cores): the scenarios that need no network namespace —
## node bounce, dispatcher SIGKILL, agents killed together — on loopback.
CHAOS_SHORT := ^(TestNodeBounce|TestDispatcherKill|TestAgentsKilledTogether)$$
chaos-short: build
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2
	AGENTREACH_CHAOS_BIN=$(BIN) $(GO) test -tags chaos -count=1 -v -timeout 5m -run '$(CHAOS_SHORT)' ./integration/chaos

## fuzz: every fuzz target (each package's fuzz_test.go; .ci/fuzz finds them
## with go test -list) for $(FUZZTIME) each, one go test -fuzz per target.
## A failing input fails the run and is written to
## <package>/testdata/fuzz/<Target>/<hash>; reproduce it with
##   go test -run='^<Target>/<hash>$' ./<package>
## Plain go test runs it from then on, with the seeds: commit it with the fix.
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) .ci/fuzz

## sdk-test: the Python SDK (agentkit/python) in ./.venv with pinned packages,
## mypy --strict over it and its pytest suite, then the conformance suite against the Python agent and
## the Node.js agent (examples/node, after npm ci), each without and with
## --auth (docs/conformance.md#auth); each runs even when another failed.
sdk-test:
	@MAKE="$(MAKE)" .ci/parts mypy pytest conformance-python conformance-node conformance-python-auth conformance-node-auth

## mypy: the Python SDK's sources type-check under mypy --strict (pyproject.toml).
mypy: $(VENV)/.installed
	cd $(PYPKG) && $(VENV)/bin/python -m mypy src

pytest: build tools $(VENV)/.installed
	cd $(PYPKG) && AGENTREACH_BIN=$(BIN)/agentreach AGENTREACH_NATS_CLI=$(NATS) $(VENV)/bin/python -m pytest -q

conformance-python: build $(VENV)/.installed
	$(BIN)/agentreach conformance -- $(VENV)/bin/python -m agentreach.conformance

conformance-node: build examples/node/node_modules/.package-lock.json
	$(BIN)/agentreach conformance -- node examples/node/agent.mjs

## conformance-python-auth, conformance-node-auth: the same with --auth.
conformance-python-auth: build $(VENV)/.installed
	$(BIN)/agentreach conformance --auth -- $(VENV)/bin/python -m agentreach.conformance

conformance-node-auth: build examples/node/node_modules/.package-lock.json
	$(BIN)/agentreach conformance --auth -- node examples/node/agent.mjs

$(VENV)/.installed: $(PYPKG)/constraints.txt $(PYPKG)/pyproject.toml $(shell find $(PYPKG)/src -name '*.py' 2>/dev/null)
	test -x $(VENV)/bin/pip || python3 -m venv $(VENV)
	PIP_CONSTRAINT=$(CURDIR)/$(PYPKG)/constraints.txt $(VENV)/bin/pip install -q --disable-pip-version-check \
		-c $(PYPKG)/constraints.txt "./$(PYPKG)[test]"
	touch $@

examples/node/node_modules/.package-lock.json: examples/node/package-lock.json
	cd examples/node && npm ci --no-audit --no-fund

## tools: natscli $(NATSCLI_VERSION) in ./bin (skipped when already there).
tools: $(NATS)
$(NATS):
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

## chromium: Debian's chromium (/usr/bin/chromium) for the dashboard's browser
## test, installed with apt-get when missing (as root, as CI runs); quiet when
## it is there. Without it the test fails saying so: it never skips. apt-get
## waits up to 10 minutes for another's dpkg lock (two test runs at once on a
## fresh machine) instead of failing at once; a list update that fails still
## lets the install try with the lists there are.
APT_LOCK := -o DPkg::Lock::Timeout=600
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "chromium: installing Debian's chromium for the dashboard test (apt-get)"; \
		{ apt-get $(APT_LOCK) update -qq || true; DEBIAN_FRONTEND=noninteractive apt-get $(APT_LOCK) install -y -qq chromium >/dev/null; } || \
		{ echo "chromium: could not install it; the dashboard test needs /usr/bin/chromium (or AGENTREACH_CHROMIUM)"; exit 1; }; }

vet:
	$(GO) mod download
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

clean:
	rm -rf $(BIN) .agentreach $(VENV) examples/node/node_modules
