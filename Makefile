# trnsim: two commands do everything — `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: install
	$(VENV)/bin/trnsim demo

test: install
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1; } || true
	$(PY) -m pytest

lint: install
	$(PY) -m pip install -q -e '.[test,lint]'
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/pyright

bench: install
	@status=0; for b in benchmarks/[a-z]*.py; do echo "== $$b"; $(PY) $$b || status=1; done; exit $$status

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
