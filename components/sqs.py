"""Pulumi ComponentResource for an SQS endpoint: its input queue and ``<queue>-delay.fifo`` queue.

Names and attributes come from ``components.model.sqs``. The delay queue has no redrive policy and no
content-based deduplication, as NServiceBus creates it: the transport refuses to start with a redrive
policy; content-based deduplication it ignores (its explicit deduplication ids override it). Both queues
declare ``max_message_size`` (1 MiB by default, what the transport sends inline).
"""

# No `from __future__ import annotations`: Pulumi's analyzer reads the annotations (args, outputs) as types.
from typing import Optional

import pulumi
import pulumi_aws as aws

from .args import SqsEndpointArgs
from .inputs import refusals_as_input_errors, settings_of_args
from .model import sqs as model
from .model.settings import SqsEndpointSettings
from .rabbitmq import TYPE_PREFIX


def _queue(name: str, spec: model.SqsQueueSpec, parent: pulumi.Resource, tags: dict[str, str]) -> aws.sqs.Queue:
    return aws.sqs.Queue(
        f"{name}-{spec.role}",
        name=spec.name,
        fifo_queue=spec.fifo_queue or None,
        delay_seconds=spec.delay_seconds,
        message_retention_seconds=spec.message_retention_seconds,
        # always given: left out, terraform-provider-aws sends its own default of 262,144 bytes
        # (internal/service/sqs/consts.go defaultQueueMaximumMessageSize), a quarter of what the transport sends
        max_message_size=spec.max_message_size,
        sqs_managed_sse_enabled=spec.sqs_managed_sse_enabled,
        tags={**tags, model.ROLE_TAG: spec.role},
        opts=pulumi.ResourceOptions(parent=parent),
    )


class SqsEndpoint(pulumi.ComponentResource):
    """An endpoint's input queue and, with unrestricted delayed delivery, its ``-delay.fifo`` queue."""

    queue_name: pulumi.Output[str]
    queue_url: pulumi.Output[str]
    queue_arn: pulumi.Output[str]
    delay_queue_name: Optional[pulumi.Output[str]]  # noqa: UP045 (Pulumi's analyzer reads Optional)
    delay_queue_url: Optional[pulumi.Output[str]]  # noqa: UP045
    delay_queue_arn: Optional[pulumi.Output[str]]  # noqa: UP045

    def __init__(self, name: str, args: SqsEndpointArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component = type(self).__name__
        settings = settings_of_args(SqsEndpointSettings, component, name, args)
        with refusals_as_input_errors(component, name):
            specs = settings.queues()
        super().__init__(f"{TYPE_PREFIX}{component}", name, None, opts)
        tags = {model.ENDPOINT_TAG: model.sanitize_queue_name(settings.endpoint)}
        queues = {spec.role: _queue(name, spec, self, tags) for spec in specs}
        self.queue_name = queues["input"].name
        self.queue_url = queues["input"].url
        self.queue_arn = queues["input"].arn
        delay = queues.get("delay")
        self.delay_queue_name = delay.name if delay else None
        self.delay_queue_url = delay.url if delay else None
        self.delay_queue_arn = delay.arn if delay else None
        self.register_outputs(
            {
                "queueName": self.queue_name,
                "queueUrl": self.queue_url,
                "queueArn": self.queue_arn,
                "delayQueueName": self.delay_queue_name,
                "delayQueueUrl": self.delay_queue_url,
                "delayQueueArn": self.delay_queue_arn,
            }
        )
