"""The CrossGuard policy pack: rules in ``rules``/``stack_rules``, the pack in ``pack``, the offline runner in
``offline``. ``__main__`` only constructs the ``PolicyPack`` (it starts the analyzer server and blocks): never
import it.
"""
