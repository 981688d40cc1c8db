# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test install lint bench clean browser

$(BIN)/covercast: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/covercast

install: $(BIN)/covercast

run: install
	$(BIN)/covercast serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

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

clean:
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
