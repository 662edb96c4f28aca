# The two commands for a fresh machine:  `make demo` (set up + main job)  and  `make test` (set up + tests).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Debian packages, installed by tools/debian-packages without their recommends: what is named is what is used.
# The demo's: debootstrap (and the archive keyring it verifies the mirror with) for the RabbitMQ 4.3 root, and
# Debian's rabbitmq-server only when the demo is asked for 3.10. The tests': the real test services (RabbitMQ 3.10,
# PostgreSQL 15 and MariaDB 10.11 + JDBC drivers, Java for Spark) and the Mermaid diagram's renderer (chromium,
# driven by mermaid-cli's Puppeteer, with a font: fonts-liberation, a recommend of chromium-common; node + npm).
DEMO_DEBIAN_PACKAGES := debootstrap debian-archive-keyring $(if $(findstring 3.10,$(DEMO_ARGS)),rabbitmq-server)
DEBIAN_PACKAGES := $(DEMO_DEBIAN_PACKAGES) rabbitmq-server postgresql libpostgresql-jdbc-java mariadb-server \
  libmariadb-java chromium fonts-liberation
# Each setup step runs through tools/step: its time; `make demo` records them (SETUP_TIMES) for its closing table.
STEP := tools/step
STAMP := $(VENV)/.installed
NODE_DIR := tools/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
# RabbitMQ 4.0 and 4.3 for the broker tiers beside Debian 12's 3.10: Debian 13's and Debian forky's rabbitmq-server,
# each in a chroot (servers/rabbitmq.py ChrootRabbitMq). NSB_RABBITMQ4_ROOT=DIR / NSB_RABBITMQ43_ROOT=DIR build/use
# them elsewhere, e.g. one root for several checkouts. Their Debian mirror is the one this machine's apt sources
# name (servers/debian_mirror.py; DEBIAN_MIRROR=URL overrides it).
RABBITMQ4_ROOT := $(or $(NSB_RABBITMQ4_ROOT),$(CURDIR)/.cache/rabbitmq-4.0)
RABBITMQ43_ROOT := $(or $(NSB_RABBITMQ43_ROOT),$(CURDIR)/.cache/rabbitmq-4.3)
# Exported like NSB_ENGINE_DIR: the demo, and the tests that run it from a directory outside the checkout (tests/docs),
# find the roots through these, not through the working directory.
export NSB_RABBITMQ4_ROOT := $(RABBITMQ4_ROOT)
export NSB_RABBITMQ43_ROOT := $(RABBITMQ43_ROOT)
# The Spark cluster tier's executors run this Python: the driver's interpreter with only
# pipeline/executor-requirements.txt, never this package (tests/sparkcluster).
EXECUTOR_VENV := $(or $(NSB_SPARK_EXECUTOR_VENV),$(CURDIR)/.cache/spark-executor-venv)
EXECUTOR_STAMP := $(EXECUTOR_VENV)/.installed
# The Spark Connect client's Python (`migrate … --remote`, tests/sparkcluster): this package without its Pulumi
# dependencies, whose protobuf pin excludes pyspark 4's Connect client (pipeline/shipping.py, infra/spark_job.py).
CONNECT_VENV := $(or $(NSB_SPARK_CONNECT_VENV),$(CURDIR)/.cache/spark-connect-venv)
CONNECT_STAMP := $(CONNECT_VENV)/.installed

# The real Pulumi engine (tools/engine/build.sh): `pulumi` from PATH when there, else the CLI, the Python language host
# and the RabbitMQ provider built from the pinned Go modules in tools/engine/ into $(ENGINE)/bin, rebuilt only when a
# pin changes; the provider is installed as a plugin into $(ENGINE)/home, the PULUMI_HOME of the demo and tests.
ENGINE := $(or $(NSB_ENGINE_DIR),$(CURDIR)/.cache/engine)
export NSB_ENGINE_DIR := $(ENGINE)

.PHONY: mypy-path setup system-packages demo-packages rabbitmq4-root rabbitmq43-root engine engine-hosts engine-provider \
  opentofu topology-operator actionlint demo demo-setup test unit scale lint bench docs clean

setup: system-packages rabbitmq4-root rabbitmq43-root $(STAMP) $(NODE_STAMP) $(EXECUTOR_STAMP) $(CONNECT_STAMP) engine opentofu \
  topology-operator actionlint mypy-path

engine: $(STAMP)
	@$(STEP) engine bash tools/engine/build.sh $(PY)

# The demo's parts of it: the CLI and the Python hosts need no virtualenv, so they compile while pip installs; the
# provider's version is the installed pulumi_rabbitmq SDK's, and installing it as a plugin runs the CLI.
engine-hosts:
	@$(STEP) engine-cli+python-hosts bash tools/engine/build.sh $(PY) cli python pythonhost
engine-provider: $(STAMP) engine-hosts
	@$(STEP) engine-rabbitmq-provider bash tools/engine/build.sh $(PY) rabbitmq

# OpenTofu and the RabbitMQ provider a rendered module pins (tools/opentofu/build.sh), for the tests that apply the
# module: not the demo's. Rebuilt only when a version changes; NSB_TOFU_DIR=DIR shares one build between checkouts.
export NSB_TOFU_DIR := $(or $(NSB_TOFU_DIR),$(CURDIR)/.cache/opentofu)
opentofu:
	@$(STEP) opentofu bash tools/opentofu/build.sh

# nsb-apply: the RabbitMQ Messaging Topology Operator's own code (v1.20.1) declaring a rendered manifest on a broker
# (tools/topology-operator/build.sh), for the tests of `render --format topology-operator`: not the demo's. Rebuilt
# only when the version or its main.go changes; NSB_OPERATOR_DIR=DIR shares one build between checkouts.
export NSB_OPERATOR_DIR := $(or $(NSB_OPERATOR_DIR),$(CURDIR)/.cache/topology-operator)
topology-operator:
	@$(STEP) topology-operator bash tools/topology-operator/build.sh

# actionlint for the GitHub Actions workflow init writes (tests/packaging/test_ci_templates.py), built from the Go
# module pinned in tools/actionlint/ into $(NSB_ACTIONLINT_DIR)/bin, rebuilt only when the pin changes (its build.sh).
export NSB_ACTIONLINT_DIR := $(or $(NSB_ACTIONLINT_DIR),$(CURDIR)/.cache/actionlint)
actionlint:
	@$(STEP) actionlint bash tools/actionlint/build.sh

system-packages:
	@$(STEP) debian-packages tools/debian-packages --java --npm $(DEBIAN_PACKAGES)
demo-packages:
	@$(STEP) debian-packages-demo tools/debian-packages $(DEMO_DEBIAN_PACKAGES)

# The RabbitMQ 4.0 and 4.3 roots (tools/rabbitmq-root: debootstrap of Debian trixie's and forky's rabbitmq-server;
# debootstrap knows forky by its sid script on older Debian releases). Without root: a message, the tier skips.
rabbitmq4-root: demo-packages
	@$(STEP) rabbitmq-4.0-root tools/rabbitmq-root 4.0 $(RABBITMQ4_ROOT) trixie $@ NSB_RABBITMQ4_ROOT
rabbitmq43-root: demo-packages
	@$(STEP) rabbitmq-4.3-root tools/rabbitmq-root 4.3 $(RABBITMQ43_ROOT) forky $@ NSB_RABBITMQ43_ROOT \
	  /usr/share/debootstrap/scripts/sid

$(STAMP): pyproject.toml
	@$(STEP) venv bash -c "set -e; test -x $(PY) || python3 -m venv $(VENV); \
	  $(PY) -m pip install -q --upgrade pip; $(PY) -m pip install -q -e '.[dev]'"
	touch $(STAMP)

# Made from the base interpreter of $(VENV) (the executors' Python minor version must be the driver's).
$(EXECUTOR_STAMP): pipeline/executor-requirements.txt $(STAMP)
	rm -rf "$(EXECUTOR_VENV)"
	"$$($(PY) -c 'import sys; print(sys._base_executable)')" -m venv "$(EXECUTOR_VENV)"
	"$(EXECUTOR_VENV)/bin/python" -m pip install -q -r pipeline/executor-requirements.txt
	touch "$(EXECUTOR_STAMP)"

$(CONNECT_STAMP): pyproject.toml pipeline/shipping.py $(STAMP)
	rm -rf "$(CONNECT_VENV)"
	"$$($(PY) -c 'import sys; print(sys._base_executable)')" -m venv "$(CONNECT_VENV)"
	$(PY) -m nsb_delays.infra.spark_job --connect-requirements > "$(CONNECT_VENV)/requirements.txt"
	"$(CONNECT_VENV)/bin/python" -m pip install -q -r "$(CONNECT_VENV)/requirements.txt"
	"$(CONNECT_VENV)/bin/python" -m pip install -q --no-deps -e .
	touch "$(CONNECT_STAMP)"

# mermaid-cli and, for the TypeScript program of tests/engine, @pulumi/pulumi and typescript (all pinned in
# tools/node/package-lock.json), without Puppeteer's browser download: mermaid-cli drives Debian's
# /usr/bin/chromium (tools/node/puppeteer-config.json). --ignore-scripts: the only install script is that download.
# Installed in tools/node/node_modules; ./node_modules links to it, where Node.js looks for the modules of the
# checkout's programs (the TypeScript programs of tests/engine) and mkdocs's hook for mmdc.
$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix $(NODE_DIR) --ignore-scripts --no-audit --no-fund --loglevel=error
	if [ ! -e node_modules ] || [ -L node_modules ]; then ln -sfn $(NODE_DIR)/node_modules node_modules; fi
	touch $(NODE_STAMP)

# On the newest broker, RabbitMQ 4.3 from its root (DEMO_ARGS="--rabbitmq-version 3.10": Debian's 3.10).
# It sets up only what it uses (not the 4.0 root, the Spark virtualenvs, the YAML and Node.js hosts, npm, actionlint
# or the database servers: `make test` does), its steps side by side (make -j; SETUP_JOBS), then a table of their
# times (tools/step --summary; CONTRIBUTING.md has this machine's figures).
SETUP_JOBS ?= 4
export SETUP_JOBS
demo: export SETUP_TIMES := $(CURDIR)/.cache/demo-setup-times.tsv
demo:
	@mkdir -p .cache && rm -f $(SETUP_TIMES)
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) demo-setup || { $(STEP) --summary; exit 1; }
	@$(STEP) demo $(VENV)/bin/nsb-delays demo --stack dev $(DEMO_ARGS); code=$$?; $(STEP) --summary; exit $$code
demo-setup: demo-packages rabbitmq43-root $(STAMP) engine-hosts engine-provider

# pytest's exit code 5 (no test collected) fails this target like any other failure.
# pytest-xdist: TEST_WORKERS processes; each tier + broker version is one group (tests/conftest.py), so
# the tiers, which mostly wait on brokers and timers, overlap on the 2 cores instead of queueing.
# Bytecode caches stay on for the tests even where PYTHONDONTWRITEBYTECODE is set: without them every
# worker and every CLI subprocess compiles the package again, and pytest rewrites every test module on
# each run (collection 8 s instead of 2 s; the unit tier 35 s instead of 27 s on this 2-core machine).
unexport PYTHONDONTWRITEBYTECODE
TEST_WORKERS ?= 4
test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

unit: $(STAMP)
	$(PY) -m pytest -n 2 tests/unit $(PYTEST_ARGS)

# The scale tier (tests/scale: 1,000 endpoints through the real engine, an up killed midway and recovered), opt-in:
# about ten minutes per broker version on 2 cores, too long for `make test` (CONTRIBUTING.md, The suite's figures).
# One worker per broker version.
scale: setup
	NSB_SCALE_TESTS=1 $(PY) -m pytest -n 2 --dist loadgroup tests/scale $(PYTEST_ARGS)

# The documentation site (mkdocs.yml) into site/. Strict: a broken internal link or anchor, a page missing from
# the nav, a reference that cannot be generated or a Mermaid diagram mermaid-cli cannot draw fails it. External
# links are not fetched. `make test` builds it too (tests/docs) and opens it in headless chromium.
docs: $(STAMP) $(NODE_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The folders installed as nsb_delays.<folder>. .mypy-path/nsb_delays/<folder> are symlinks to them, generated here
# (git-ignored), for mypy and lint-imports, which cannot follow the editable install's import hook (pyproject's
# [tool.mypy]).
PACKAGES := components brokers infra pipeline policies stack

mypy-path:
	@mkdir -p .mypy-path/nsb_delays
	@for package in $(PACKAGES); do ln -sfn "../../$$package" ".mypy-path/nsb_delays/$$package"; done

lint: $(STAMP) mypy-path
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(PACKAGES) bench servers
	PYTHONPATH=.mypy-path:. $(VENV)/bin/lint-imports --no-cache

bench: setup
	$(PY) -m bench

clean:
	rm -rf $(VENV) node_modules $(NODE_DIR)/node_modules .mypy-path .pytest_cache .mypy_cache .ruff_cache
