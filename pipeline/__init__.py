"""The PySpark timeout migration: stored timeouts -> native RabbitMQ / SQS delays (``nsb-delays migrate``).

``layouts`` (where each store keeps its timeouts) -> ``sources`` (Spark reads, canonical rows) ->
``expressions`` (the model's rules as Spark columns) -> ``preview`` + ``report``; ``ledger`` (hide,
batches, abort in the source database; its SQL per dialect in ``ledger_sql``: ``ledger_statements`` in portable
SQL, ``ledger_dialects`` what each database spells differently) -> ``dispatch`` on the
executors with ``nsb_delays.brokers``' ``messages``, ``confirms`` and ``sqs_sender``; ``migration`` drives a run on the
driver (``export_runs``: an export's run), ``spark`` starts or joins the Spark session, ``shipping`` says what the
executors need. The CLI (``infra/commands/migrate``) and the ``spark-submit`` file (``infra/spark_job.py``) are in
``infra``. Workers import only the pure model, never Pulumi.
"""
