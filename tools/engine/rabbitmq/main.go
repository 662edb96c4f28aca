// pulumi-resource-rabbitmq built from Go modules: the Terraform provider cyrilgdn/terraform-provider-rabbitmq
// bridged by pulumi-terraform-bridge, as pulumi/pulumi-rabbitmq's provider does.
//
// pulumi-rabbitmq's own provider module is not served by the module proxy these machines reach, so this file
// stands in for its provider/resources.go and cmd/pulumi-resource-rabbitmq/main.go. The settings that change
// what the engine sees are the ones pulumi/pulumi-rabbitmq's provider/resources.go Provider() sets (read at
// 66ef8ca): the bridge's standard tokens in the single "index" module (tokens.SingleModule +
// MakeStandard), the VHost/getVHost spellings it preserves, RABBITMQ_INSECURE and RABBITMQ_CACERT as config
// defaults, and autonaming (255, "-"). Its docs and per-language SDK settings do not reach the engine and are
// left out. The schema is generated in memory at start-up from the Terraform schema
// (tfgen.GenerateSchemaWithOptions) instead of being embedded from a generated file.
package main

import (
	"encoding/json"
	"os"

	"github.com/pulumi/pulumi-terraform-bridge/v3/pkg/tfbridge"
	"github.com/pulumi/pulumi-terraform-bridge/v3/pkg/tfbridge/tokens"
	"github.com/pulumi/pulumi-terraform-bridge/v3/pkg/tfgen"
	shimv2 "github.com/pulumi/pulumi-terraform-bridge/v3/pkg/tfshim/sdk-v2"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/contract"
	"github.com/terraform-providers/terraform-provider-rabbitmq/rabbitmq"
)

// version is stamped by the build (-ldflags -X main.version=…): the pulumi_rabbitmq SDK's version, under
// which the engine asks for this plugin.
var version = "0.0.0-dev"

func providerInfo() tfbridge.ProviderInfo {
	info := tfbridge.ProviderInfo{
		P:         shimv2.NewProvider(rabbitmq.Provider()),
		Name:      "rabbitmq",
		Version:   version,
		GitHubOrg: "cyrilgdn",
		Config: map[string]*tfbridge.SchemaInfo{
			"insecure":    {Default: &tfbridge.DefaultInfo{EnvVars: []string{"RABBITMQ_INSECURE"}}},
			"cacert_file": {Default: &tfbridge.DefaultInfo{EnvVars: []string{"RABBITMQ_CACERT"}}},
		},
		Resources: map[string]*tfbridge.ResourceInfo{
			"rabbitmq_vhost": {Tok: "rabbitmq:index/vHost:VHost"},
		},
		DataSources: map[string]*tfbridge.DataSourceInfo{
			"rabbitmq_vhost": {Tok: "rabbitmq:index/getVHost:getVHost"},
		},
	}
	info.MustComputeTokens(tokens.SingleModule("rabbitmq_", "index", tokens.MakeStandard("rabbitmq")))
	info.SetAutonaming(255, "-")
	return info
}

func main() {
	info := providerInfo()
	sink := diag.DefaultSink(os.Stderr, os.Stderr, diag.FormatOptions{Color: colors.Never})
	generated, err := tfgen.GenerateSchemaWithOptions(tfgen.GenerateSchemaOptions{
		ProviderInfo: info, DiagnosticsSink: sink, XInMemoryDocs: true,
	})
	contract.AssertNoErrorf(err, "generating the rabbitmq schema")
	schema, err := json.Marshal(generated.PackageSpec)
	contract.AssertNoErrorf(err, "encoding the rabbitmq schema")
	tfbridge.Main("rabbitmq", version, info, schema)
}
