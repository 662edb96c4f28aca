"""A transport's section of the stack config (``nsb-delays:rabbitmq``, ``nsb-delays:sqs``): its keys (``keys.py``,
from the settings' declarations), its parser (``parsing.py``) and its plan (``plan.py``). Pure, as the model it reads
(no Pulumi, no I/O): the transports take a section's plan, and the stack config (``stack/``) reads whole stack files
into plans of them.
"""
