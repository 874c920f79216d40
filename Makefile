# Notebook: `make run` starts the whole app, `make test` runs every test. Both set up .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
CHROMIUM ?= /usr/bin/chromium
NGINX ?= /usr/sbin/nginx
REDIS_SERVER ?= /usr/bin/redis-server

.PHONY: run test test-topology lint format superuser install install-dev chromium servers clean-data messages

$(PY):
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Notebook needs Python 3.11 (Django 5.2 LTS); set PYTHON=/path/to/python3.11"'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.run-installed: requirements.txt | $(PY)
	$(PIP) install -r requirements.txt
	@touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt | $(PY)
	$(PIP) install -r requirements-dev.txt
	@touch $(VENV)/.run-installed $@

install: $(VENV)/.run-installed
install-dev: $(VENV)/.dev-installed

## Start web (daphne, ASGI) + worker (django-q2) on the embedded PostgreSQL; Ctrl-C stops all.
run: install
	$(PY) manage.py serve

## Run the whole test suite (unit, integration, process and browser tests) in TEST_PROCESSES
## pytest processes at once (pytest-xdist): much of it waits on servers, workers and sockets,
## so two processes keep two cores busy. Whole files go to one process (--dist loadfile: a
## module's fixtures are made once). The browser tests run second, in a run of their own:
## Playwright's sync API keeps an event loop in each process's main thread, which breaks
## async_to_sync in any test after it, and xdist does not keep them last in every process.
## `pytest tests/x.py` alone still runs in one process.
TEST_PROCESSES ?= 2
test: install-dev chromium
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile -m "not e2e"
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile -m e2e

## The several-machines test (tests/topology, ~2 min; README, "Running on several machines"):
## PostgreSQL over TCP, redis-server, nginx, two web processes, two workers, one killed of each.
test-topology: install-dev chromium servers
	NGINX=$(NGINX) REDIS_SERVER=$(REDIS_SERVER) $(PY) -m pytest -m topology

## ruff, ruff format, mypy (strict, zero errors) and the import contracts (pyproject.toml,
## [tool.importlinter]: the layers of docs/architecture.md; selectors only read).
lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL=postgresql://lint@localhost/lint $(VENV)/bin/mypy .
	PYTHONPATH=. $(VENV)/bin/lint-imports

format: install-dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## Refresh the translation catalogues from the code (needs GNU gettext's xgettext), then
## compile them (polib; no gettext needed). Translate the new entries in locale/*/LC_MESSAGES.
messages: install-dev
	$(PY) manage.py makemessages -l de -l zh_Hans --no-obsolete --ignore=.venv --ignore=var --ignore=tests --ignore=static/vendor --ignore=bench
	$(PY) manage.py makemessages -d djangojs -l de -l zh_Hans --no-obsolete --ignore=.venv --ignore=var --ignore=tests --ignore=static/vendor --ignore=bench
	$(PY) manage.py compiletranslations

## Create an admin account for /admin/ (asks for a username and password).
superuser: install
	$(PY) manage.py createsuperuser

## Browser tests need Debian's Chromium; install it when we can, else say how.
chromium:
	@if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
		echo "Installing Chromium for the browser tests (apt-get)…"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "Browser tests need Chromium at $(CHROMIUM). Install it with:"; \
		echo "    sudo apt-get install -y chromium"; \
		echo "or point CHROMIUM=/path/to/chromium at another build."; \
		exit 1; \
	fi

## The several-machines test needs Debian's nginx and redis-server; install them when we can.
servers:
	@if [ -x "$(NGINX)" ] && [ -x "$(REDIS_SERVER)" ]; then exit 0; fi; \
	if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
		echo "Installing nginx and redis-server for the several-machines test (apt-get)…"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx redis-server >/dev/null; \
	else \
		echo "The several-machines test needs $(NGINX) and $(REDIS_SERVER). Install them with:"; \
		echo "    sudo apt-get install -y nginx redis-server"; \
		echo "or point NGINX=… and REDIS_SERVER=… at other builds."; \
		exit 1; \
	fi

## Delete the embedded database, uploads and the generated secret key (asks first).
clean-data:
	@read -p "Delete ./var (database, files, secret key)? [y/N] " ans; [ "$$ans" = "y" ] && rm -rf var || echo "Kept."
