# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test install lint bench fuzz clean browser foundry-check foundry-zip
FOUNDRY := clients/foundry

$(BIN)/covercast: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/covercast

install: $(BIN)/covercast

run: install
	$(BIN)/covercast serve

lint: install foundry-check
	$(BIN)/ruff check .
	$(BIN)/mypy

# The Foundry module's type-check against Foundry's published declarations (fvtt-types,
# pinned in clients/foundry/package-lock.json) with TypeScript's checkJs: npm ci from the
# npm registry into clients/foundry/node_modules, once per lock change.
$(FOUNDRY)/node_modules/.package-lock.json: $(FOUNDRY)/package-lock.json
	cd $(FOUNDRY) && npm ci --no-audit --no-fund --loglevel=error

foundry-check: $(FOUNDRY)/node_modules/.package-lock.json
	cd $(FOUNDRY) && ./node_modules/.bin/tsc -p tsconfig.json

# The installable module: the zip module.json's `download` names (upload it and module.json
# to the release that URL points at).
foundry-zip: install
	@mkdir -p $(FOUNDRY)/dist
	@version=$$($(BIN)/python -c "import json; print(json.load(open('$(FOUNDRY)/module.json'))['version'])"); \
	  rm -f $(FOUNDRY)/dist/covercast-foundry-$$version.zip; \
	  cd $(FOUNDRY) && ../../$(BIN)/python -m zipfile -c dist/covercast-foundry-$$version.zip \
	    module.json README.md scripts lang styles && cp module.json dist/module.json && \
	  echo "built $(FOUNDRY)/dist/covercast-foundry-$$version.zip"

# The overlay's browser test needs Debian's chromium and playwright's Python driver (never
# `playwright install`: it downloads browsers from a CDN). Installed only when missing.
browser: install
	@test -x /usr/bin/chromium || (DEBIAN_FRONTEND=noninteractive apt-get install -y chromium \
		|| (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium))
	@$(BIN)/python -c "import playwright.sync_api" 2>/dev/null \
		|| $(BIN)/pip install --quiet 'playwright>=1.40,<2'

test: install browser lint
	COVERCAST_REQUIRE_BROWSER=1 $(BIN)/pytest

bench: install
	$(BIN)/python -m bench

# The long fuzz run against a real server (tests/fuzz_long.py): FRAMES hostile frames
# (default 1,000,000), its figures as JSON; fails if any crash, 1011 close, internal error
# or state change on a refused request. `make test` runs a bounded version (tests/test_fuzz.py).
FRAMES ?= 1000000
fuzz: install
	FRAMES=$(FRAMES) $(BIN)/python -m tests.fuzz_long

clean:
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
