"""``--sqs-s3-bucket`` / ``--sqs-s3-key-prefix`` reach the SQS settings the run and its tasks use."""

from __future__ import annotations

from click.testing import CliRunner

from nsb_delays.infra.commands.migrate.checks import target_settings
from nsb_delays.infra.commands.migrate.group import migrate

VALUES = {
    "target": "sqs",
    "generation": "v2",
    "region": "eu-west-1",
    "sqs_endpoint_url": None,
    "sqs_prefix": "prod-",
}


def test_bucket_and_key_prefix_become_sqs_settings() -> None:
    settings = target_settings({**VALUES, "sqs_s3_bucket": "large-bodies", "sqs_s3_key_prefix": "sales"}).sqs
    assert (settings.s3_bucket, settings.s3_key_prefix, settings.queue_name_prefix) == (
        "large-bodies",
        "sales",
        "prod-",
    )


def test_without_a_bucket_there_is_no_s3_client() -> None:
    settings = target_settings({**VALUES, "sqs_s3_bucket": None, "sqs_s3_key_prefix": ""}).sqs
    assert settings.s3_bucket is None and settings.s3_client() is None


def test_run_and_preview_offer_the_options() -> None:
    for command in ("run", "preview"):
        result = CliRunner().invoke(migrate, [command, "--help"])
        assert result.exit_code == 0, result.output
        assert "--sqs-s3-bucket" in result.output and "--sqs-s3-key-prefix" in result.output
