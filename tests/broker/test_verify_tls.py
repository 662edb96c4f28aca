"""``nsb-delays verify`` over an https management API: the session broker gets a real TLS listener
(RabbitMQ's own ``management.ssl.*``, certificate signed by a throwaway CA) and the checks pass
with ``--ca-cert`` or ``--insecure`` and refuse to run (exit 2) against an untrusted certificate."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands.demo.servers import HOST, free_port
from nsb_delays.stack.config import StackConfig, parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.provisioning import provision_rabbitmq


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_ca_and_server_cert(folder: Path) -> tuple[Path, Path, Path]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nsb-delays test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = folder / "ca.pem", folder / "server.pem", folder / "server-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(_pem_key(key))
    return paths


@pytest.fixture(scope="module")
def https_management(rabbitmq: LocalRabbitMq) -> tuple[str, Path]:
    """Adds an https management listener to the session broker (kept for the rest of the session).

    The PEM files live in the broker's state folder and the config names them as the broker sees
    them (the 4.0 broker's chroot sees its state folder at another path)."""
    tls = rabbitmq.state_dir / "tls"
    tls.mkdir()
    ca, cert, key = write_ca_and_server_cert(tls)
    seen = {path: rabbitmq.broker_state_dir / "tls" / path.name for path in (ca, cert, key)}
    port = free_port()
    with (rabbitmq.state_dir / "rabbitmq.conf").open("a") as conf:
        conf.write(
            f"management.ssl.ip = {HOST}\nmanagement.ssl.port = {port}\nmanagement.ssl.cacertfile = {seen[ca]}\n"
            f"management.ssl.certfile = {seen[cert]}\nmanagement.ssl.keyfile = {seen[key]}\n"
        )
    rabbitmq.restart()
    return f"https://{HOST}:{port}", ca


def tls_stack(vhost: str, delivery_limit_policies: bool) -> StackConfig:
    return parse_stack_config(
        {"rabbitmq": {"vhost": vhost, "endpoints": ["Sales"], "deliveryLimitPolicies": delivery_limit_policies}},
        "tls",  # the stack file below is Pulumi.tls.yaml: the combined policies carry its name
    )


def verify(stack_file: Path, url: str, *options: str):
    return CliRunner().invoke(
        cli, ["verify", "--stack", str(stack_file), "--management-url", url, "--username", "guest",
              "--password", "guest", *options],
    )  # fmt: skip


def test_verify_over_https_trusts_only_the_given_ca(
    https_management: tuple[str, Path],
    rabbitmq: LocalRabbitMq,
    new_vhost,
    delivery_limit_policies: bool,
    tmp_path: Path,
) -> None:
    url, ca = https_management
    vhost = new_vhost("tls")
    provision_rabbitmq(rabbitmq.management_url, tls_stack(vhost, delivery_limit_policies))
    stack_file = tmp_path / "Pulumi.tls.yaml"
    stack_file.write_text(
        f"config:\n  nsb-delays:rabbitmq:\n    vhost: {vhost}\n    endpoints: [Sales]\n"
        f"    deliveryLimitPolicies: {str(delivery_limit_policies).lower()}\n"
    )

    trusted = verify(stack_file, url, "--ca-cert", str(ca))
    assert trusted.exit_code == 0, trusted.output
    assert f"RabbitMQ {url} vhost '{vhost}'" in trusted.output and "no drift" in trusted.output

    untrusted = verify(stack_file, url)
    assert untrusted.exit_code == 2, untrusted.output
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.output

    insecure = verify(stack_file, url, "--insecure")
    assert insecure.exit_code == 0, insecure.output
    assert ManagementApi(url, verify_tls=str(ca)).overview()["rabbitmq_version"]
