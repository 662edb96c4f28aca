"""Typed stack configuration (namespace ``nsb-delays``): every name of the stack config, from where it lives.

- ``plan.py``: the stack's plan (``StackConfig``, ``MsmqConfig``, ``TopologyOperatorConfig``), each transport's
  section as its own plan (``RabbitMqConfig``, ``SqsConfig``: ``components/section/plan.py``);
- ``parsing.py``: a stack's config checked into its plan (``parse_stack_config``, ``ConfigError``), every problem at
  once, each naming the key and the rule; each transport's section by the section's parser
  (``components/section/parsing.py``);
- ``stack_file.py``: the stack file ``--stack`` names, read strictly (``load_stack``, ``read_stack_yaml``,
  ``parse_yaml``, ``StackFileError``) and the stack's name as Pulumi takes it;
- the keys, from the settings' declarations: ``components/section/keys.py``.
"""

from __future__ import annotations

from nsb_delays.components.section.keys import (
    BROKER_VERSION_KEY,
    DELIVERY_LIMIT_POLICIES_KEY,
    NAMESPACE,
    SECTIONS,
    TOPOLOGY_OPERATOR,
)
from nsb_delays.components.section.parsing import SQS_SECTION_CHECKS
from nsb_delays.components.section.plan import UNNAMED_STACK, RabbitMqConfig, SqsConfig

from .parsing import ConfigError, parse_stack_config, password_keys
from .plan import MsmqConfig, StackConfig, TopologyOperatorConfig
from .stack_file import (
    PROJECT_FILE,
    STACK_FILE_KEYS,
    STACK_NAME_FORMS,
    StackFileError,
    find_project_dir,
    is_stack_path,
    load_stack,
    namespace_values,
    parse_yaml,
    read_stack_yaml,
    stack_file,
    stack_name,
    stack_reference,
    valid_stack_name,
)

__all__ = [
    "BROKER_VERSION_KEY",
    "DELIVERY_LIMIT_POLICIES_KEY",
    "NAMESPACE",
    "PROJECT_FILE",
    "SECTIONS",
    "SQS_SECTION_CHECKS",
    "STACK_FILE_KEYS",
    "STACK_NAME_FORMS",
    "TOPOLOGY_OPERATOR",
    "UNNAMED_STACK",
    "ConfigError",
    "MsmqConfig",
    "RabbitMqConfig",
    "SqsConfig",
    "StackConfig",
    "StackFileError",
    "TopologyOperatorConfig",
    "find_project_dir",
    "is_stack_path",
    "load_stack",
    "namespace_values",
    "parse_stack_config",
    "parse_yaml",
    "password_keys",
    "read_stack_yaml",
    "stack_file",
    "stack_name",
    "stack_reference",
    "valid_stack_name",
]
