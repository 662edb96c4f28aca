"""The manifest ``nsb-delays render --format topology-operator`` writes, declared on each broker version by the
RabbitMQ Messaging Topology Operator's own code (v1.20.1: its api/v1beta1 types and internal.Generate* functions,
through rabbit-hole as its controllers send them; tools/topology-operator builds that harness, ``nsb-apply``):
``nsb-delays verify`` finds no drift, and the broker holds exactly what ``tofu apply`` of the terraform render
declares in another vhost (definitions, grants and users)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.infra.render.terraform import variable_name
from servers.rabbitmq import LocalRabbitMq
from tests.engine.test_terraform_module import stack_file, verify
from tests.engine.test_transports_deployed import dev_section, with_users
from tests.opentofu import OpenTofu, render_module
from tests.topology_operator import NsbApply, apply_manifest, render_manifest, secrets


def declared(management: ManagementApi, vhost: str, users: list[str]) -> dict[str, Any]:
    """What the vhost holds (``GET /api/definitions/<vhost>``, its grants) and its users, normalised: lists sorted,
    no vhost field or version, the vhost's name (which the users' names carry) as ``VHOST``, no password hash (its
    salt is random)."""
    definitions = management.definitions(vhost)
    state: dict[str, Any] = {key: value for key, value in definitions.items() if isinstance(value, list)}
    state["permissions"] = management.vhost_permissions(vhost)
    state["topic_permissions"] = management.vhost_topic_permissions(vhost)
    found = [management.user(user) for user in users]
    state["users"] = [{k: v for k, v in user.items() if k != "password_hash"} for user in found if user]
    assert len(state["users"]) == len(users)
    text = json.dumps(state).replace(json.dumps(vhost)[1:-1], "VHOST")
    return {
        key: sorted(json.dumps({k: v for k, v in item.items() if k != "vhost"}, sort_keys=True) for item in items)
        for key, items in json.loads(text).items()
    }


def test_the_operators_code_declares_the_manifest_with_no_drift_as_tofu_declares_the_module(
    nsb_apply: NsbApply,
    opentofu: OpenTofu,
    rabbitmq: LocalRabbitMq,
    broker_version: tuple[int, ...],
    module_vhost: Any,
    tmp_path: Path,
) -> None:
    vhost = module_vhost("operator")
    section, passwords = with_users(dev_section(vhost, broker_version), vhost)
    stack = stack_file(tmp_path, section, tuple(passwords))
    manifest = tmp_path / "topology.yaml"
    render_manifest(stack, manifest)
    apply_manifest(nsb_apply, manifest, rabbitmq, secrets(manifest, passwords))
    verified = verify(stack, rabbitmq)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    management = ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
    for data in secrets(manifest, passwords).values():  # each user signs in with the Secret's password
        whoami = requests.get(f"{management.url}/api/whoami", auth=(data["username"], data["password"]), timeout=30)
        assert whoami.status_code == 200, (data["username"], whoami.text)

    # the same stack in another vhost through OpenTofu: the broker holds the same objects
    other = module_vhost("operator-tofu")
    other_section, other_passwords = with_users(dev_section(other, broker_version), other)
    (tmp_path / "tofu").mkdir()
    other_stack = stack_file(tmp_path / "tofu", other_section, tuple(other_passwords))
    module = tmp_path / "module"
    render_module(other_stack, module)
    variables = {f"TF_VAR_{variable_name(key)}": value for key, value in other_passwords.items()}
    opentofu.apply(module, rabbitmq, env=variables)
    users = sorted(data["username"] for data in secrets(manifest, passwords).values())
    other_users = [user.replace(vhost, other) for user in users]
    through_operator = declared(management, vhost, users)
    through_tofu = declared(management, other, other_users)
    # one difference, by design of each: the operator hashes a password itself, with SHA-512 (internal/user.go
    # GenerateUserSettings), the provider sends it and the broker hashes it with its default, SHA-256
    assert hashing(through_operator) == {"rabbit_password_hashing_sha512"}
    assert hashing(through_tofu) == {"rabbit_password_hashing_sha256"}
    assert without_hashing(through_operator) == without_hashing(through_tofu)
    assert len(through_operator["queues"]) > 30 and len(through_operator["topic_permissions"]) > 0


def hashing(state: dict[str, Any]) -> set[str]:
    return {json.loads(user)["hashing_algorithm"] for user in state["users"]}


def without_hashing(state: dict[str, Any]) -> dict[str, Any]:
    users = [{k: v for k, v in json.loads(user).items() if k != "hashing_algorithm"} for user in state["users"]]
    return {**state, "users": users}
