# Everything a fresh machine needs: `make demo`, `make test`, `make docs`, `make bench`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export VIRTUAL_ENV := $(abspath $(VENV))

.PHONY: demo test test-rust test-python build bench docs lint clean peer-deps peer-tests

$(BIN)/maturin:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "maturin>=1.9,<2"

# Builds the extension in release mode (cargo is incremental, so a no-op
# rebuild takes seconds) and installs the package with its dev dependencies
# and the documentation tools, whose site the tests build (`make bench` adds
# the other executors that benches/compare.py measures).
EXTRAS ?= dev,docs
build: $(BIN)/maturin
	@echo "Installing the dependencies (extras: $(EXTRAS)), then compiling the Rust engine in release mode:"
	@echo "about 2 minutes on 2 cores the first time (plus the downloads), seconds once built."
	PIP_QUIET=1 $(BIN)/maturin develop --release --extras $(EXTRAS) --quiet

demo: build
	$(BIN)/toolsched demo

test-rust:
	cargo test --quiet

# The tests are spread over the machine's cores, at most four processes (pytest-xdist), a module's tests
# in one process (`--dist loadfile`: the Ray module shares one cluster, the packaging tests one wheel build).
# `make test PYTEST_SPREAD=` runs them in one process.
PYTEST_SPREAD ?= -n auto --maxprocesses 4 --dist loadfile
# The journal tests need PostgreSQL and the fleet tests Redis: the scripts run pytest beside
# throwaway servers (installing Debian's postgresql and redis-server packages when missing).
test-python: build
	$(BIN)/python -m mypy.stubtest toolsched._core
	tests/postgres_server.sh tests/redis_server.sh $(BIN)/python -m pytest $(PYTEST_SPREAD)

test: test-rust test-python

bench: EXTRAS = dev,docs,compare
bench: build
	cargo bench --bench plan
	cargo bench --bench conflicts
	tests/postgres_server.sh $(BIN)/python -m pytest benches --benchmark-only --benchmark-columns=min,median,mean,rounds -p no:randomly
	$(BIN)/python benches/compare.py
	$(BIN)/python benches/ray_throughput.py
	$(BIN)/python benches/platform_runs.py
	$(BIN)/python benches/resilience.py
	$(BIN)/python benches/streaming.py --runs 1

# The documentation site, into site/ (MkDocs + Material, the API reference from the docstrings).
docs: build
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The host frameworks' own test suites (the OpenAI Agents SDK's, LangGraph's prebuilt), stock and with
# toolsched switched in: scripts/peers/run.py fetches their sdists into PEERS_CACHE (outside the
# repository) and runs each suite twice. Not part of `make test`. Their test dependencies are
# installed into the same environment, with every package already installed held at its version.
PEERS_CACHE ?= $(HOME)/.cache/toolsched-peers
PEER_DEPS := pytest-asyncio pytest-mock inline-snapshot syrupy langgraph-checkpoint-sqlite \
	langgraph-checkpoint-postgres psycopg-pool aiosqlite fakeredis "sqlalchemy[asyncio]" aiohttp graphviz \
	tomli exceptiongroup
peer-deps:
	mkdir -p $(PEERS_CACHE)
	$(BIN)/pip freeze --exclude-editable | grep -v ' @ ' > $(PEERS_CACHE)/constraints.txt
	$(BIN)/pip install --quiet -c $(PEERS_CACHE)/constraints.txt $(PEER_DEPS)

peer-tests: build peer-deps
	$(BIN)/python scripts/peers/run.py --cache $(PEERS_CACHE) $(PEER_ARGS)

lint: build
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --features python -- -D warnings
	$(BIN)/ruff check python tests benches examples scripts
	$(BIN)/mypy python/toolsched
	$(BIN)/python -m mypy.stubtest toolsched._core

clean:
	rm -rf $(VENV) target site python/toolsched/_core*.so
