"""Entry point for `pulumi preview --policy-pack policies`: constructs the pack, which serves it and blocks.

Never import this module from tests or tools; import ``policies.pack`` instead.
"""

from pulumi_policy import PolicyPack

from nsb_delays.policies.pack import DEFAULT_ENFORCEMENT_LEVEL, PACK_NAME, POLICIES

PolicyPack(name=PACK_NAME, policies=POLICIES, enforcement_level=DEFAULT_ENFORCEMENT_LEVEL)
