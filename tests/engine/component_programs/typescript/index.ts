// The TypeScript twin of ../python/__main__.py: the same components, names and arguments.
import * as pulumi from "@pulumi/pulumi";

// What `pulumi package gen-sdk --language nodejs` generates for a component: a remote ComponentResource of the
// provider's type, its outputs registered as undefined inputs. The nodejs language host built here cannot
// generate SDKs (it has no GeneratePackage), so the three classes are written out.
type Inputs = Record<string, unknown>;

class RabbitMqDelayInfrastructure extends pulumi.ComponentResource {
    declare public readonly deliveryExchange: pulumi.Output<string>;
    declare public readonly parkingExchange: pulumi.Output<string>;
    declare public readonly levelNames: pulumi.Output<string[]>;
    constructor(name: string, args: Inputs, opts?: pulumi.ComponentResourceOptions) {
        const outputs = { deliveryExchange: undefined, parkingExchange: undefined, levelNames: undefined, generation: undefined };
        super("nsb-delays:index:RabbitMqDelayInfrastructure", name, { ...args, ...outputs }, opts, true);
    }
}

class RabbitMqSharedQueues extends pulumi.ComponentResource {
    constructor(name: string, args: Inputs, opts?: pulumi.ComponentResourceOptions) {
        const outputs = { errorQueue: undefined, auditQueue: undefined };
        super("nsb-delays:index:RabbitMqSharedQueues", name, { ...args, ...outputs }, opts, true);
    }
}

class RabbitMqEndpoint extends pulumi.ComponentResource {
    constructor(name: string, args: Inputs, opts?: pulumi.ComponentResourceOptions) {
        const outputs = { queueName: undefined, receivingQueues: undefined, deliveryBindingKey: undefined };
        super("nsb-delays:index:RabbitMqEndpoint", name, { ...args, ...outputs }, opts, true);
    }
}

class RabbitMqEndpointPolicies extends pulumi.ComponentResource {
    constructor(name: string, args: Inputs, opts?: pulumi.ComponentResourceOptions) {
        const outputs = { policyNames: undefined };
        super("nsb-delays:index:RabbitMqEndpointPolicies", name, { ...args, ...outputs }, opts, true);
    }
}

const config = new pulumi.Config();
const vhost = config.require("vhost");
const brokerVersion = config.require("brokerVersion");
const deliveryLimitPolicies = config.requireBoolean("deliveryLimitPolicies");

const delays = new RabbitMqDelayInfrastructure("delays", { vhost, brokerVersion });
new RabbitMqSharedQueues("shared", { vhost, brokerVersion });
new RabbitMqEndpoint("sales", {
    endpoint: "Sales",
    vhost,
    instanceDiscriminators: ["blue"],
    legacyTimeoutManager: true,
    deliveryLimitPolicies,
    brokerVersion,
    deliveryExchange: delays.deliveryExchange,
    parkingExchange: delays.parkingExchange,
});
new RabbitMqEndpoint("billing", {
    endpoint: "Billing",
    vhost,
    routingTopology: "direct",
    queueType: "classic",
    deliveryLimitPolicies,
    brokerVersion,
    deliveryExchange: delays.deliveryExchange,
});

new RabbitMqEndpointPolicies("policies", {
    policyGroup: "components",
    vhost,
    deliveryLimitPolicies,
    brokerVersion,
    deliveryLimitQueues: ["Sales", "Sales-blue"],
    parkedExchanges: ["Sales", "Sales-blue"],
    parkingExchange: delays.parkingExchange,
});

export const deliveryExchange = delays.deliveryExchange;
export const levelNames = delays.levelNames;
