# Everything a fresh machine needs goes through these targets: a virtualenv in
# .venv, the Python packages from PyPI, buf and the Node packages from npm, and
# Go with its protobuf and gRPC packages from Debian's archive (go-toolchain).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BUF := .tools/node_modules/.bin/buf
BUF_VERSION := 1.75.0
NODE := clients/node
NODE_DEPS := $(NODE)/node_modules/.installed
TEST_NODE_DEPS := tests/node_tools/node_modules/.installed tests/node_hooks/node_modules/.installed \
	tests/browser/node_modules/.installed tests/node_agui/node_modules/.installed
TEST_NODE_DEPS += tests/node_openai/node_modules/.installed
DEPLOY_TOOLS := deploy/tools/node_modules/.installed
# The web console: TypeScript bundled by esbuild into dist/ (not committed), served by the browser edge.
CONSOLE_DIR := gateway/web/console
CONSOLE := $(CONSOLE_DIR)/dist/index.html
CONSOLE_DEPS := $(CONSOLE_DIR)/node_modules/.installed
CONSOLE_SOURCES := $(wildcard $(CONSOLE_DIR)/src/*.ts) $(CONSOLE_DIR)/index.html $(CONSOLE_DIR)/style.css \
	$(CONSOLE_DIR)/build.mjs $(CONSOLE_DIR)/tsconfig.json $(wildcard $(NODE)/src/*.ts)
CHROMIUM := /usr/bin/chromium

.PHONY: demo up test test-under-load check lint typecheck protos protos-check node-check go-toolchain go-check breaking \
	deploy-check unit clean console chromium proxies

demo: $(VENV)/.installed $(CONSOLE)  ## start the suite and stream a demo turn; Ctrl-C stops it
	$(BIN)/cogmesh up --demo

up: $(VENV)/.installed $(CONSOLE)  ## start the suite
	$(BIN)/cogmesh up

test: check $(TEST_NODE_DEPS) $(DEPLOY_TOOLS) $(CONSOLE) chromium proxies  ## everything CI runs: lint, freshness, types, breaking, manifests, tests
	$(BIN)/python -m pytest

test-under-load:  ## make test 5 times in a row with every core kept busy (RUNS=n to change); for timing-sensitive changes
	tools/test_under_load.sh $(or $(RUNS),5)

check: lint typecheck protos-check node-check go-check breaking deploy-check
	$(BIN)/python tools/agentdoc.py --check
	$(BIN)/python tools/settingsdoc.py --check

lint: $(VENV)/.installed $(BUF)
	$(BUF) lint
	$(BUF) format --diff --exit-code
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed
	$(BIN)/mypy

protos: $(VENV)/.installed $(BUF) $(NODE_DEPS) go-toolchain  ## regenerate Python, Go, TypeScript and docs/api.md from protos/
	$(BIN)/python protos/generate.py
	npm --prefix $(NODE) run --silent generate
	$(BIN)/python tools/protodoc.py

protos-check: $(VENV)/.installed $(BUF) $(NODE_DEPS) go-toolchain
	$(BIN)/python protos/generate.py --check
	npm --prefix $(NODE) run --silent generate:check
	$(BIN)/python tools/protodoc.py --check

node-check: $(NODE_DEPS) $(CONSOLE_DEPS)
	npm --prefix $(NODE) run --silent format:check
	npm --prefix $(NODE) run --silent build
	npm --prefix $(CONSOLE_DIR) run --silent format:check
	npm --prefix $(CONSOLE_DIR) run --silent typecheck

console: $(CONSOLE)  ## build the web console (the browser edge serves it at /console/)

$(CONSOLE): $(CONSOLE_DEPS) $(NODE_DEPS) $(CONSOLE_SOURCES)
	npm --prefix $(CONSOLE_DIR) run --silent build

$(CONSOLE_DEPS): $(CONSOLE_DIR)/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix $(CONSOLE_DIR)
	touch $@

# Debian's headless Chromium for the console's browser test, installed once where we are root;
# elsewhere tests/e2e/test_web_console.py skips and says why.
chromium:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-liberation; \
	else echo "not installing Chromium (not root, or no apt-get): the browser test will skip"; fi

# Idempotent: apt-get runs only for what is missing, and only as root (elsewhere the Go
# generation, go-check and the Go tests say they are skipped and why).
go-toolchain: $(VENV)/.installed  ## install Go, protoc and the Go gRPC packages from Debian's archive when missing
	$(BIN)/python -m tools.golang install

go-check: $(VENV)/.installed go-toolchain  ## gofmt, a tidy go.mod, go vet and go test over clients/go (module mode, offline)
	$(BIN)/python -m tools.golang check

breaking: $(BUF)  ## buf breaking against the last commit that changed protos/ (or the upstream merge base)
	BUF=$(BUF) tools/buf_breaking.sh

deploy-check: $(VENV)/.installed $(DEPLOY_TOOLS)  ## render every overlay and validate it against the schemas
	$(BIN)/python -m deploy.validate

proxies:  ## nginx and HAProxy from Debian's packages (as root with apt-get), for the load-balancer test
	tools/install_proxies.sh

unit: $(VENV)/.installed
	$(BIN)/python -m pytest tests/unit -q

$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e clients/python -e '.[dev]'
	touch $@

$(BUF):
	npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

$(DEPLOY_TOOLS): deploy/tools/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix deploy/tools
	touch $@

$(NODE_DEPS): $(NODE)/package.json $(NODE)/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix $(NODE)
	touch $@

tests/%/node_modules/.installed: tests/%/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix tests/$*
	touch $@

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache $(NODE)/node_modules $(NODE)/dist \
		tests/node_tools/node_modules tests/node_hooks/node_modules deploy/tools/node_modules \
		tests/browser/node_modules $(CONSOLE_DIR)/node_modules $(CONSOLE_DIR)/dist tests/artifacts
