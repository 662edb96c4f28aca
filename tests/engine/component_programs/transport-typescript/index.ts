// The TypeScript twin of ../transport-yaml/Pulumi.yaml: a whole RabbitMQ stack as one component.
import * as pulumi from "@pulumi/pulumi";

// What `pulumi package gen-sdk --language nodejs` generates for a component (see ../typescript/index.ts, whose
// language host cannot generate SDKs either): a remote ComponentResource of the provider's type, its outputs
// registered as undefined inputs.
type Inputs = Record<string, unknown>;

class RabbitMqTransport extends pulumi.ComponentResource {
    declare public readonly rabbitmqEndpointQueues: pulumi.Output<Record<string, string[]>>;
    constructor(name: string, args: Inputs, opts?: pulumi.ComponentResourceOptions) {
        const outputs = {
            rabbitmqDeliveryExchange: undefined,
            rabbitmqParkingExchange: undefined,
            rabbitmqDelayLevels: undefined,
            rabbitmqEndpointQueues: undefined,
            rabbitmqEndpointUsers: undefined,
        };
        super("nsb-delays:index:RabbitMqTransport", name, { ...args, ...outputs }, opts, true);
    }
}

const config = new pulumi.Config();
const rabbitmq = new RabbitMqTransport("rabbitmq", {
    vhost: config.require("vhost"),
    brokerVersion: config.require("brokerVersion"),
    endpoints: [{ name: "Sales", instanceDiscriminators: ["blue"] }, { name: "Billing" }],
});

export const endpointQueues = rabbitmq.rabbitmqEndpointQueues;
