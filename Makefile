# The two commands for a fresh machine:  `make demo` (set up + main job)  and  `make test` (set up + tests).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
DEBIAN_PACKAGES := rabbitmq-server postgresql libpostgresql-jdbc-java mariadb-server libmariadb-java
STAMP := $(VENV)/.installed

.PHONY: setup system-packages demo test unit lint bench clean

setup: system-packages $(STAMP)

# Debian packages for the real test services (RabbitMQ 3.10, PostgreSQL 15 and MariaDB 10.11 + JDBC drivers,
# Java for Spark).
system-packages:
	@missing=""; \
	for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "apt-get install:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	  else \
	    echo "missing Debian packages:$$missing -- run: sudo apt-get update && sudo apt-get install -y$$missing" >&2; \
	    exit 1; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: setup
	$(VENV)/bin/nsb-delays demo --stack dev

# pytest's exit code 5 (no test collected) fails this target like any other failure.
test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(PY) -m pytest -m "not broker and not spark" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy components

bench: setup
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
