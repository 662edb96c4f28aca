#!/usr/bin/env bash
# actionlint, the linter tests/packaging/test_ci_templates.py runs over the GitHub Actions workflow init writes (docs/how-to/ci-pipelines/),
# built from the Go module pinned here (go.mod's `tool github.com/rhysd/actionlint/cmd/actionlint`; go.sum) into
# $NSB_ACTIONLINT_DIR (default .cache/actionlint, git-ignored), rebuilt only when the pin changes.
#
# Usage: tools/actionlint/build.sh   (`make actionlint`, part of `make setup`)
# Never fails setup: a machine without Go, or a module the proxy does not serve, gets a message; the test then
# skips (and fails under CI=true).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${NSB_ACTIONLINT_DIR:-$(cd "$here/../.." && pwd)/.cache/actionlint}
bin="$dir/bin/actionlint"

if ! command -v go >/dev/null 2>&1; then
  echo "actionlint: Go is not installed, so actionlint cannot be built (install Go >= 1.26);" \
       "the CI template test skips (fails under CI=true)" >&2
  exit 0
fi

key=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
if [ -x "$bin" ] && [ "$(cat "$dir/stamp" 2>/dev/null)" = "$key" ]; then
  exit 0
fi
mkdir -p "$dir/bin"
version=$(cd "$here" && go list -m -f '{{.Version}}' github.com/rhysd/actionlint) || version=unknown
log="$dir/build.log"
start=$(date +%s)
echo "actionlint: building actionlint $version from $here (pin in its go.mod; log $log)"
if (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-X github.com/rhysd/actionlint.version=$version" \
      -o "$bin.partial" github.com/rhysd/actionlint/cmd/actionlint) >"$log" 2>&1; then
  mv "$bin.partial" "$bin"
  echo "$key" > "$dir/stamp"
  echo "actionlint: built actionlint $version in $(( $(date +%s) - start )) s: $bin"
else
  rm -f "$bin.partial"
  echo "actionlint: building actionlint failed after $(( $(date +%s) - start )) s; the go command said:" >&2
  grep -E "not available|Forbidden|not found|cannot find|error|go: " "$log" | tail -5 | sed 's/^/  /' >&2
  echo "actionlint: the CI template test skips (fails under CI=true)" >&2
fi
exit 0
