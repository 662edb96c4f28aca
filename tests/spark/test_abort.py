"""``abort`` after a partial run restores exactly the rows the ledger had not marked dispatched; it is
refused while the run still lives."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from nsb_delays.pipeline.faults import Fault
from nsb_delays.pipeline.ledger import DISPATCHED, STATE_TABLE, BatchOutcome, Ledger, LedgerError, conninfo_from_jdbc
from nsb_delays.pipeline.migration import RunOptions, abort_migration, run_migration
from tests.jobs import wait_for_fault_point
from tests.spark.conftest import ledger_rows, timeout, utc_now, wait_for_the_run_lock_to_be_free

ROWS, BATCH_SIZE = 900, 100
COLUMNS = '"Id"::text, "Destination", "SagaId"::text, "State", "Time", "Headers", "PersistenceVersion"'


def test_abort_after_a_partial_run_restores_exactly_the_undispatched_rows(
    spark, postgres, timeout_table, broker_vhost
) -> None:
    broker = broker_vhost(["Sales"])
    now = utc_now()
    rows = [timeout("Sales", 3600 + i, i, now=now) for i in range(ROWS)]
    source = timeout_table("Partial", rows)
    original = {row[0]: row for row in ledger_rows(postgres.dsn, f"select {COLUMNS} from {source.layout.table}")}

    options = RunOptions(
        source, broker.target(), batch_size=BATCH_SIZE, partitions=2, fault=Fault.parse("after-publish:2:raise"),
        show_progress=False,
    )  # fmt: skip
    with pytest.raises(Exception, match="injected fault at after-publish"):
        run_migration(spark, options)

    (table,) = ledger_rows(postgres.dsn, f'select "MigrationTable" from "{STATE_TABLE}" where "SourceTable" = %s',
                           (source.layout.table,))[0]  # fmt: skip
    dispatched = {
        key
        for (key,) in ledger_rows(
            postgres.dsn,
            f'select "Id"::text from "{table}" where "Reason" is null and "BatchNumber" in '
            f'(select "BatchNumber" from "{table}_batches" where "Status" = %s)',
            (DISPATCHED,),
        )
    }
    assert 0 < len(dispatched) < ROWS  # a partial run: some batches done, some not

    run, restored = abort_migration(source)

    assert restored == ROWS - len(dispatched)
    back = {row[0]: row for row in ledger_rows(postgres.dsn, f"select {COLUMNS} from {source.layout.table}")}
    assert set(back) == set(original) - dispatched
    assert all(back[key] == original[key] for key in back)  # every column as it was
    assert ledger_rows(postgres.dsn, f'select "Status" from "{STATE_TABLE}" where "MigrationRunId" = %s',
                       (run.run_id,)) == [(3,)]  # fmt: skip
    assert {key for (key,) in ledger_rows(postgres.dsn, f'select "Id"::text from "{table}"')} == dispatched
    with pytest.raises(LedgerError, match="nothing to abort"):
        abort_migration(source)


def test_cli_run_that_stops_says_how_to_resume_and_abort_restores(spark, postgres, timeout_table, broker_vhost) -> None:
    from click.testing import CliRunner

    from nsb_delays.infra.commands.migrate.group import migrate

    broker = broker_vhost(["Sales"])
    rows = [timeout("Sales", 600 + i, i, now=utc_now()) for i in range(60)]
    source = timeout_table("CliAbort", rows)
    common = ["--source-jdbc", f"{postgres.jdbc_url}?user={postgres.user}", "--endpoint", "CliAbort"]
    target = ["--amqp-url", broker.amqp_url, "--management-url", broker.broker.management_url]
    result = CliRunner().invoke(
        migrate, ["run", *common, *target, "--batch-size", "10", "--partitions", "1", "--no-progress",
                  "--fault", "after-publish:3:raise"],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "the run stopped: nsb_delays.pipeline.faults.InjectedFault: injected fault at after-publish" in result.output
    assert "60 hidden, 20 dispatched, 0 quarantined, 40 pending" in result.output
    assert "resume:  nsb-delays migrate run --source-jdbc" in result.output
    assert "restore: nsb-delays migrate abort --source-jdbc" in result.output
    result = CliRunner().invoke(migrate, ["abort", *common])
    assert result.exit_code == 0, result.output
    restored = len(rows) - 2 * 10  # two batches were confirmed and marked before the third stopped
    assert f"{restored:,} timeouts restored" in result.output
    assert ledger_rows(postgres.dsn, f"select count(*) from {source.layout.table}") == [(restored,)]


@pytest.mark.parametrize("ended_by", ["SIGKILL", "the refusal's statement"])
def test_abort_is_refused_while_the_run_lives_and_works_once_it_is_gone(
    ended_by, spark, postgres, timeout_table, broker_vhost, tmp_path
) -> None:
    """A live ``run`` (a real ``spark-submit``, parked right after hiding) holds its session advisory lock:
    ``abort`` refuses, naming the run and the session that holds the lock. Once the run's processes are SIGKILLed
    the lock is gone with them; or, as for a run whose host crashed and cannot be stopped, the refusal's own
    statement (``pg_terminate_backend``) ends that session while the process still hangs, and ``abort`` works."""
    from tests.spark.test_crash_safety import spark_submit

    broker = broker_vhost(["Sales"])
    rows = [timeout("Sales", 600 + i, i, now=utc_now()) for i in range(50)]
    endpoint = "LiveRun" if ended_by == "SIGKILL" else "LiveRunEnded"
    source = timeout_table(endpoint, rows)
    marker = tmp_path / "hidden"
    job = spark_submit(
        ["--source-jdbc", f"{postgres.jdbc_url}?user={postgres.user}", "--endpoint", endpoint,
         "--amqp-url", broker.amqp_url, "--management-url", broker.broker.management_url,
         "--no-progress", "--fault", f"after-hide:1:hang:{marker}"],
    )  # fmt: skip
    try:
        assert wait_for_fault_point(marker, lambda: job.poll() is None), "the run ended before it finished hiding"
        ((run_id,),) = ledger_rows(postgres.dsn, f'select "MigrationRunId" from "{STATE_TABLE}" '
                                                 'where "SourceTable" = %s', (source.layout.table,))  # fmt: skip
        with pytest.raises(
            LedgerError, match=f"migration run {run_id} of .*{endpoint}_TimeoutData.* is still running"
        ) as refused:
            abort_migration(source)
        assert ledger_rows(postgres.dsn, f"select count(*) from {source.layout.table}") == [(0,)]  # nothing moved
        holder = re.search(
            r"holds its lock: session (\d+) from (?:127\.0\.0\.1|::1), connected [0-9-]+ [0-9:]+ UTC\)",
            str(refused.value),
        )
        end_it = re.search(
            r"end the session \(`(select pg_terminate_backend\((\d+)\))`\) and rerun", str(refused.value)
        )
        assert holder and end_it and end_it[2] == holder[1], str(refused.value)
        session = int(holder[1])
        assert ledger_rows(postgres.dsn, "select count(*) from pg_stat_activity where pid = %s", (session,)) == [(1,)]
        if ended_by != "SIGKILL":
            ledger_rows(postgres.dsn, end_it[1])  # what the operator runs when the run's host is gone
            wait_for_the_run_lock_to_be_free(source)
            assert job.poll() is None  # the run's process still hangs: only its session ended
            run, restored = abort_migration(source)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)  # the run's driver, JVM and workers: its session (and lock) ends
        job.wait(30)

    if ended_by == "SIGKILL":
        wait_for_the_run_lock_to_be_free(source)
        run, restored = abort_migration(source)
    assert ledger_rows(postgres.dsn, "select count(*) from pg_stat_activity where pid = %s", (session,)) == [(0,)]
    assert (run.run_id, restored) == (run_id, len(rows))
    assert ledger_rows(postgres.dsn, f"select count(*) from {source.layout.table}") == [(len(rows),)]


def test_abort_waits_for_a_batch_a_task_still_sends_and_a_later_task_sends_nothing(
    spark, postgres, timeout_table, broker_vhost
) -> None:
    """A Spark Connect server outlives its client: after Ctrl-C a task can still be sending a batch while the
    operator runs ``abort``. The task's claim (the batch's row locked until its mark commits) makes ``abort``
    wait for it — refused, nothing changed, if it waits too long — so that batch ends dispatched and stays
    out of the legacy table; a task reaching another batch after the abort finds it no longer pending."""
    rows = [timeout("Sales", 3600 + i, i, now=utc_now()) for i in range(ROWS)]
    abort_while_a_task_sends_a_batch(spark, timeout_table("Claimed", rows), broker_vhost(["Sales"]))


def abort_while_a_task_sends_a_batch(spark, source, broker) -> None:
    """The scenario above on ``source`` (any dialect): a partial run, then ``abort`` while a task claims a batch."""
    options = RunOptions(
        source, broker.target(), batch_size=BATCH_SIZE, partitions=1, fault=Fault.parse("after-publish:3:raise"),
        show_progress=False,
    )  # fmt: skip
    with pytest.raises(Exception, match="injected fault at after-publish"):
        run_migration(spark, options)  # two batches dispatched, the third sent and not marked, the rest untouched
    ledger = Ledger(conninfo_from_jdbc(source.url, source.user, source.password), source.layout)
    run = ledger.active_run()
    assert run is not None
    pending = ledger.pending_batch_rows(run)
    in_flight, later = sorted(pending)[:2]

    def legacy_rows() -> int:
        with ledger.connect() as connection:
            return int(connection.scalar(f"select count(*) from {source.layout.table}"))

    task = ledger.connect()  # a task of the interrupted run, still sending ``in_flight``
    operator = ThreadPoolExecutor(1)
    try:
        with task.transaction():
            assert ledger.claim_batch(run, in_flight, task)
            with pytest.raises(LedgerError, match=f"a task of migration run {run.run_id} is still sending a batch"):
                ledger.abort(run, wait_seconds=1)
            assert legacy_rows() == 0 and ledger.pending_batch_rows(run) == pending  # nothing changed
            aborting = operator.submit(ledger.abort, run, wait_seconds=60)
            time.sleep(1.5)
            assert not aborting.done(), "abort did not wait for the batch in flight"
            ledger.mark_batch_done(run, BatchOutcome(in_flight, {}), task)  # the task's confirms came back
        # leaving the block committed the mark and ended the claim: abort went on
        _, restored = aborting.result(timeout=60)
        with task.transaction():
            assert not ledger.claim_batch(run, later, task)  # aborted: a task arriving now sends nothing
    finally:
        operator.shutdown(wait=False, cancel_futures=True)
        task.close()

    assert restored == sum(count for batch, count in pending.items() if batch != in_flight)
    assert legacy_rows() == restored
