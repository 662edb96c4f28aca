#!/usr/bin/env bash
# OpenTofu and the RabbitMQ provider a rendered module pins, built from the Go modules the proxy serves:
#   tofu                          github.com/opentofu/opentofu ./cmd/tofu at OPENTOFU_VERSION
#   terraform-provider-rabbitmq   github.com/cyrilgdn/terraform-provider-rabbitmq at the version
#                                 tools/engine/rabbitmq/go.mod replaces the bridged provider with (the one
#                                 pulumi-rabbitmq wraps, so both owners run the same resource code)
# Each is built inside a copy of its module's source tree: opentofu's go.mod has `replace` directives, and the
# provider's module path (github.com/terraform-providers/terraform-provider-rabbitmq) is not the one it is served
# under, so neither builds with `go install MODULE@VERSION`. The provider is laid out as a filesystem mirror
# ($TOFU/mirror/<host>/cyrilgdn/rabbitmq/<version>/linux_amd64/), for OpenTofu's and Terraform's registry hosts, so
# `tofu init` installs it offline (a CLI config's provider_installation { filesystem_mirror { ... } }).
# Binaries go to $TOFU (git-ignored); each is rebuilt only when its version changes.
#
# Usage: tools/opentofu/build.sh
# Never fails setup: a machine without Go, or a module the proxy does not serve, gets a message naming what is
# missing; the OpenTofu tests then skip (and fail under CI=true).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
TOFU=${NSB_TOFU_DIR:-$root/.cache/opentofu}
OPENTOFU_VERSION=v1.10.6
provider_version=$(sed -n 's#.*terraform-provider-rabbitmq => github.com/cyrilgdn/terraform-provider-rabbitmq \(v[0-9.]*\)#\1#p' \
  "$root/tools/engine/rabbitmq/go.mod")

if ! command -v go >/dev/null 2>&1; then
  echo "opentofu: Go is not installed, so OpenTofu cannot be built; the OpenTofu tests skip (fail under CI=true)" >&2
  exit 0
fi
mkdir -p "$TOFU/bin" "$TOFU/stamps"

# build NAME MODULE VERSION PACKAGE OUTPUT [LDFLAGS]: go build PACKAGE inside a copy of MODULE@VERSION's source tree.
failed=""
build() {
  local name=$1 module=$2 version=$3 package=$4 output=$5 ldflags=${6:-} start log dir
  if [ -x "$output" ] && [ "$(cat "$TOFU/stamps/$name" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  start=$(date +%s)
  log="$TOFU/build-$name.log"
  echo "opentofu: building $name $version from $module (log $log)"
  if dir=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" 2>"$log" |
             python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])') &&
     rm -rf "$TOFU/src-$name" && cp -r "$dir" "$TOFU/src-$name" && chmod -R u+w "$TOFU/src-$name" &&
     (cd "$TOFU/src-$name" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$output.partial" "$package") \
       >>"$log" 2>&1; then
    mv "$output.partial" "$output"
    echo "$version" > "$TOFU/stamps/$name"
    rm -rf "$TOFU/src-$name"
    echo "opentofu: built $name in $(( $(date +%s) - start )) s"
  else
    rm -f "$output.partial"
    echo "opentofu: building $name failed after $(( $(date +%s) - start )) s; the go command said:" >&2
    grep -E "not available|Forbidden|not found|cannot find|error|go: " "$log" | tail -5 | sed 's/^/  /' >&2
    failed="$failed $name"
  fi
}

# as a release is built: without the -dev marker (opentofu version/version.go, ``dev``)
build tofu github.com/opentofu/opentofu "$OPENTOFU_VERSION" ./cmd/tofu "$TOFU/bin/tofu" \
  "-X github.com/opentofu/opentofu/version.dev=no"
build provider github.com/cyrilgdn/terraform-provider-rabbitmq "$provider_version" . \
  "$TOFU/bin/terraform-provider-rabbitmq_$provider_version"

if [ -x "$TOFU/bin/terraform-provider-rabbitmq_$provider_version" ]; then
  for host in registry.opentofu.org registry.terraform.io; do
    target="$TOFU/mirror/$host/cyrilgdn/rabbitmq/${provider_version#v}/linux_amd64"
    mkdir -p "$target"
    cp -f "$TOFU/bin/terraform-provider-rabbitmq_$provider_version" "$target/"
  done
fi

if [ -n "$failed" ]; then
  echo "opentofu: not built:$failed; the OpenTofu tests skip (fail under CI=true)" >&2
else
  echo "opentofu: tofu $OPENTOFU_VERSION and terraform-provider-rabbitmq $provider_version in $TOFU"
fi
