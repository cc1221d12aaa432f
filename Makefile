# Everything goes through the project's own virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

# The suite on every core, each module (or group of modules sharing a server) whole on one
# worker, the longest first (tests/scheduling.py). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --no-loadscope-reorder

# The main phase's JUnit report: each test's time (`python -m tests.scheduling $(TEST_REPORT)`
# refreshes the scheduler's weights from it).
TEST_REPORT := .cache/test-report.xml

# The sandbox image's build cache (npm tree, catalogs), shared by the tests.
SANDBOX_CACHE := .cache/sandbox

.PHONY: run test test-needs setup system n8n contract client sandbox-client client-test sandbox-image lint typecheck proto proto-check bench clean

## run: set up, then serve on the embedded defaults (127.0.0.1:50051, SQLite, gVisor sandboxes),
## building the bundled example workflow through the API once serving and printing the result;
## the sandbox service API (n8n's sandbox provider) on 127.0.0.1:8080
run: setup
	$(BIN)/instance-ai serve --sandbox-api 127.0.0.1:8080 --build-example examples/order-intake.workflow.ts

## test: set up everything the tests need, then lint, type-check and run the suite (its
## sandboxes under the default runtime, gVisor here, driven by runsc itself), then the attack
## and fault suites again under the other runtime (runc, through Docker)
# Bytecode written and read even where the environment says not to (PYTHONDONTWRITEBYTECODE):
# else every server and CLI the suite starts compiles the product's ~300 modules again (~0.7
# CPU-s a process, hundreds of processes) and each pytest worker rewrites every test module
# (collection 16 s -> 9 s). __pycache__ is ignored by git, the image's hash and the wheel.
test: export PYTHONDONTWRITEBYTECODE :=
test: test-needs
	$(BIN)/pytest $(PARALLEL) --durations=30 --junitxml=$(TEST_REPORT)
	INSTANCE_AI_SANDBOX_RUNTIME=runc $(BIN)/pytest $(PARALLEL) -m "attack or fault"

# What the suite needs, made side by side: on a cold machine the n8n install and the image
# build wait mostly on the package registries while the checks and npm trees use the cores
# (each target's output printed whole as it ends).
TEST_NEEDS := setup n8n contract client sandbox-client lint typecheck
test-needs:
	$(MAKE) --no-print-directory -j 4 --output-sync=target $(TEST_NEEDS)

setup: system $(INSTALLED) sandbox-image

## sandbox-image: build the sandbox image offline (a no-op when its content hash exists)
sandbox-image: system $(INSTALLED)
	$(BIN)/instance-ai sandbox build-image --cache-dir $(SANDBOX_CACHE)

system:
	./scripts/setup-system

## n8n: install n8n and its Node 24 for the n8n-instance tests (cached by version, outside
## the checkout, so fresh clones on one machine share it); with the system's Python, so that
## a cold install (minutes on the registry) need not wait for the project's environment
n8n: system
	$(PYTHON) -m instance_ai_cli.n8n_install

## contract: n8n's event contract (@n8n/api-types, pinned in tests/contract), which every
## event the tests' conversations stream is checked against (npm's cache makes a re-run quick)
CONTRACT_DEPS := tests/contract/node_modules/.package-lock.json
contract: $(CONTRACT_DEPS)

$(CONTRACT_DEPS): tests/contract/package-lock.json
	cd tests/contract && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

## sandbox-client: n8n's own sandbox service client (@n8n/sandbox-client, pinned in
## tests/sandbox_client), which the sandbox API's tests drive against the service
SANDBOX_CLIENT_DEPS := tests/sandbox_client/node_modules/.package-lock.json
sandbox-client: $(SANDBOX_CLIENT_DEPS)

$(SANDBOX_CLIENT_DEPS): tests/sandbox_client/package-lock.json
	cd tests/sandbox_client && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

## client: the TypeScript client's npm dependencies (clients/typescript: its generator,
## compiler and runtime), which `make proto` and the client's tests need
CLIENT_DEPS := clients/typescript/node_modules/.package-lock.json
client: $(CLIENT_DEPS)

$(CLIENT_DEPS): clients/typescript/package-lock.json
	cd clients/typescript && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

## client-test: the TypeScript client's Node tests against a real server (also in `make test`)
client-test: setup client
	$(BIN)/pytest tests/test_typescript_client.py

$(INSTALLED): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11 or newer is needed")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(INSTALLED)
	$(BIN)/mypy

## proto: regenerate the Python and TypeScript code of the gRPC contract (commit the result)
proto: $(INSTALLED) client
	$(BIN)/python proto/generate.py

proto-check: $(INSTALLED) client
	$(BIN)/python proto/generate.py --check

## bench: benchmarks, each printed beside a baseline measured in the same run, then one
## summary table of every figure (bench/summary.py; docs/performance.md keeps the latest)
BENCH_SUMMARY := .cache/bench-summary.jsonl
bench: export INSTANCE_AI_BENCH_SUMMARY = $(abspath $(BENCH_SUMMARY))
bench: setup n8n
	mkdir -p $(dir $(BENCH_SUMMARY)) && rm -f $(BENCH_SUMMARY)
	$(BIN)/python -m bench.events
	$(BIN)/python -m bench.sandbox
	$(BIN)/python -m bench.ready
	$(BIN)/python -m bench.sandbox_service
	$(BIN)/python -m bench.sandbox_runtimes
	$(BIN)/python -m bench.runsc
	$(BIN)/python -m bench.build
	$(BIN)/python -m bench.verify
	$(BIN)/python -m bench.agent
	$(BIN)/python -m bench.eval
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.relay
	$(BIN)/python -m bench.sandbox_browser
	$(BIN)/python -m bench.instance
	$(BIN)/python -m bench.replicas
	$(BIN)/python -m bench.summary $(BENCH_SUMMARY)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache clients/typescript/dist
