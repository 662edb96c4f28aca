"""Bad inputs without services: every command refuses them before doing anything, in a few lines that
name the input and the rule, without a traceback, and nothing in the working directory changes.

The cases that need PostgreSQL, RabbitMQ or Spark are in ``tests/spark/test_bad_inputs_services.py``.
Unreachable services are simulated with loopback ports nothing listens on (refused at once).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from nsb_delays.infra.cli import cli
from tests.bad_inputs import CLEAN_ENVIRONMENT, Case, assert_refused, closed_port, snapshot, write_files

DOWN = closed_port()  # every service "at" this port is refused
DB_DOWN = f"jdbc:postgresql://127.0.0.1:{DOWN}/app?user=nsb"
AMQP_DOWN = f"amqp://guest:guest@127.0.0.1:{DOWN}/%2F"
HTTP_DOWN = f"http://127.0.0.1:{DOWN}"
RABBIT = ["--amqp-url", "amqp://guest:guest@127.0.0.1:5672/%2F", "--management-url",
          "http://127.0.0.1:15672"]  # fmt: skip


def stack(body: str) -> str:
    return "config:\n" + body


GOOD = stack("  nsb-delays:rabbitmq:\n    endpoints: [Sales]\n")


def with_user(user: str, extra: str = "  nsb-delays:salesPassword: {secure: v1:abc}\n") -> str:
    """A stack whose Sales endpoint has ``user: {user}`` (YAML flow mapping), Billing none."""
    return stack(f"  nsb-delays:rabbitmq:\n    endpoints:\n      - name: Sales\n        user: {user}\n"
                 f"      - Billing\n{extra}")  # fmt: skip


USERS = ["render", "--stack", "dev", "--format", "rabbitmq-definitions"]


def parquet_bytes(columns: dict[str, list[object]]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


def rabbitmq_stack(**keys: str) -> dict[str, str]:
    body = "".join(f"    {key}: {value}\n" for key, value in keys.items())
    return {"Pulumi.bad.yaml": stack("  nsb-delays:rabbitmq:\n" + body)}


RENDER = ["render", "--stack", "bad", "--format", "rabbitmq-definitions"]
TERRAFORM = ["render", "--stack", "dev", "--format", "terraform"]
# a broker that refuses connections: each case is refused before it is read
DISCOVER = ["discover", "--stack", "prod", "--management-url", HTTP_DOWN, "--username", "guest", "--password", "guest"]
EVERY_COMMAND = {
    "render": RENDER,
    "check": ["check", "--stack", "bad"],
    "verify": ["verify", "--stack", "bad", "--management-url", HTTP_DOWN, "--username", "u", "--password", "p"],
    "demo": ["demo", "--stack", "bad"],
}

CASES = [
    # --- the stack file: YAML, duplicate keys, where --stack looks -----------------------------------------
    Case("stack-file", "yaml-syntax", RENDER, 2,
         ["Pulumi.bad.yaml, line 4, column 1", "expected ',' or ']'"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:rabbitmq:\n    endpoints: [Sales\n")}),
    Case("stack-file", "duplicate-key", RENDER, 2,
         ["Pulumi.bad.yaml, line 5, column 5", "duplicate key 'endpoints' (first given on line 3)"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:rabbitmq:\n    endpoints: [Sales]\n    vhost: /\n"
                                         "    endpoints: [Billing]\n")}),
    Case("stack-file", "duplicate-section", RENDER, 2, ["line 4, column 3", "duplicate key 'nsb-delays:rabbitmq'"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:rabbitmq:\n    endpoints: [Sales]\n"
                                         "  nsb-delays:rabbitmq:\n    endpoints: [Billing]\n")}),
    Case("stack-file", "tab-indent", RENDER, 2, ["Pulumi.bad.yaml, line 3", "found character '\\t'"],
         files={"Pulumi.bad.yaml": "config:\n  nsb-delays:rabbitmq:\n\tendpoints: [Sales]\n"}),
    Case("stack-file", "not-a-mapping", RENDER, 2, ["Pulumi.bad.yaml: a stack file is a mapping", "got list"],
         files={"Pulumi.bad.yaml": "- config\n"}),
    Case("stack-file", "config-not-a-mapping", RENDER, 2, ["'config' must be a mapping", "got list"],
         files={"Pulumi.bad.yaml": "config: [nsb-delays:rabbitmq]\n"}),
    Case("stack-file", "unknown-top-level-key", RENDER, 2, ["unknown top-level key 'confg'", "config, secretsprovider"],
         files={"Pulumi.bad.yaml": "confg:\n  nsb-delays:rabbitmq: {}\n"}),
    Case("stack-file", "misspelt-namespace", RENDER, 2,
         ["config key 'nsb-delay:rabbitmq' is not one of ours", "did you mean 'nsb-delays:rabbitmq'"],
         files={"Pulumi.bad.yaml": stack("  nsb-delay:rabbitmq:\n    endpoints: [Sales]\n")}),
    Case("stack-file", "no-such-stack", ["render", "--stack", "prod", "--format", "rabbitmq-definitions"], 2,
         ["no stack 'prod'", "Pulumi.prod.yaml is not in", "stacks there: dev"],
         files={"Pulumi.yaml": "name: nsb-delays\n", "Pulumi.dev.yaml": GOOD}),
    Case("stack-file", "no-project", ["render", "--stack", "prod", "--format", "rabbitmq-definitions"], 2,
         ["no stack 'prod'", "(no Pulumi.yaml in it or any parent)"]),
    Case("stack-file", "path-is-a-directory", ["render", "--stack", "stacks/", "--format", "rabbitmq-definitions"], 2,
         ["stack file stacks is a directory"], files={"stacks/Pulumi.dev.yaml": GOOD}),
    Case("stack-file", "path-missing", ["render", "--stack", "stacks/Pulumi.prod.yaml", "--format", "cloudformation"],
         2, ["stack file stacks/Pulumi.prod.yaml does not exist"]),
    Case("stack-file", "empty-name", ["render", "--stack", "", "--format", "cloudformation"], 2, ["--stack is empty"]),
    Case("stack-file", "name-with-four-parts", ["render", "--stack", "a/b/c/d", "--format", "cloudformation"], 2,
         ["--stack 'a/b/c/d' is neither a stack name", "STACK, ORG/STACK or ORG/PROJECT/STACK", "ending in .yaml"]),
    Case("stack-file", "name-with-an-empty-part", ["check", "--stack", "org//prod"], 2,
         ["--stack 'org//prod' is neither a stack name", "ORG/PROJECT/STACK"]),
    Case("stack-file", "org-name-without-its-file", ["render", "--stack", "org/prod", "--format", "cloudformation"], 2,
         ["no stack 'org/prod'", "Pulumi.prod.yaml is not in", "stacks there: dev"],
         files={"Pulumi.yaml": "name: nsb-delays\n", "Pulumi.dev.yaml": GOOD}),
    Case("stack-file", "not-utf8", RENDER, 2, ["cannot read stack file", "Pulumi.bad.yaml", "utf-8"],
         files={"Pulumi.bad.yaml": b"config:\n  nsb-delays:rabbitmq:\n    vhost: \xff\n"}),
    # --- names the broker, the provider or SQS cannot take (every command refuses them) ---------------------
    *(Case("reserved-names", f"amq-prefix-{command}", args, 2,
           ["endpoints[1]: queue 'amq.orders' starts with 'amq.'", "RabbitMQ reserves"],
           files=rabbitmq_stack(endpoints="[Sales, amq.orders]"), max_lines=8)
      for command, args in EVERY_COMMAND.items()),
    Case("reserved-names", "amq-error-queue", RENDER, 2, ["errorQueue: 'amq.errors' starts with 'amq.'"],
         files=rabbitmq_stack(errorQueue="amq.errors")),
    Case("reserved-names", "delay-level-name", RENDER, 2,
         ["queue 'nsb.v2.delay-level-05' is a name of the delay infrastructure itself"],
         files=rabbitmq_stack(endpoints="[nsb.v2.delay-level-05]")),
    Case("reserved-names", "v1-delivery-name-in-v2-stack", RENDER, 2,
         ["queue 'nsb.delay-delivery' is a name of the delay infrastructure itself"],
         files=rabbitmq_stack(endpoints="[nsb.delay-delivery]", generation="v2")),
    Case("reserved-names", "parking-name", RENDER, 2,
         ["queue 'nsb.v2.delay-unroutable' is the name of the parking exchange and queue", "parkUnroutable"],
         files=rabbitmq_stack(endpoints="[nsb.v2.delay-unroutable]")),
    Case("reserved-names", "v1-parking-name-in-v2-stack-parking-off", RENDER, 2,
         ["queue 'nsb.delay-unroutable' is the name of the parking exchange and queue"],
         files=rabbitmq_stack(endpoints="[nsb.delay-unroutable]", generation="v2", parkUnroutable="false")),
    Case("reserved-names", "error-queue-is-parking-queue", RENDER, 2,
         ["errorQueue: 'nsb.v2.delay-unroutable' is the name of the parking exchange and queue"],
         files=rabbitmq_stack(errorQueue="nsb.v2.delay-unroutable")),
    Case("reserved-names", "audit-is-delivery-exchange", RENDER, 2,
         ["auditQueue: 'nsb.v2.delay-delivery' is a name of the delay infrastructure"],
         files=rabbitmq_stack(auditQueue="nsb.v2.delay-delivery")),
    Case("provider-ids", "at-sign-in-endpoint", RENDER, 2,
         ["queue 'Sales@eu' contains '@'", "'name@vhost', split on every '@'"],
         files=rabbitmq_stack(endpoints="['Sales@eu']")),
    Case("provider-ids", "slash-in-endpoint", RENDER, 2,
         ["queue 'team/Sales' contains '/'", "binding id 'vhost/source/destination/type/key' is split on '/'"],
         files=rabbitmq_stack(endpoints="[team/Sales]")),
    Case("provider-ids", "at-sign-in-policy-group", RENDER, 2,
         ["policyGroup: 'team@eu' must be a non-empty name without '@'", "'name@vhost'"],
         files=rabbitmq_stack(policyGroup="team@eu", endpoints="[Sales]")),
    Case("config", "graph-stack-with-graph-declared", RENDER, 2,
         ["graphStack: 'org/nsb-delays/graph' names the stack that declares the delay graph", "declaresGraph: false"],
         files=rabbitmq_stack(graphStack="org/nsb-delays/graph", endpoints="[Sales]")),
    Case("config", "unknown-policy-scope", RENDER, 2,
         ["policyScope: unknown value 'vhost' (expected one of stack, endpoint)"],
         files=rabbitmq_stack(policyScope="vhost", endpoints="[Sales]")),
    Case("provider-ids", "at-sign-in-vhost", RENDER, 2, ["vhost: 'prod@eu' contains '@'"],
         files=rabbitmq_stack(vhost="prod@eu", endpoints="[Sales]")),
    Case("provider-ids", "at-sign-in-discriminator", RENDER, 2, ["queue 'Sales-blue@1' contains '@'"],
         files=rabbitmq_stack(endpoints="[{name: Sales, instanceDiscriminators: ['blue@1']}]")),
    Case("reserved-names", "error-queue-over-255-bytes", RENDER, 2,
         ["errorQueue:", "is 300 bytes; RabbitMQ queue and exchange names are at most 255 bytes"],
         files=rabbitmq_stack(errorQueue="e" * 300)),
    Case("reserved-names", "sqs-fifo-suffix-on-input-queue", ["render", "--stack", "bad", "--format", "cloudformation"],
         2, ["sqs.endpoints[0] ('Orders.fifo')", "ends in '.fifo', which SQS allows only on FIFO queues"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:sqs:\n    endpoints: [Orders.fifo]\n")}),
    Case("reserved-names", "msmq-table-over-128", ["render", "--stack", "bad", "--format", "mssql-delayed-store"], 2,
         ["msmq.endpoints[0]", "SQL Server identifiers hold at most 128"],
         files={"Pulumi.bad.yaml": stack(f"  nsb-delays:msmq:\n    endpoints: [{'m' * 125}]\n")}),
    Case("config", "all-problems-at-once", RENDER, 2,
         ["(4 problems)", "generation: unknown value 'v3'", "'amq.x' starts with 'amq.'", "'a b' contains whitespace",
          "protectDelayQueues: expected bool"],
         files=rabbitmq_stack(generation="v3", endpoints="[amq.x, a b]", protectDelayQueues="'no'"), max_lines=6),
    Case("config", "sqs-retention-out-of-range", ["render", "--stack", "bad", "--format", "cloudformation"], 2,
         ["sqs.endpoints[0] ('Sales')", "message retention 30 s is outside 61..1209600 s"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:sqs:\n    endpoints: [{name: Sales, messageRetentionSeconds: 30}]\n")}),
    Case("config", "sqs-section-retention-without-endpoints", ["render", "--stack", "bad", "--format", "cloudformation"],
         2, ["sqs.messageRetentionSeconds: message retention 60 s is outside 61..1209600 s"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:sqs:\n    messageRetentionSeconds: 60\n")}),
    Case("config", "sqs-section-retention-said-once", ["render", "--stack", "bad", "--format", "cloudformation"],
         2, ["sqs.messageRetentionSeconds: message retention 60 s", "(2 problems)", "'Orders.fifo'"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:sqs:\n    messageRetentionSeconds: 60\n"
                                         "    endpoints: [Sales, Orders.fifo]\n")}),
    Case("config", "sqs-max-message-size-below-sqs-minimum", ["render", "--stack", "bad", "--format", "cloudformation"],
         2, ["sqs.endpoints[0] ('Sales')", "maximum message size 512 bytes is outside 1024..1048576 bytes"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:sqs:\n    endpoints: [{name: Sales, maxMessageSize: 512}]\n")}),
    Case("config", "sqs-section-max-message-size-over-1-mib", ["render", "--stack", "bad", "--format", "cloudformation"],
         2, ["sqs.maxMessageSize: maximum message size 2097152 bytes is outside 1024..1048576 bytes", "(1 problem)"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:sqs:\n    maxMessageSize: 2097152\n"
                                         "    endpoints: [Sales, Billing]\n")}),
    Case("config", "sqs-max-message-size-with-a-unit", ["render", "--stack", "bad", "--format", "cloudformation"], 2,
         ["sqs.maxMessageSize: expected int, got str"],
         files={"Pulumi.bad.yaml": stack("  nsb-delays:sqs:\n    maxMessageSize: 1MiB\n    endpoints: [Sales]\n")}),
    Case("config", "msmq-schema-over-128-without-endpoints", ["render", "--stack", "bad", "--format",
                                                               "mssql-delayed-store"], 2,
         ["msmq.schema:", "is 129 characters; SQL Server identifiers hold at most 128"],
         files={"Pulumi.bad.yaml": stack(f"  nsb-delays:msmq:\n    schema: {'s' * 129}\n")}),
    Case("config", "endpoint-entry-typo", RENDER, 2, ["endpoints[0].nam: unknown key", "missing required key 'name'"],
         files=rabbitmq_stack(endpoints="[{nam: Sales}]")),
    # --- explain --------------------------------------------------------------------------------------------
    Case("explain", "negative-delay", ["explain", "-7", "Sales"], 2, ["-7 is negative; a delay is 0..268435455 s"]),
    Case("explain", "fraction", ["explain", "1.5", "Sales"], 2, ["'1.5' is not a whole number of seconds"]),
    Case("explain", "beyond-28-bits", ["explain", "268435456", "Sales"], 2, ["exceeds the maximum of 268435455 s"]),
    Case("explain", "wildcard-destination", ["explain", "10", "Sales.#"], 2, ["'Sales.#' contains '*' or '#'"]),
    Case("explain", "empty-destination", ["explain", "10", ""], 2, ["'' is empty"]),
    Case("explain", "missing-destination", ["explain", "10"], 2, ["Missing argument 'DESTINATION'"]),
    Case("explain", "unknown-generation", ["explain", "10", "Sales", "--generation", "v3"], 2,
         ["'v3' is not one of 'v1', 'v2'"]),
    # --- render / check / verify / demo options -------------------------------------------------------------
    Case("render", "output-directory-missing", [*RENDER[:2], "dev", *RENDER[3:], "-o", "out/defs.json"], 2,
         ["-o out/defs.json: directory out does not exist"], files={"Pulumi.dev.yaml": GOOD}),
    Case("render", "output-is-a-directory", [*RENDER[:2], "dev", *RENDER[3:], "-o", "out"], 2,
         ["-o out: is a directory"], files={"Pulumi.dev.yaml": GOOD, "out/keep": ""}),
    Case("render", "unknown-format", ["render", "--stack", "dev", "--format", "hcl"], 2,
         ["'hcl' is not one of", "terraform"], files={"Pulumi.dev.yaml": GOOD}),
    Case("render", "terraform-without-a-directory", [*TERRAFORM], 2,
         ["--format terraform writes a directory: give -o DIR"], files={"Pulumi.dev.yaml": GOOD}),
    Case("render", "terraform-into-a-file", [*TERRAFORM, "-o", "main.tf"], 2,
         ["-o main.tf: is a file; give a directory"], files={"Pulumi.dev.yaml": GOOD, "main.tf": "# mine\n"}),
    Case("render", "terraform-into-a-directory-of-other-files", [*TERRAFORM, "-o", "infra"], 2,
         ["-o infra: not empty and not a module nsb-delays rendered", ".nsb-delays-module.json"],
         files={"Pulumi.dev.yaml": GOOD, "infra/main.tf": "# mine\n"}),
    Case("render", "terraform-with-passwords", [*TERRAFORM, "-o", "module", "--passwords", "passwords.yaml"], 2,
         ["--passwords applies only to --format rabbitmq-definitions", "sensitive variable"],
         files={"Pulumi.dev.yaml": GOOD, "passwords.yaml": "app: secret\n"}),
    Case("render", "terraform-of-a-stack-it-cannot-express", [*TERRAFORM, "-o", "module"], 2,
         ["format terraform", "neither a nsb-delays:rabbitmq nor a nsb-delays:sqs section"],
         files={"Pulumi.dev.yaml": stack("  nsb-delays:msmq:\n    endpoints: [Sales]\n")}),
    Case("render", "topology-operator-without-a-cluster", ["render", "--stack", "dev", "--format", "topology-operator",
                                                           "-o", "topology.yaml"], 2,
         ["--format topology-operator needs the RabbitmqCluster its resources are declared in: give --cluster NAME"],
         files={"Pulumi.dev.yaml": GOOD}),
    Case("render", "cluster-with-another-format", ["render", "--stack", "dev", "--format", "mermaid", "--cluster",
                                                   "rabbitmq"], 2,
         ["--cluster and --namespace apply only to --format topology-operator"], files={"Pulumi.dev.yaml": GOOD}),
    Case("render", "topology-operator-of-an-sqs-stack", ["render", "--stack", "dev", "--format", "topology-operator",
                                                         "--cluster", "rabbitmq", "-o", "topology.yaml"], 2,
         ["format topology-operator: stack 'dev' has an nsb-delays:sqs section only: the topology operator declares "
          "RabbitMQ objects only"], files={"Pulumi.dev.yaml": stack("  nsb-delays:sqs:\n    endpoints: [Sales]\n")}),
    Case("render", "format-without-its-section", ["render", "--stack", "dev", "--format", "cloudformation"], 2,
         ["cloudformation", "nsb-delays:sqs"], files={"Pulumi.dev.yaml": GOOD}),
    Case("endpoint-users", "unknown-destination", USERS, 2,
         ["nsb-delays:rabbitmq.endpoints[0].user.sendsTo: 'Shiping' is not a queue of this stack (known: Billing, Sales, "
          "audit, error)"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword, sendsTo: [Billing, Shiping]}")}),
    Case("endpoint-users", "password-in-plain-text", USERS, 2,
         ["nsb-delays:salesPassword: a password in plain text; make it a Pulumi secret: "
          "pulumi config set --secret nsb-delays:salesPassword <password>"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword}", "  nsb-delays:salesPassword: s3cret\n")}),
    Case("endpoint-users", "password-missing", USERS, 2,
         ["nsb-delays:salesPassword: missing (an endpoint user's passwordKey names it)"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword}", "")}),
    Case("endpoint-users", "no-password-key", USERS, 2,
         ["nsb-delays:rabbitmq.endpoints[0].user: missing required key 'passwordKey'"],
         files={"Pulumi.dev.yaml": with_user("{sendsTo: [Billing]}")}),
    Case("endpoint-users", "regex-unsafe-event-name", USERS, 2,
         ["user.publishes: 'MyCo Events:{username}' contains ' ', '{', '}', which a permission regex cannot hold"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword, publishes: ['MyCo Events:{username}']}")}),
    Case("endpoint-users", "unknown-user-key", USERS, 2,
         ["user.sendTo: unknown key (known: managementApi, name, passwordKey, publishes, sendsTo, subscribesTo)"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword, sendTo: [Billing]}")}),
    Case("endpoint-users", "passwords-file-not-a-mapping", [*USERS, "--passwords", "pw.yaml"], 2,
         ["--passwords pw.yaml: expected a mapping of user name -> non-empty password string"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword}"), "pw.yaml": "- s3cret\n"}),
    Case("endpoint-users", "passwords-file-names-another-user", [*USERS, "--passwords", "pw.yaml"], 2,
         ["--passwords must give a password for each endpoint user of the stack and nothing else: missing Sales; "
          "not a user of this stack: Billing"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword}"), "pw.yaml": "Billing: x\n"}),
    Case("endpoint-users", "passwords-with-another-format", ["render", "--stack", "dev", "--format", "mermaid",
                                                             "--passwords", "pw.yaml"], 2,
         ["--passwords applies only to --format rabbitmq-definitions"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword}"), "pw.yaml": "Sales: x\n"}),
    Case("check", "policy-config-missing", ["check", "--stack", "dev", "--policy-config", "policy.json"], 2,
         ["policy.json", "No such file"], files={"Pulumi.dev.yaml": GOOD}),
    Case("check", "policy-config-duplicate-key", ["check", "--stack", "dev", "--policy-config", "policy.json"], 2,
         ["policy.json", "duplicate key(s) 'all'"],
         files={"Pulumi.dev.yaml": GOOD, "policy.json": '{"all": "mandatory", "all": "disabled"}'}),
    Case("check", "policy-config-json-syntax", ["check", "--stack", "dev", "--policy-config", "policy.json"], 2,
         ["policy.json", "line 1 column"], files={"Pulumi.dev.yaml": GOOD, "policy.json": "{all: mandatory}"}),
    *(Case("check", f"policy-config-broker-version-of-{rule}", ["check", "--stack", "dev", "--policy-config", "p.json"], 2,
           ["p.json", f"'{rule}': 'brokerVersion': 'four' does not match"],
           files={"Pulumi.dev.yaml": GOOD, "p.json": json.dumps({rule: {"brokerVersion": "four"}})})
      for rule in ("endpoint-queue-delivery-limit", "transport-version-delivery-limit", "refused-by-broker-version",
                   "queue-arguments-as-read")),
    Case("check", "baseline-missing", ["check", "--stack", "dev", "--baseline", "base.yaml"], 2,
         ["stack file base.yaml does not exist"], files={"Pulumi.dev.yaml": GOOD}),
    Case("verify", "credentials-missing", ["verify", "--stack", "dev"], 2,
         ["--management-url, --username, --password not given"], files={"Pulumi.dev.yaml": GOOD}),
    Case("verify", "management-unreachable",
         ["verify", "--stack", "dev", "--management-url", HTTP_DOWN, "--username", "ops", "--password", "x"], 2,
         [f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN} as 'ops'", "Connection refused"],
         files={"Pulumi.dev.yaml": GOOD}),
    Case("verify", "management-url-without-scheme",
         ["verify", "--stack", "dev", "--management-url", "127.0.0.1:15672", "--username", "u", "--password", "p"], 2,
         ["--management-url '127.0.0.1:15672' is not an http:// or https:// URL"], files={"Pulumi.dev.yaml": GOOD}),
    Case("verify", "secret-password-outside-a-project", ["verify", "--stack", "dev", "--management-url", HTTP_DOWN,
                                                        "--username", "u"], 2,
         ["rabbitmq:password is a Pulumi secret", "have no Pulumi.yaml", "pass --password"],
         files={"Pulumi.dev.yaml": GOOD + "  rabbitmq:password:\n    secure: v1:abc\n"}),
    Case("verify", "secret-password-without-a-pulumi-cli", ["verify", "--stack", "dev", "--management-url", HTTP_DOWN,
                                                           "--username", "u"], 2,
         ["rabbitmq:password is a Pulumi secret", "needs the Pulumi CLI", "pass --password"],
         files={"Pulumi.yaml": "name: nsb-delays\nruntime: python\n",
                "Pulumi.dev.yaml": GOOD + "  rabbitmq:password:\n    secure: v1:abc\n"},
         env={"PATH": "/nonexistent", "NSB_ENGINE_DIR": "/nonexistent"}),
    Case("verify", "both-sides-unreachable",
         ["verify", "--stack", "dev", "--management-url", HTTP_DOWN, "--username", "ops", "--password", "x",
          "--sqs-endpoint-url", HTTP_DOWN], 2,
         ["2 problems", f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN}",
          f"SQS: Could not connect to the endpoint URL: \"{HTTP_DOWN}/\""],
         files={"Pulumi.dev.yaml": GOOD + "  nsb-delays:sqs:\n    endpoints: [Sales]\n  aws:region: eu-west-1\n"}),
    Case("verify", "credentials-missing-and-sqs-region-secret", ["verify", "--stack", "dev"], 2,
         ["2 problems", "--management-url, --username, --password not given",
          "aws:region is a Pulumi secret"],
         files={"Pulumi.dev.yaml": GOOD + "  nsb-delays:sqs:\n    endpoints: [Sales]\n"
                                          "  aws:region:\n    secure: v1:abc\n"}),
    Case("verify", "nothing-to-verify", ["verify", "--stack", "dev", "--skip-rabbitmq"], 2,
         ["stack 'dev' has nothing to verify"], files={"Pulumi.dev.yaml": GOOD}),
    Case("verify", "baseline-missing", ["verify", "--stack", "dev", "--baseline", "old"], 2,
         ["no stack 'old'", "Pulumi.old.yaml"], files={"Pulumi.dev.yaml": GOOD}),
    Case("verify", "baseline-invalid", ["verify", "--stack", "dev", "--baseline", "old.yaml"], 2,
         ["old.yaml", "nsb-delays:rabbitmq.generation: unknown value 'v3'"],
         files={"Pulumi.dev.yaml": GOOD, "old.yaml": stack("  nsb-delays:rabbitmq:\n    generation: v3\n")}),
    Case("verify", "baseline-without-rabbitmq", ["verify", "--stack", "dev", "--baseline", "old.yaml"], 2,
         ["--baseline 'old.yaml' has no nsb-delays:rabbitmq section"],
         files={"Pulumi.dev.yaml": GOOD, "old.yaml": stack("  nsb-delays:sqs:\n    endpoints: [Sales]\n")}),
    Case("verify", "baseline-broker-unreachable",
         ["verify", "--stack", "dev", "--baseline", "dev", "--management-url", HTTP_DOWN, "--username", "ops",
          "--password", "x"], 2,
         [f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN}"], files={"Pulumi.dev.yaml": GOOD}),
    Case("verify", "amqp-url-not-amqp", ["verify", "--stack", "dev", "--baseline", "dev", "--amqp-url",
                                         "http://127.0.0.1:5672", "--username", "u", "--password", "p"], 2,
         ["--amqp-url 'http://127.0.0.1:5672' is not an amqp:// or amqps:// URL"], files={"Pulumi.dev.yaml": GOOD}),
    # --- preflight --------------------------------------------------------------------------------------------
    Case("preflight", "credentials-missing", ["preflight", "--stack", "dev"], 2,
         ["--management-url, --username, --password not given"], files={"Pulumi.dev.yaml": GOOD}),
    Case("preflight", "management-unreachable",
         ["preflight", "--stack", "dev", "--management-url", HTTP_DOWN, "--username", "ops", "--password", "x"], 2,
         [f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN} as 'ops'", "Connection refused"],
         files={"Pulumi.dev.yaml": GOOD}),
    Case("preflight", "wait-negative", ["preflight", "--stack", "dev", "--wait", "-1"], 2,
         ["Invalid value for '--wait'", "-1.0 is not in the range 0<=x<=600"], files={"Pulumi.dev.yaml": GOOD}),
    Case("preflight", "wait-not-a-number", ["preflight", "--stack", "dev", "--wait", "soon"], 2,
         ["Invalid value for '--wait'", "'soon' is not a valid float"], files={"Pulumi.dev.yaml": GOOD}),
    Case("preflight", "nothing-to-check", ["preflight", "--stack", "dev", "--skip-rabbitmq"], 2,
         ["stack 'dev' has nothing to check"], files={"Pulumi.dev.yaml": GOOD}),
    Case("preflight", "passwords-file-missing", ["preflight", "--stack", "dev", "--passwords", "passwords.yaml"], 2,
         ["Invalid value for '--passwords'", "'passwords.yaml' does not exist"], files={"Pulumi.dev.yaml": GOOD}),
    Case("preflight", "passwords-file-not-a-mapping", ["preflight", "--stack", "dev", "--passwords", "p.yaml",
                                                       "--management-url", HTTP_DOWN, "--username", "u",
                                                       "--password", "p"], 2,
         ["--passwords p.yaml: expected a mapping of user name -> non-empty password string"],
         files={"Pulumi.dev.yaml": GOOD, "p.yaml": "- sales\n"}),
    Case("preflight", "user-password-secret-outside-a-project",
         ["preflight", "--stack", "dev", "--management-url", HTTP_DOWN, "--username", "u", "--password", "p"], 2,
         ["nsb-delays:salesPassword is a Pulumi secret", "have no Pulumi.yaml", "--passwords"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword}")}),
    Case("preflight", "user-password-not-set",
         ["preflight", "--stack", "dev", "--management-url", HTTP_DOWN, "--username", "u", "--password", "p"], 2,
         ["nsb-delays:salesPassword", "missing (an endpoint user's passwordKey names it)"],
         files={"Pulumi.dev.yaml": with_user("{passwordKey: salesPassword}", extra="")}),
    Case("preflight", "sqs-unreachable",
         ["preflight", "--stack", "dev", "--skip-rabbitmq", "--sqs-endpoint-url", HTTP_DOWN], 2,
         [f"SQS: Could not connect to the endpoint URL: \"{HTTP_DOWN}/\""],
         files={"Pulumi.dev.yaml": GOOD + "  nsb-delays:sqs:\n    endpoints: [Sales]\n  aws:region: eu-west-1\n"}),
    Case("settings", "transport-version-without-patch", RENDER, 2,
         ["nsb-delays:rabbitmq.transportVersion: '10.1' is not an NServiceBus.RabbitMQ version",
          "expected MAJOR.MINOR.PATCH"], files=rabbitmq_stack(transportVersion="'10.1'", endpoints="[Sales]")),
    Case("settings", "transport-version-too-old", RENDER, 2,
         ["endpoints[0].transportVersion: '4.2.0' is below NServiceBus.RabbitMQ 4.3.0"],
         files=rabbitmq_stack(endpoints="[{name: Sales, transportVersion: '4.2.0'}]")),
    Case("settings", "transport-version-a-number", RENDER, 2,
         ["endpoints[0].transportVersion: expected str, got float"],
         files=rabbitmq_stack(endpoints="[{name: Sales, transportVersion: 11.2}]")),
    Case("settings", "broker-requirement-check-unknown", RENDER, 2,
         ["disabledBrokerRequirementChecks: unknown check(s) 'Streams'",
          "expected any of Version310OrNewer, StreamsEnabled"],
         files=rabbitmq_stack(disabledBrokerRequirementChecks="[Streams]", endpoints="[Sales]")),
    Case("settings", "validate-delivery-limits-not-a-bool", RENDER, 2,
         ["endpoints[0].validateDeliveryLimits: expected bool, got str"],
         files=rabbitmq_stack(endpoints="[{name: Sales, validateDeliveryLimits: 'no'}]")),
    Case("status", "baseline-without-stack", ["status", "--baseline", "old.yaml", "--management-url", HTTP_DOWN,
                                              "--username", "u", "--password", "p"], 2,
         ["--baseline needs --stack"], files={"old.yaml": GOOD}),
    Case("status", "baseline-with-skip-rabbitmq", ["status", "--stack", "dev", "--baseline", "dev",
                                                   "--skip-rabbitmq", "--sqs"], 2,
         ["--baseline looks for retained RabbitMQ queues: drop --skip-rabbitmq"], files={"Pulumi.dev.yaml": GOOD}),
    Case("status", "baseline-missing", ["status", "--stack", "dev", "--baseline", "old", "--management-url",
                                        HTTP_DOWN, "--username", "u", "--password", "p"], 2,
         ["no stack 'old'"], files={"Pulumi.dev.yaml": GOOD}),
    Case("status", "broker-unreachable", ["status", "--stack", "dev", "--baseline", "dev", "--management-url",
                                          HTTP_DOWN, "--username", "u", "--password", "p"], 2,
         [f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN}"], files={"Pulumi.dev.yaml": GOOD}),
    Case("demo", "delays-not-numbers", ["demo", "--stack", "dev", "--delays", "1,x"], 2,
         ["'1,x' is not a comma-separated list of whole seconds"], files={"Pulumi.dev.yaml": GOOD}),
    Case("demo", "delay-over-sqs-maximum", ["demo", "--stack", "dev", "--delays", "901"], 2,
         ["each demo delay must be 0..900 s"], files={"Pulumi.dev.yaml": GOOD}),
    Case("demo", "both-rabbitmq-urls-of-the-wrong-kind", ["demo", "--stack", "dev", "--amqp-url", HTTP_DOWN,
                                                           "--management-url", AMQP_DOWN], 2,
         ["2 problems", f"--amqp-url '{HTTP_DOWN}' is not an AMQP URL", "is not an http(s) URL"],
         files={"Pulumi.dev.yaml": GOOD}),
    Case("demo", "both-rabbitmq-urls-unreachable", ["demo", "--stack", "dev", "--amqp-url",
                                                     AMQP_DOWN.removesuffix("/%2F"), "--management-url",
                                                     HTTP_DOWN], 2,
         ["2 problems", f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN}",
          f"cannot reach RabbitMQ (AMQP, --amqp-url) at 127.0.0.1:{DOWN}: [Errno 111] Connection refused"],
         files={"Pulumi.dev.yaml": GOOD}),
    Case("demo", "old-and-new-spelling", ["demo", "--stack", "dev", "--rabbitmq-management-url", HTTP_DOWN,
                                           "--management-url", HTTP_DOWN], 2,
         ["--rabbitmq-management-url (or NSB_RABBITMQ_MANAGEMENT_URL) and --management-url both given"],
         files={"Pulumi.dev.yaml": GOOD}),
    Case("demo", "private-broker-version-with-a-given-broker", ["demo", "--stack", "dev", "--rabbitmq-version", "3.10",
                                                                 "--amqp-url", AMQP_DOWN.removesuffix("/%2F"),
                                                                 "--management-url", HTTP_DOWN], 2,
         ["--rabbitmq-version 3.10 chooses the private broker", "--amqp-url gives a running one"],
         files={"Pulumi.dev.yaml": GOOD}),
    Case("demo", "private-broker-version-unknown", ["demo", "--stack", "dev", "--rabbitmq-version", "4.0"], 2,
         ["Invalid value for '--rabbitmq-version'", "'4.0' is not one of '4.3', '3.10'"],
         files={"Pulumi.dev.yaml": GOOD}, max_lines=8),
    Case("demo", "stack-without-transports", ["demo", "--stack", "dev"], 2, ["neither nsb-delays:rabbitmq nor"],
         files={"Pulumi.dev.yaml": stack("  nsb-delays:msmq:\n    endpoints: [Sales]\n")}),
    # --- migrate: option combinations (refused before any connection) ---------------------------------------
    Case("migrate-options", "no-source", ["migrate", "run", *RABBIT], 2,
         ["give a source: --source-jdbc URL", "--source-path PATH"]),
    Case("migrate-options", "two-sources", ["migrate", "run", "--source-jdbc", DB_DOWN, "--source-path", "x.parquet",
                                            *RABBIT], 2, ["give one source: --source-jdbc or --source-path, not both"]),
    Case("migrate-options", "export-without-ledger", ["migrate", "run", "--source-path", "x.jsonl", *RABBIT], 2,
         ["run from an export (--source-path) needs --ledger-jdbc-url"]),
    Case("migrate-options", "ledger-not-postgresql", ["migrate", "run", "--source-path", "x.jsonl",
                                                      "--ledger-jdbc-url", "jdbc:mysql://db/app", *RABBIT], 2,
         ["--ledger-jdbc-url 'jdbc:mysql://db/app': the ledger of an export run is kept in PostgreSQL"]),
    Case("migrate-options", "export-option-on-a-table", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                         "Sales", "--source-format", "json", *RABBIT], 2,
         ["--source-format applies only to an export (--source-path)"]),
    Case("migrate-options", "table-option-on-an-export", ["migrate", "preview", "--source-path", "x.jsonl",
                                                          "--source-kind", "nhibernate", "--table", "T"], 2,
         ["--source-kind, --table apply only to a table (--source-jdbc)"]),
    Case("migrate-options", "no-management-url", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales"], 2,
         ["--management-url, --username, --password not given (flags, RABBITMQ_ENDPOINT/USERNAME/PASSWORD, "
          "rabbitmq:endpoint/username/password in the --stack file)"]),
    Case("migrate-options", "old-and-new-spelling", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales",
                                                     "--rabbitmq-url", AMQP_DOWN, "--amqp-url", AMQP_DOWN], 2,
         ["--rabbitmq-url (or NSB_RABBITMQ_URL) and --amqp-url both given: give --amqp-url only"]),
    Case("migrate-options", "old-region-with-rabbitmq", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                         "Sales", "--sqs-region", "eu-west-1", *RABBIT], 2,
         ["--sqs-region applies only to --target sqs"]),
    Case("migrate-options", "tls-option-with-sqs", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales",
                                                    "--target", "sqs", "--insecure"], 2,
         ["--insecure applies only to --target rabbitmq"]),
    Case("migrate-options", "ca-cert-missing", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales",
                                                "--ca-cert", "ca.pem", *RABBIT], 2,
         ["Invalid value for '--ca-cert'", "'ca.pem' does not exist"]),
    Case("migrate-options", "stack-missing", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales",
                                              "--stack", "prod", *RABBIT], 2, ["--stack 'prod': "]),
    Case("migrate-options", "rabbitmq-url-not-amqp", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales",
                                                      "--amqp-url", "http://u:secret@rabbit:15672",
                                                      "--management-url", "http://rabbit:15672"], 2,
         ["--amqp-url 'http://u:***@rabbit:15672' is not an amqp:// or amqps:// URL"]),
    Case("migrate-options", "management-url-not-http", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                        "Sales", "--amqp-url", AMQP_DOWN,
                                                        "--management-url", "rabbit:15672"], 2,
         ["--management-url 'rabbit:15672' is not an http:// or https:// URL"]),
    Case("migrate-options", "rabbitmq-option-with-sqs", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                         "Sales", "--target", "sqs", "--amqp-url", AMQP_DOWN], 2,
         ["--amqp-url applies only to --target rabbitmq"]),
    Case("migrate-options", "sqs-option-with-rabbitmq", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                         "Sales", "--sqs-prefix", "prod-", *RABBIT], 2,
         ["--sqs-prefix applies only to --target sqs"]),
    Case("migrate-options", "s3-key-prefix-without-bucket", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                             "Sales", "--target", "sqs", "--sqs-s3-key-prefix",
                                                             "big"], 2,
         ["--sqs-s3-key-prefix needs --sqs-s3-bucket"]),
    Case("migrate-options", "unknown-jdbc-url", ["migrate", "run", "--source-jdbc", "jdbc:db2://db:50000/app",
                                                 "--endpoint", "Sales", *RABBIT], 2,
         ["cannot tell the SQL dialect of JDBC URL 'jdbc:db2://db:50000/app'"]),
    Case("migrate-options", "nhibernate-without-endpoint", ["migrate", "run", "--source-jdbc", DB_DOWN,
                                                            "--source-kind", "nhibernate", *RABBIT], 2,
         ["NHibernate keeps every endpoint's timeouts in one table: --endpoint is required"]),
    Case("migrate-options", "msmq-store-in-postgresql", ["migrate", "run", "--source-jdbc", DB_DOWN, "--source-kind",
                                                         "msmq", "--endpoint", "Sales", *RABBIT], 2,
         ["the MSMQ delayed store lives in SQL Server (dialect mssql), not 'postgresql'"]),
    Case("migrate-options", "dialect-against-url", ["migrate", "run", "--source-jdbc", DB_DOWN, "--dialect", "mysql",
                                                    "--endpoint", "Sales", *RABBIT], 2,
         ["--dialect mysql does not match --source-jdbc, a postgresql URL"]),
    Case("migrate-options", "unknown-master", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales",
                                               "--master", "localhost", *RABBIT], 2,
         ["--master 'localhost' is not a Spark master URL"]),
    Case("migrate-options", "unknown-remote", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint", "Sales",
                                               "--remote", "http://connect:15002", *RABBIT], 2,
         ["--remote 'http://connect:15002' is not a Spark Connect URL"]),
    Case("migrate-options", "master-and-remote", ["migrate", "preview", "--source-jdbc", DB_DOWN, "--endpoint", "Sales",
                                                  "--master", "local[2]", "--remote", "sc://connect:15002"], 2,
         ["give one place to run: --master (a Spark master) or --remote (a Spark Connect server), not both"]),
    Case("migrate-options", "quarantine-under-a-file", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                        "Sales", "--quarantine", "notes.txt/q.jsonl", *RABBIT], 2,
         ["--quarantine notes.txt/q.jsonl:", "is a file, so no directory can be made under it"],
         files={"notes.txt": "x"}),
    Case("migrate-options", "quarantine-is-a-directory", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                          "Sales", "--quarantine", "q", *RABBIT], 2,
         ["--quarantine q: is a directory"], files={"q/keep": ""}),
    Case("migrate-options", "batch-size-zero", ["migrate", "run", "--source-jdbc", DB_DOWN, "--batch-size", "0"], 2,
         ["Invalid value for '--batch-size'", "0 is not in the range x>=1"]),
    Case("migrate-options", "cutoff-not-a-date", ["migrate", "run", "--source-jdbc", DB_DOWN, "--cutoff",
                                                  "yesterday"], 2,
         ["Invalid value for '--cutoff'", "'yesterday' does not match the formats"]),
    Case("migrate-options", "report-dir-is-a-file", ["migrate", "preview", "--source-jdbc", DB_DOWN, "--endpoint",
                                                     "Sales", "--report-dir", "report"], 2,
         ["--report-dir report: exists and is not a directory"], files={"report": "x"}),
    Case("migrate-options", "abort-output-is-the-export", ["migrate", "abort", "--source-path", "t.jsonl",
                                                           "--source-format", "json", "--ledger-jdbc-url", DB_DOWN,
                                                           "--abort-output", "t.jsonl"], 2,
         ["--abort-output t.jsonl: exists and is not a directory", "is the export itself"],
         files={"t.jsonl": "{}\n"}),
    Case("migrate-options", "abort-output-on-a-table", ["migrate", "abort", "--source-jdbc", DB_DOWN, "--endpoint",
                                                        "Sales", "--abort-output", "rest"], 2,
         ["--abort-output applies only to an export (--source-path)"]),
    Case("migrate-options", "every-problem-at-once", ["migrate", "run", "--master", "foo", "--quarantine", "q"], 2,
         ["4 problems", "give a source", "--management-url, --username, --password not given", "--master 'foo'",
          "--quarantine q: is a directory", "nothing was changed"], files={"q/keep": ""}, max_lines=7),
    Case("migrate-options", "unknown-target", ["migrate", "run", "--source-jdbc", DB_DOWN, "--target", "kafka"], 2,
         ["Invalid value for '--target': 'kafka' is not one of 'rabbitmq', 'sqs'"]),
    Case("migrate-options", "unknown-export-format", ["migrate", "preview", "--source-path", "t.csv",
                                                      "--source-format", "csv"], 2,
         ["Invalid value for '--source-format': 'csv' is not one of 'parquet', 'json'"]),
    Case("migrate-options", "preview-partitions-zero", ["migrate", "preview", "--source-jdbc", DB_DOWN,
                                                        "--partitions", "0"], 2,
         ["Invalid value for '--partitions'", "0 is not in the range x>=1"]),
    Case("cli", "misspelt-command", ["migrte", "run"], 2, ["No such command 'migrte'", "Did you mean 'migrate'"]),
    Case("cli", "check-unknown-format", ["check", "--stack", "dev", "--format", "yaml"], 2,
         ["'yaml' is not one of 'text', 'markdown', 'json'"], files={"Pulumi.dev.yaml": GOOD}),
    Case("cli", "verify-ca-cert-missing", ["verify", "--stack", "dev", "--ca-cert", "ca.pem"], 2,
         ["Invalid value for '--ca-cert'", "'ca.pem' does not exist"], files={"Pulumi.dev.yaml": GOOD}),
    Case("cli", "pulumi-plugin-unknown-kind", ["pulumi-plugin", "stack", "plugin"], 2,
         ["'stack' is not one of 'provider', 'policy-pack'"]),
    Case("cli", "pulumi-plugin-directory-not-empty", ["pulumi-plugin", "provider", "plugin"], 2,
         ["plugin exists and is not an empty directory", "nothing was written"], files={"plugin/keep": ""}),
    Case("cli", "pulumi-plugin-under-a-file", ["pulumi-plugin", "provider", "notes.txt/plugin"], 2,
         ["nsb-delays pulumi-plugin: cannot write the plugin directory notes.txt/plugin"], files={"notes.txt": "x"}),
    # --- init: a project in an empty repository (checked before the first file is written) ----------------
    Case("init", "directory-not-empty", ["init"], 2,
         ["DIR . is not empty (notes.txt)", "--force", "nothing was written"], files={"notes.txt": "x"}),
    Case("init", "bad-broker-url", ["init", "project", "--broker-url", "rabbit:15672"], 2,
         ["--management-url 'rabbit:15672' is not an http:// or https:// URL", "nothing was written"]),
    Case("init", "bad-broker-version", ["init", "project", "--broker-version", "four"], 2,
         ["nsb-delays:rabbitmq.brokerVersion", "'four'", "nothing was written"]),
    Case("init", "bad-endpoint-name", ["init", "project", "--endpoint", "Sales", "--endpoint", "amq.orders"], 2,
         ["nsb-delays:rabbitmq.endpoints[1]: queue 'amq.orders' starts with 'amq.'", "nothing was written"]),
    Case("init", "bad-stack-name", ["init", "project", "--stack", "org/prod stack"], 2,
         ["--stack 'org/prod stack': a stack name is letters", "nothing was written"]),
    Case("init", "unwritable-directory", ["init", "notes.txt/project"], 2,
         ["cannot write DIR notes.txt/project", "notes.txt is a file", "nothing was written"],
         files={"notes.txt": "x"}),
    Case("init", "force-over-a-file", ["init", "notes.txt", "--force"], 2,
         ["DIR notes.txt is a file; give a directory", "nothing was written"], files={"notes.txt": "x"}),
    Case("init", "unknown-tool", ["init", "project", "--tool", "terraform"], 2,
         ["Invalid value for '--tool'", "'terraform' is not one of 'pulumi', 'opentofu'"]),
    Case("init", "opentofu-with-project", ["init", "project", "--tool", "opentofu", "--project", "delays"], 2,
         ["--project 'delays' applies to --tool pulumi only", "no Pulumi project (Pulumi.yaml)",
          "nothing was written"]),
    Case("init", "opentofu-with-an-org-stack", ["init", "project", "--tool", "opentofu", "--stack", "org/prod"], 2,
         ["--stack 'org/prod': with --tool opentofu a stack is a name", "org/ and org/project/ name a Pulumi Cloud "
          "stack", "nothing was written"]),
    Case("init", "opentofu-bad-endpoint-name", ["init", "project", "--tool", "opentofu", "--endpoint", "amq.x"], 2,
         ["nsb-delays:rabbitmq.endpoints[0]: queue 'amq.x' starts with 'amq.'", "nothing was written"]),
    Case("init", "opentofu-over-a-foreign-module", ["init", ".", "--tool", "opentofu", "--force"], 2,
         ["module: not empty and not a module nsb-delays rendered", "nothing was written"],
         files={"module/main.tf": "# ours\n"}),
    # --- migrate: what it would reach is not there (refused before anything moves) --------------------------
    Case("migrate-unreachable", "database-and-broker-down", ["migrate", "run", "--source-jdbc", DB_DOWN, "--endpoint",
                                                             "Sales", "--amqp-url", AMQP_DOWN,
                                                             "--management-url", HTTP_DOWN], 2,
         [f"cannot connect to the postgresql database 127.0.0.1:{DOWN}/app as nsb", "Connection refused",
          f"cannot reach RabbitMQ (AMQP, --amqp-url) at 127.0.0.1:{DOWN} vhost '/' as 'guest'",
          f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN} as 'guest'", "nothing was changed"],
         max_lines=5),
    Case("migrate-unreachable", "export-missing-and-ledger-down", ["migrate", "run", "--source-path", "gone.parquet",
                                                                   "--ledger-jdbc-url", DB_DOWN, "--amqp-url",
                                                                   AMQP_DOWN, "--management-url", HTTP_DOWN],
         2, ["--ledger-jdbc-url: cannot connect to the postgresql database", "export gone.parquet: does not exist"],
         max_lines=6),
    Case("migrate-unreachable", "preview-export-missing", ["migrate", "preview", "--source-path", "gone.jsonl",
                                                           "--source-format", "json"], 2,
         ["export gone.jsonl: does not exist; nothing was changed"]),
    Case("migrate-unreachable", "preview-export-empty-directory", ["migrate", "preview", "--source-path", "exports"],
         2, ["export exports: a directory without data files"], files={"exports/_SUCCESS": ""}),
    Case("migrate-unreachable", "preview-parquet-not-parquet", ["migrate", "preview", "--source-path", "t.parquet"], 2,
         ["export t.parquet: t.parquet is not a readable Parquet file"], files={"t.parquet": b"Id,Time\n1,2\n"}),
    Case("migrate-unreachable", "preview-parquet-without-time", ["migrate", "preview", "--source-path", "t.parquet"],
         2, ["export t.parquet: no field 'Time'", "fields there: Destination, Id"],
         files={"t.parquet": parquet_bytes({"Id": ["a"], "Destination": ["Sales"]})}),
    Case("migrate-unreachable", "parquet-without-endpoint-field", ["migrate", "preview", "--source-path", "t.parquet",
                                                                   "--endpoint", "Sales"], 2,
         ["no field 'OwningTimeoutManager'"],
         files={"t.parquet": parquet_bytes({"Id": ["a"], "Destination": ["Sales"], "Time": ["2030-01-01"]})}),
    Case("migrate-unreachable", "sqlserver-driver-missing", ["migrate", "run", "--source-jdbc",
                                                             f"jdbc:sqlserver://127.0.0.1:{DOWN};databaseName=app",
                                                             "--endpoint", "Sales", "--target", "sqs",
                                                             "--sqs-endpoint-url", HTTP_DOWN], 2,
         ["Spark's JDBC driver com.microsoft.sqlserver.jdbc.SQLServerDriver", "is missing", "$NSB_JDBC_JARS",
          f"cannot use SQS at {HTTP_DOWN}"], max_lines=6),
    Case("migrate-unreachable", "mysql-connector-missing", ["migrate", "preview", "--source-jdbc",
                                                            f"jdbc:mysql://127.0.0.1:{DOWN}/app", "--endpoint",
                                                            "Sales"], 2,
         ["Spark's JDBC driver com.mysql.cj.jdbc.Driver for jdbc:mysql:// is missing", "MySQL Connector/J",
          f"cannot connect to the mysql database 127.0.0.1:{DOWN}/app"], max_lines=4),
    Case("migrate-unreachable", "export-abort-ledger-down", ["migrate", "abort", "--source-path", "t.jsonl",
                                                            "--ledger-jdbc-url", DB_DOWN], 2,
         ["--ledger-jdbc-url: cannot connect to the postgresql database"], files={"t.jsonl": "{}\n"}),
    Case("migrate-unreachable", "abort-database-down", ["migrate", "abort", "--source-jdbc", DB_DOWN, "--endpoint",
                                                        "Sales"], 2,
         [f"cannot connect to the postgresql database 127.0.0.1:{DOWN}/app as nsb", "nothing was changed"]),
    # --- discover: the broker to read and the files to write (a broker without NServiceBus objects:
    # tests/broker/test_discover.py) -------------------------------------------------------------------------------
    Case("discover", "missing-broker", ["discover", "--stack", "prod"], 2,
         ["nsb-delays discover: --management-url, --username, --password not given"]),
    Case("discover", "unreachable-broker", ["discover", "--stack", "prod", "--management-url", HTTP_DOWN,
                                            "--username", "guest", "--password", "guest"], 2,
         [f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN} as 'guest'", "Connection refused"]),
    Case("discover", "existing-stack-file", ["discover", "--stack", "prod", "--management-url", HTTP_DOWN,
                                             "--username", "guest", "--password", "guest"], 2,
         ["Pulumi.prod.yaml exists: pass --force to overwrite it"], files={"Pulumi.prod.yaml": GOOD}),
    Case("discover", "existing-import-file", ["discover", "--import-file", "import.json", "--management-url",
                                              HTTP_DOWN, "--username", "guest", "--password", "guest"], 2,
         ["import.json exists: pass --force to overwrite it"], files={"import.json": "{}"}),
    Case("discover", "output-folder-missing", ["discover", "--stack", "stacks/Pulumi.prod.yaml", "--management-url",
                                               HTTP_DOWN, "--username", "guest", "--password", "guest"], 2,
         ["stacks/Pulumi.prod.yaml: the folder stacks does not exist"]),
    Case("discover", "terraform-without-a-directory", [*DISCOVER, "--format", "terraform"], 2,
         ["--format terraform writes a directory: give -o DIR"]),
    Case("discover", "terraform-with-an-import-file", [*DISCOVER, "--format", "terraform", "-o", "module",
                                                       "--import-file", "import.json"], 2,
         ["--import-file is --format pulumi's `pulumi import` document", "imports.tf.json"]),
    Case("discover", "a-directory-without-terraform", [*DISCOVER, "-o", "module"], 2,
         ["-o applies only to --format terraform"]),
    Case("discover", "terraform-into-a-directory-of-other-files", [*DISCOVER, "--format", "terraform", "-o", "infra"],
         2, ["-o infra: not empty and not a module nsb-delays rendered"], files={"infra/main.tf": "# mine\n"}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_and_nothing_changes(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace, logs = tmp_path / "work", tmp_path / "logs"
    workspace.mkdir()
    write_files(workspace, case.files)
    monkeypatch.chdir(workspace)
    before = snapshot(workspace)
    env = {**CLEAN_ENVIRONMENT, "NSB_DELAYS_LOG_DIR": str(logs), "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", **case.env}  # fmt: skip
    result = CliRunner().invoke(cli, list(case.args), env=env)
    assert_refused(result, case)
    assert snapshot(workspace) == before, "the refused command wrote into the working directory"
    assert not logs.exists(), "a refusal before any work must not need a log"


def test_the_table_covers_every_category() -> None:
    counts: dict[str, int] = {}
    for case in CASES:
        counts[case.category] = counts.get(case.category, 0) + 1
    assert len({case.id for case in CASES}) == len(CASES)
    assert min(counts.values()) >= 2 and len(CASES) >= 60, counts


def test_stack_name_is_found_in_the_project_from_a_subdirectory(tmp_path: Path, monkeypatch) -> None:
    """``--stack dev`` from a subfolder of the project: the current directory first, then the project's."""
    write_files(tmp_path, {"Pulumi.yaml": "name: nsb-delays\n", "Pulumi.dev.yaml": GOOD, "deploy/notes": ""})
    monkeypatch.chdir(tmp_path / "deploy")
    result = CliRunner().invoke(cli, ["render", "--stack", "dev", "--format", "rabbitmq-definitions"])
    assert result.exit_code == 0 and '"name": "Sales"' in result.output
    write_files(tmp_path, {"deploy/Pulumi.dev.yaml": stack("  nsb-delays:rabbitmq:\n    endpoints: [Local]\n")})
    result = CliRunner().invoke(cli, ["render", "--stack", "dev", "--format", "rabbitmq-definitions"])
    assert result.exit_code == 0 and '"name": "Local"' in result.output and '"name": "Sales"' not in result.output


def test_an_unexpected_error_is_one_line_naming_its_log(tmp_path: Path, monkeypatch) -> None:
    """A bug still ends without a traceback on the terminal: exit 1 and the file that holds it."""
    from nsb_delays.infra.commands import render as render_command

    def broken(*_args: object) -> str:
        raise ZeroDivisionError("division by zero")

    write_files(tmp_path, {"Pulumi.dev.yaml": GOOD})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(render_command, "render", broken)
    result = CliRunner().invoke(cli, ["render", "--stack", "dev", "--format", "rabbitmq-definitions"],
                                env={"NSB_DELAYS_LOG_DIR": str(tmp_path / "logs")})  # fmt: skip
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "unexpected error ZeroDivisionError: division by zero (a bug; the traceback is in" in result.output
    (log,) = (tmp_path / "logs").iterdir()
    assert "Traceback (most recent call last)" in log.read_text() and str(log) in result.output
