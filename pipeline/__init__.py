"""The PySpark timeout migration: stored timeouts -> native RabbitMQ / SQS delays (``nsb-delays migrate``).

``layouts`` (where each store keeps its timeouts) -> ``sources`` (Spark reads, canonical rows) ->
``expressions`` (the model's rules as Spark columns) -> ``preview`` + ``report``; ``ledger`` (hide,
batches, abort in the source database; its SQL per dialect in ``ledger_sql``: ``ledger_statements`` in portable
SQL, ``ledger_dialects`` what each database spells differently) -> ``dispatch`` on the
executors with ``brokers.messages``, ``brokers.confirms`` and ``brokers.sqs_sender``; ``migration`` drives a run on the
driver; ``job`` is the CLI and the ``spark-submit`` entry point. Workers import only the pure model, never Pulumi.
"""
