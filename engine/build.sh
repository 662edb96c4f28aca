#!/usr/bin/env bash
# The real Pulumi engine for this checkout, built from the Go modules each folder's go.mod pins:
#   cli/      the `pulumi` CLI               github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
#   python/   Pulumi's Python language host  github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python
#             (v3.79.0, installed as python-host/pulumi-language-python, beside the exec script it runs)
#   pythonhost/ the `pulumi-language-python` the CLI starts: our own small host (engine/pythonhost/main.go) that
#             speaks the CLI's protocol and starts python-host/ with the runtime options of each project, and
#             starts policy-pack directories (sdk/v3 at the CLI's version)
#   rabbitmq/ the RabbitMQ resource provider  cyrilgdn/terraform-provider-rabbitmq through pulumi-terraform-bridge
#   yaml/     the Pulumi YAML language host   github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml (for the
#             component provider's YAML programs; its own pulumi pkg/sdk pins, which its code needs)
#   nodejs/   the Node.js language host       github.com/pulumi/pulumi/sdk/v3/nodejs/cmd/pulumi-language-nodejs
#             (for its TypeScript programs; sdk v3.68.0, the last release with the host inside sdk/v3)
# Each folder is a Go module of its own: its go.mod and go.sum are the pins. Binaries go to $ENGINE/bin (git-ignored);
# a component is rebuilt only when its pins or sources change. The provider is installed into $ENGINE/home (the
# PULUMI_HOME of everything this project runs) under the version the installed pulumi_rabbitmq SDK asks for.
#
# Usage: engine/build.sh PYTHON   (the virtualenv's python, which has pulumi_rabbitmq installed)
# Never fails setup: a machine without Go, or a module the proxy does not serve, gets a message naming what is
# missing; the real-engine test tier then skips (and fails under CI=true).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ENGINE=${NSB_ENGINE_DIR:-$(dirname "$here")/.cache/engine}
python=${1:?usage: engine/build.sh PYTHON}
bin="$ENGINE/bin"

if command -v pulumi >/dev/null 2>&1 && [ "$(command -v pulumi)" != "$bin/pulumi" ]; then
  echo "engine: using pulumi from PATH: $(command -v pulumi) ($(pulumi version 2>/dev/null)); nothing to build"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "engine: Go is not installed, so the Pulumi engine cannot be built (install Go >= 1.26, or Pulumi's CLI);" \
       "the real-engine tests skip (fail under CI=true)" >&2
  exit 0
fi

mkdir -p "$bin" "$ENGINE/stamps" "$ENGINE/home"
sdk_version=$("$python" -c 'import importlib.metadata as m; print(m.version("pulumi_rabbitmq"))') || {
  echo "engine: pulumi_rabbitmq is not installed in $python; run make setup first" >&2; exit 0; }

# build NAME PACKAGE OUTPUT LDFLAGS: go build in $here/NAME unless the stamp (pins + sources + flags) is unchanged.
failed=""
build() {
  local name=$1 package=$2 output=$3 ldflags=$4 key start log
  key=$(cat "$here/$name"/go.mod "$here/$name"/go.sum "$here/$name"/*.go 2>/dev/null | sha256sum | cut -c1-16)-$(echo "$ldflags" | sha256sum | cut -c1-8)
  if [ -x "$bin/$output" ] && [ "$(cat "$ENGINE/stamps/$name" 2>/dev/null)" = "$key" ]; then
    return 0
  fi
  start=$(date +%s)
  log="$ENGINE/build-$name.log"
  echo "engine: building $output from $here/$name (pins in its go.mod; log $log)"
  if (cd "$here/$name" && CGO_ENABLED=0 go build -trimpath -tags osusergo,grpcnotrace -ldflags "$ldflags" \
        -o "$bin/$output.partial" "$package") >"$log" 2>&1; then
    mv "$bin/$output.partial" "$bin/$output"
    echo "$key" > "$ENGINE/stamps/$name"
    echo "engine: built $output in $(( $(date +%s) - start )) s"
  else
    rm -f "$bin/$output.partial"
    echo "engine: building $output failed after $(( $(date +%s) - start )) s; the go command said:" >&2
    grep -E "not available|Forbidden|not found|cannot find|error|go: " "$log" | tail -5 | sed 's/^/  /' >&2
    failed="$failed $output"
  fi
}

module_version() { (cd "$here/$1" && go list -m -f '{{.Version}}' "$2"); }
cli_version=$(module_version cli github.com/pulumi/pulumi/pkg/v3) || cli_version=unknown
host_version=$(module_version python github.com/pulumi/pulumi/sdk/v3) || host_version=unknown
yaml_version=$(module_version yaml github.com/pulumi/pulumi-yaml) || yaml_version=unknown
nodejs_version=$(module_version nodejs github.com/pulumi/pulumi/sdk/v3) || nodejs_version=unknown

build cli github.com/pulumi/pulumi/pkg/v3/cmd/pulumi pulumi \
  "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$cli_version"
mkdir -p "$bin/python-host"
build python github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python python-host/pulumi-language-python \
  "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$host_version"
build pythonhost . pulumi-language-python "-X main.hostVersion=$host_version"
build rabbitmq . pulumi-resource-rabbitmq "-X main.version=$sdk_version"
build yaml github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml pulumi-language-yaml \
  "-X github.com/pulumi/pulumi-yaml/pkg/version.Version=$yaml_version"
build nodejs github.com/pulumi/pulumi/sdk/v3/nodejs/cmd/pulumi-language-nodejs pulumi-language-nodejs \
  "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$nodejs_version"

# The v3.79.0 host runs programs through this script, found beside its own binary; the one shipped with the CLI's
# SDK module takes the arguments the host passes (--monitor, --engine, --project, --stack, --pwd, ...).
if [ -x "$bin/python-host/pulumi-language-python" ]; then
  sdk_dir=$(cd "$here/cli" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3) &&
    install -m 755 "$sdk_dir/python/cmd/pulumi-language-python-exec" "$bin/python-host/pulumi-language-python-exec"
  rm -f "$bin/pulumi-language-python-exec"  # where builds before python-host/ put it
fi

if [ -x "$bin/pulumi" ] && [ -x "$bin/pulumi-resource-rabbitmq" ]; then
  plugin_dir="$ENGINE/home/plugins/resource-rabbitmq-v$sdk_version"
  if [ ! -x "$plugin_dir/pulumi-resource-rabbitmq" ] || ! cmp -s "$plugin_dir/pulumi-resource-rabbitmq" "$bin/pulumi-resource-rabbitmq"; then
    PULUMI_HOME="$ENGINE/home" PULUMI_SKIP_UPDATE_CHECK=true "$bin/pulumi" plugin install resource rabbitmq \
      "$sdk_version" --file "$bin/pulumi-resource-rabbitmq" --reinstall >/dev/null &&
      echo "engine: installed pulumi-resource-rabbitmq as resource plugin rabbitmq $sdk_version in $ENGINE/home"
  fi
fi

if [ -n "$failed" ]; then
  echo "engine: not built:$failed; the real-engine tests skip (fail under CI=true)" >&2
else
  echo "engine: pulumi $cli_version, python host $host_version, yaml host $yaml_version, nodejs host $nodejs_version," \
       "rabbitmq provider $sdk_version in $bin"
fi
exit 0
