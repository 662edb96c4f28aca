"""The CrossGuard policy pack: the rules by section (``graph_rules``, ``endpoint_rules``, ``sqs_rules``,
``access_rules``, ``declaration_rules``), each declared with ``rule``'s decorators; the pack in ``pack``, the
offline runner in ``offline``. ``__main__`` only constructs the ``PolicyPack`` (it starts the analyzer server
and blocks): never import it.
"""
