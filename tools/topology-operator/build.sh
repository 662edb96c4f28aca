#!/usr/bin/env bash
# nsb-apply: the RabbitMQ Messaging Topology Operator's own code declaring a rendered manifest
# (`nsb-delays render --format topology-operator`) on a broker, without Kubernetes, for the engine tier's tests
# (tests/engine/test_topology_operator.py). Built from the Go module the proxy serves:
#   github.com/rabbitmq/messaging-topology-operator at OPERATOR_VERSION, with main.go (kept here) as its
#   cmd/nsb-apply: Go lets only the module itself import its internal/ packages (internal.Generate*), so the
#   command is built inside a copy of the module's source tree, as tools/opentofu/build.sh builds OpenTofu.
# The copy drops one requirement: github.com/rabbitmq/cluster-operator/v2, which the proxy does not serve (403
# "This module version is not available"); only the operator's rabbitmqclient and controller packages import it,
# and nsb-apply imports neither (it builds the rabbit-hole client as rabbitmqclient's factory does). Every other
# module keeps the version the operator's go.mod selects (`go mod edit -droprequire` changes no other line).
# The binary goes to $OPERATOR/bin (git-ignored), rebuilt only when the version or main.go changes.
#
# Usage: tools/topology-operator/build.sh
# Never fails setup: a machine without Go, or a module the proxy does not serve, gets a message naming what is
# missing; the topology operator's engine tests then skip (and fail under CI=true).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
OPERATOR=${NSB_OPERATOR_DIR:-$root/.cache/topology-operator}
OPERATOR_VERSION=v1.20.1
module=github.com/rabbitmq/messaging-topology-operator
output="$OPERATOR/bin/nsb-apply"

if ! command -v go >/dev/null 2>&1; then
  echo "topology-operator: Go is not installed, so nsb-apply cannot be built; its tests skip (fail under CI=true)" >&2
  exit 0
fi
mkdir -p "$OPERATOR/bin" "$OPERATOR/stamps"
stamp="$OPERATOR_VERSION $(sha256sum "$here/main.go" | cut -c1-16)"
if [ -x "$output" ] && [ "$(cat "$OPERATOR/stamps/nsb-apply" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
start=$(date +%s)
log="$OPERATOR/build-nsb-apply.log"
src="$OPERATOR/src-nsb-apply"
echo "topology-operator: building nsb-apply against $module $OPERATOR_VERSION (log $log)"
if dir=$(GOFLAGS=-mod=mod go mod download -json "$module@$OPERATOR_VERSION" 2>"$log" |
           python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])') &&
   rm -rf "$src" && cp -r "$dir" "$src" && chmod -R u+w "$src" &&
   mkdir -p "$src/cmd/nsb-apply" && cp "$here/main.go" "$src/cmd/nsb-apply/main.go" &&
   (cd "$src" && go mod edit -droprequire=github.com/rabbitmq/cluster-operator/v2 &&
      CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go build -trimpath -o "$output.partial" ./cmd/nsb-apply) \
     >>"$log" 2>&1; then
  mv "$output.partial" "$output"
  echo "$stamp" > "$OPERATOR/stamps/nsb-apply"
  rm -rf "$src"
  echo "topology-operator: built nsb-apply in $(( $(date +%s) - start )) s into $OPERATOR/bin"
else
  rm -f "$output.partial"
  echo "topology-operator: building nsb-apply failed after $(( $(date +%s) - start )) s; the go command said:" >&2
  grep -E "not available|Forbidden|not found|cannot find|error|go: |\.go:" "$log" | tail -5 | sed 's/^/  /' >&2
  echo "topology-operator: its tests skip (fail under CI=true)" >&2
fi
