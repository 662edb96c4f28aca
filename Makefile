# The two commands for a fresh machine:  `make demo` (set up + main job)  and  `make test` (set up + tests).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
DEBIAN_PACKAGES := rabbitmq-server postgresql libpostgresql-jdbc-java mariadb-server libmariadb-java chromium
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
MMDC := node_modules/.bin/mmdc -p puppeteer-config.json --quiet
DIAGRAM := docs/dev-stack-graph.png

.PHONY: setup system-packages demo test unit lint bench diagram clean

setup: system-packages $(STAMP) $(NODE_STAMP)

# Debian packages for the real test services (RabbitMQ 3.10, PostgreSQL 15 and MariaDB 10.11 + JDBC drivers,
# Java for Spark) and for rendering the Mermaid diagram (chromium, driven by mermaid-cli's Puppeteer; node + npm).
system-packages:
	@missing=""; \
	for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
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

# mermaid-cli (pinned in package-lock.json) without Puppeteer's browser download: it drives Debian's
# /usr/bin/chromium (puppeteer-config.json). --ignore-scripts: the only install script is that download.
$(NODE_STAMP): package.json package-lock.json
	PUPPETEER_SKIP_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

demo: setup
	$(VENV)/bin/nsb-delays demo --stack dev

# pytest's exit code 5 (no test collected) fails this target like any other failure.
test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(PY) -m pytest -m "not broker and not spark and not packaging" $(PYTEST_ARGS)

# The README's picture of the dev stack's graph, rendered by mermaid-cli from `render --format mermaid`.
# Drawn at its natural width (-w), so the text stays sharp; the .mmd is a temporary file.
diagram: setup
	$(VENV)/bin/nsb-delays render --stack dev --format mermaid -o $(DIAGRAM:.png=.mmd)
	$(MMDC) -w 1300 -i $(DIAGRAM:.png=.mmd) -o $(DIAGRAM)
	rm $(DIAGRAM:.png=.mmd)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy components

bench: setup
	$(PY) -m bench

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache
