# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test install lint bench fuzz clean browser foundry-check foundry-zip
FOUNDRY := clients/foundry

$(BIN)/covercast: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# -qq: setuptools' editable-install notice (BuildBackendWarning) is not for users
	$(BIN)/pip install -qq -e '.[dev]'
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

# The overlay's browser test needs a chromium and playwright's Python driver (never
# `playwright install`: it downloads browsers from a CDN). CHROMIUM=/path/to/chromium picks
# one; otherwise the first found on PATH (or macOS's Applications). As root, `make browser`
# installs Debian's chromium when none is found; without root the browser test is skipped
# with a note, except in CI (CI=1), where it is required.
CHROMIUM ?= $(shell for c in chromium chromium-browser google-chrome-stable google-chrome; do \
	command -v $$c 2>/dev/null && break; done; \
	for c in "/Applications/Chromium.app/Contents/MacOS/Chromium" \
	  "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"; do \
	  test -x "$$c" && echo "$$c" && break; done)
BROWSER_NOTE := note: the overlay's browser test was skipped (no chromium found); \
	'sudo make browser' installs it, or give one: make test CHROMIUM=/path/to/chromium

browser: install
	@$(BIN)/python -c "import playwright.sync_api" 2>/dev/null \
		|| $(BIN)/pip install --quiet 'playwright>=1.40,<2'
	@if [ -z "$(CHROMIUM)" ] && [ "$$(id -u)" = 0 ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y chromium \
	  || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium); fi

# The browser test is required when a chromium is there (or in CI), skipped otherwise.
test: install browser lint
	@chromium='$(CHROMIUM)'; \
	if [ -n "$$chromium" ] || [ -n "$$CI" ]; then require=1; else require=0; fi; \
	CHROMIUM="$$chromium" COVERCAST_REQUIRE_BROWSER=$$require $(BIN)/pytest; status=$$?; \
	if [ $$require = 0 ]; then echo "$(BROWSER_NOTE)"; fi; exit $$status

bench: install
	$(BIN)/python -m bench

# The long fuzz run against a real server (tests/fuzz_long.py): FRAMES hostile frames
# (default 1,000,000), its figures as JSON; fails if any crash, 1011 close, internal error
# or state change on a refused request. The load runs at nice 10 beside the server and the
# latency sampler (NICE=0: the same priority). `make test` runs a bounded version
# (tests/test_fuzz.py).
FRAMES ?= 1000000
fuzz: install
	FRAMES=$(FRAMES) $(BIN)/python -m tests.fuzz_long

clean:
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
