# wiscat: `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# A plain `make` lists the targets: it neither runs the whole suite nor installs anything.
.DEFAULT_GOAL := help
.PHONY: all help venv lock run test bytecode test-unit test-integration test-containers base-images soak fuzz mutants mutants-sample lint format bench schema settings-doc demo chromium promtool pgbouncer postgresql opentracker mosquitto podman clean

all: lint test ## lint, then the whole test suite

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 20

# The editable install is setuptools' strict mode: build/__editable__.*/wiscat is a tree of links to
# the files of services/, shared/ and migrations/, so that mypy and import-linter see the wiscat
# package as installed. A file added or removed changes its folder, which makes the tree again.
PACKAGE_DIRS := $(shell find services shared migrations -type d -not -name __pycache__ 2>/dev/null)

$(STAMP): pyproject.toml requirements/dev.txt $(PACKAGE_DIRS)
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c requirements/dev.txt --config-settings editable_mode=strict \
		-e '.[embedded,test,lint]'
	touch $(STAMP)

venv: $(STAMP) ## create .venv and install wiscat with its test and lint tools

# The lock files pin every package, for Linux on x86_64 and Python 3.11 (the image's and CI's):
# requirements/node.txt what a node runs (make run, the image), requirements/dev.txt that and the
# test and lint tools (make venv, CI). Installs take them as pip constraints. uv resolves them.
LOCK := uv pip compile pyproject.toml --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--only-binary atheris --custom-compile-command "make lock" --quiet

lock: ## resolve requirements/*.txt again from pyproject.toml (after a dependency changed)
	test -x .lock-tools/bin/uv || { $(PYTHON) -m venv .lock-tools && .lock-tools/bin/pip install --quiet uv; }
	.lock-tools/bin/$(LOCK) --extra embedded -o requirements/node.txt
	.lock-tools/bin/$(LOCK) --all-extras -o requirements/dev.txt

# make run installs what a node needs and the embedded PostgreSQL, not the test and lint tools.
RUN_STAMP := $(VENV)/.installed-run

$(RUN_STAMP): pyproject.toml requirements/node.txt $(PACKAGE_DIRS)
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c requirements/node.txt --config-settings editable_mode=strict \
		-e '.[embedded]'
	touch $(RUN_STAMP)

run: $(RUN_STAMP) ## start a node (embedded PostgreSQL unless WISCAT_DATABASE_URL is set)
	$(BIN)/wiscat run

# Workers the suite runs on (pytest-xdist), each with its own embedded PostgreSQL; a test file
# stays on one worker (its module fixtures are built once). Much of the suite waits on processes
# and servers: on two cores, three workers keep both busy where two leave a fifth of the time idle.
TEST_WORKERS ?= 3

test: $(STAMP) bytecode chromium promtool pgbouncer opentracker mosquitto ## the whole suite on a real PostgreSQL (WISCAT_TEST_DATABASE_URL or embedded)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadscope

# Where PYTHONDONTWRITEBYTECODE is set (as in many images), every process compiled wiscat from
# source as it started: 0.4 s of CPU for each command, service and page worker the tests start.
# Python still reads bytecode written beforehand, and compiles again whatever changed since.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 build/__editable__.*/wiscat tools >/dev/null

chromium: ## install Debian's chromium when missing (the dashboard's browser test drives it)
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the dashboard's browser test"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

promtool: ## install Debian's prometheus package when promtool is missing (the alert rules' tests run it)
	@command -v promtool >/dev/null 2>&1 || { \
		echo "installing Debian's prometheus package for promtool (the alert rules' tests)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus; }

postgresql: ## install Debian's postgresql when missing (the benchmark runs a throwaway cluster of it)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing Debian's postgresql for the benchmark's second server"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends postgresql; }

pgbouncer: ## install Debian's pgbouncer when missing (the connection pooler's tests run one)
	@command -v pgbouncer >/dev/null 2>&1 || test -x /usr/sbin/pgbouncer || { \
		echo "installing Debian's pgbouncer for the connection pooler's tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends pgbouncer; }

opentracker: ## install Debian's opentracker when missing (the registry's tracker tests run it)
	@command -v opentracker >/dev/null 2>&1 || { \
		echo "installing Debian's opentracker for the registry's tracker tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends opentracker; }

mosquitto: ## install Debian's mosquitto when missing (the WIS 2.0 announcement tests run one)
	@command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto || { \
		echo "installing Debian's mosquitto for the WIS 2.0 announcement tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends mosquitto; }

# Podman from Debian's packages, rootful, with runc and netavark (its network); debootstrap builds
# the base images where no container registry is reached (docs/deploy.md).
CONTAINER_PACKAGES := podman podman-compose runc netavark aardvark-dns iptables debootstrap

podman: ## install Debian's podman, podman-compose and debootstrap when missing (make test-containers)
	@dpkg -s $(CONTAINER_PACKAGES) >/dev/null 2>&1 || { \
		echo "installing Debian's $(CONTAINER_PACKAGES)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		$$SUDO apt-get install -y -qq --no-install-recommends $(CONTAINER_PACKAGES); }

base-images: podman ## build the Python, PostgreSQL and nginx base images from Debian's packages when missing
	deploy/containers/base-images.sh

# Builds the image from a clean copy of the checkout, starts compose.yaml as two GISCs, then
# compose.ha.yaml and its failover (the base images are built first when missing or stale, kept
# after): not part of make test; as root.
test-containers: $(STAMP) podman mosquitto ## the image built, compose.yaml and compose.ha.yaml started for real (podman; < 10 min)
	timeout 1200 $(BIN)/pytest --timeout 1100 -s tests/containers

test-unit: $(STAMP) ## the fast, pure tests only
	$(BIN)/pytest tests/unit

PROPERTY_TESTS := tests/unit/test_dates_properties.py tests/integration/test_text_properties.py \
	tests/integration/test_sync_properties.py

MESH_SEEDS := 1 2 3
LOAD_SOAK := WISCAT_LOAD_RECORDS=100000 WISCAT_LOAD_HARVEST_RECORDS=10000 \
	WISCAT_LOAD_SECONDS=600 WISCAT_SOAK_SECONDS=600

soak: $(STAMP) bytecode ## long trials outside make test, each bounded in time (P17, D01, H01, F01-F03, L01-L05, harvester workers, a 60 s broker outage, a 5-minute silent hint reader)
	WISCAT_LATE_COMMIT_TRIALS=100 timeout 1800 $(BIN)/pytest tests/e2e/test_late_commit.py -k randomised
	WISCAT_CRASH_TRIALS=50 timeout 1800 $(BIN)/pytest tests/e2e/test_crash_loop.py
	WISCAT_WORKER_LINKS=600 timeout 900 $(BIN)/pytest --timeout 840 tests/e2e/test_harvester_workers.py
	WISCAT_WIS2_OUTAGE_SECONDS=60 timeout 600 $(BIN)/pytest tests/integration/test_wis2_outage.py
	WISCAT_SILENT_READER_SECONDS=300 timeout 600 $(BIN)/pytest --timeout 420 tests/e2e/test_silent_reader.py
	for seed in $(MESH_SEEDS); do \
		WISCAT_MESH_SEED=$$seed WISCAT_MESH_FAULT_SECONDS=120 \
			timeout 600 $(BIN)/pytest --timeout 540 tests/e2e/test_mesh_faults.py || exit 1; \
	done
	WISCAT_HYPOTHESIS_PROFILE=soak timeout 3600 $(BIN)/pytest --timeout 1800 $(PROPERTY_TESTS)
	$(LOAD_SOAK) timeout 3600 $(BIN)/pytest --timeout 1800 -rP tests/e2e/test_load.py

# Each row of docs/reliability.md breaks its rule in tests/mutants/<ROW>.toml; its tests must
# fail (tools/mutants.py). CI runs a sample: from a place chosen by the commit, for MUTANTS_SECONDS.
MUTANTS_SECONDS ?= 300

mutants: $(STAMP) ## apply every mutation of tests/mutants in a scratch copy: the row's tests must fail
	$(BIN)/python -m tools.mutants

mutants-sample: $(STAMP) ## the mutations CI runs: MUTANTS_SECONDS (300) of them, from a place the commit chooses
	$(BIN)/python -m tools.mutants --sample $(MUTANTS_SECONDS) --seed "$$(git rev-parse HEAD)"

FUZZ_SECONDS ?= 600

fuzz: $(STAMP) ## fuzz the parsers FUZZ_SECONDS (600) each (F04), then the OAI, admin and registry API (F05)
	WISCAT_FUZZ_SECONDS=$(FUZZ_SECONDS) WISCAT_FUZZ_SEED=0 timeout $$((4 * $(FUZZ_SECONDS) + 600)) \
		$(BIN)/pytest -s --timeout $$(($(FUZZ_SECONDS) + 300)) tests/fuzz/test_fuzz.py
	WISCAT_SCHEMATHESIS_EXAMPLES=200 WISCAT_SCHEMATHESIS_PHASES=coverage,fuzzing,stateful \
		WISCAT_SCHEMATHESIS_SEED=random timeout 3600 \
		$(BIN)/pytest -s --timeout 3000 tests/integration/test_api_schema.py

lint: $(STAMP) ## ruff, mypy (strict) and the import-linter layer contracts
	$(BIN)/ruff check shared services tests bench tools
	$(BIN)/ruff format --check shared services tests bench tools
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP) ## format the code with ruff
	$(BIN)/ruff format shared services tests bench tools
	$(BIN)/ruff check --fix shared services tests bench tools

BENCH_ARGS ?=

bench: $(STAMP) bytecode opentracker postgresql mosquitto ## benchmarks; figures go to docs/benchmarks.md (BENCH_RECORDS scales them; BENCH_ARGS='--only wis2')
	$(BIN)/python -m bench.run $(BENCH_ARGS)

schema: $(STAMP) ## rewrite shared/db/schema.sql from the migrations (after adding one)
	$(BIN)/python -m tools.schema

settings-doc: $(STAMP) ## rewrite docs/settings.md from the Settings field descriptions
	$(BIN)/python -m tools.settings_doc

DEMO_ARGS ?=

demo: $(STAMP) bytecode ## a local mesh of three nodes harvesting each other (Ctrl-C stops it; DEMO_ARGS='--port-base 0')
	$(BIN)/python -m tools.demo $(DEMO_ARGS)

clean: ## remove the virtual environment and local data
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
