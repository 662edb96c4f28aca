"""Pulumi type tokens of the provider resources we declare, read, apply or check (no Pulumi import)."""

RABBITMQ_EXCHANGE = "rabbitmq:index/exchange:Exchange"
RABBITMQ_QUEUE = "rabbitmq:index/queue:Queue"
RABBITMQ_BINDING = "rabbitmq:index/binding:Binding"
RABBITMQ_POLICY = "rabbitmq:index/policy:Policy"
RABBITMQ_OPERATOR_POLICY = "rabbitmq:index/operatorPolicy:OperatorPolicy"
RABBITMQ_USER = "rabbitmq:index/user:User"
RABBITMQ_PERMISSIONS = "rabbitmq:index/permissions:Permissions"
RABBITMQ_TOPIC_PERMISSIONS = "rabbitmq:index/topicPermissions:TopicPermissions"
RABBITMQ_PROVIDER = "pulumi:providers:rabbitmq"
SQS_QUEUE = "aws:sqs/queue:Queue"
SQS_REDRIVE_POLICY = "aws:sqs/redrivePolicy:RedrivePolicy"
STACK_REFERENCE = "pulumi:pulumi:StackReference"  # pulumi/pulumi sdk/python/lib/pulumi/stack_reference.py
