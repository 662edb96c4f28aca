#!/usr/bin/env bash
# The real Pulumi engine for this checkout, built from the Go modules each folder's go.mod pins:
#   cli/      the `pulumi` CLI               github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
#   python/   Pulumi's Python language host  github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python
#             (v3.79.0, installed as python-host/pulumi-language-python, beside the exec script it runs)
#   pythonhost/ the `pulumi-language-python` the CLI starts: our own small host (pythonhost/main.go) that
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
# Usage: tools/engine/build.sh PYTHON [PART...]
#   PYTHON  the virtualenv's python, which has pulumi_rabbitmq installed (read only for rabbitmq and the plugin)
#   PART    cli, python, pythonhost, rabbitmq, yaml, nodejs: build only these, in this order (default: all six).
#           `make demo` builds cli python pythonhost rabbitmq, each as a step of its own (the Makefile).
# Never fails setup: a machine without Go, or a module the proxy does not serve, gets a message naming what is
# missing; the real-engine test tier then skips (and fails under CI=true).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ENGINE=${NSB_ENGINE_DIR:-$(cd "$here/../.." && pwd)/.cache/engine}
python=${1:?usage: tools/engine/build.sh PYTHON [PART...]}
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(cli python pythonhost rabbitmq yaml nodejs)
for part in "${parts[@]}"; do
  [ -f "$here/$part/go.mod" ] || { echo "engine: no part $part (cli python pythonhost rabbitmq yaml nodejs)" >&2; exit 2; }
done
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
# The provider is stamped with, and installed as, the version of the pulumi_rabbitmq SDK pip installed.
sdk_version() {
  "$python" -c 'import importlib.metadata as m; print(m.version("pulumi_rabbitmq"))' 2>/dev/null || {
    echo "engine: pulumi_rabbitmq is not installed in $python; run make setup first" >&2; return 1; }
}

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

module_version() { (cd "$here/$1" && go list -m -f '{{.Version}}' "$2") || echo unknown; }
version_flag=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version
for part in "${parts[@]}"; do
  case $part in
    cli) build cli github.com/pulumi/pulumi/pkg/v3/cmd/pulumi pulumi \
           "-X $version_flag=$(module_version cli github.com/pulumi/pulumi/pkg/v3)" ;;
    python) mkdir -p "$bin/python-host"
            build python github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python \
              python-host/pulumi-language-python "-X $version_flag=$(module_version python github.com/pulumi/pulumi/sdk/v3)" ;;
    pythonhost) build pythonhost . pulumi-language-python \
                  "-X main.hostVersion=$(module_version python github.com/pulumi/pulumi/sdk/v3)" ;;
    rabbitmq) sdk=$(sdk_version) && build rabbitmq . pulumi-resource-rabbitmq "-X main.version=$sdk" ||
                failed="$failed pulumi-resource-rabbitmq" ;;
    yaml) build yaml github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml pulumi-language-yaml \
            "-X github.com/pulumi/pulumi-yaml/pkg/version.Version=$(module_version yaml github.com/pulumi/pulumi-yaml)" ;;
    nodejs) build nodejs github.com/pulumi/pulumi/sdk/v3/nodejs/cmd/pulumi-language-nodejs pulumi-language-nodejs \
              "-X $version_flag=$(module_version nodejs github.com/pulumi/pulumi/sdk/v3)" ;;
  esac
done

building() { [[ " ${parts[*]} " == *" $1 "* ]]; }
# The v3.79.0 host runs programs through this script, found beside its own binary; the one shipped with the CLI's
# SDK module takes the arguments the host passes (--monitor, --engine, --project, --stack, --pwd, ...).
if { building cli || building python; } && [ -x "$bin/python-host/pulumi-language-python" ]; then
  sdk_dir=$(cd "$here/cli" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3) &&
    install -m 755 "$sdk_dir/python/cmd/pulumi-language-python-exec" "$bin/python-host/pulumi-language-python-exec"
  rm -f "$bin/pulumi-language-python-exec"  # where builds before python-host/ put it
fi

# The provider as the plugin the CLI runs (the demo's and the tests' PULUMI_HOME), by the provider's step.
if building rabbitmq && [ -x "$bin/pulumi" ] && [ -x "$bin/pulumi-resource-rabbitmq" ] && sdk=$(sdk_version); then
  plugin_dir="$ENGINE/home/plugins/resource-rabbitmq-v$sdk"
  if [ ! -x "$plugin_dir/pulumi-resource-rabbitmq" ] || ! cmp -s "$plugin_dir/pulumi-resource-rabbitmq" "$bin/pulumi-resource-rabbitmq"; then
    PULUMI_HOME="$ENGINE/home" PULUMI_SKIP_UPDATE_CHECK=true "$bin/pulumi" plugin install resource rabbitmq \
      "$sdk" --file "$bin/pulumi-resource-rabbitmq" --reinstall >/dev/null &&
      echo "engine: installed pulumi-resource-rabbitmq as resource plugin rabbitmq $sdk in $ENGINE/home"
  fi
fi

if [ -n "$failed" ]; then
  echo "engine: not built:$failed; the real-engine tests skip (fail under CI=true)" >&2
else
  echo "engine: ${parts[*]} in $bin"
fi
exit 0
