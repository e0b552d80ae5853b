#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The Kubernetes manifests against the Kubernetes API schemas (kubernetes-models, from the npm
# registry; installed once into node_modules/ by `npm ci` from package-lock.json): deploy/k8s
# as written and, where kubectl is installed, every kustomization as `kubectl kustomize` renders it.
#   usage: deploy/tests/k8s/validate.sh      (exit 0, or 1 naming every problem)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s=$(cd "$here/../../k8s" && pwd)
command -v node >/dev/null && command -v npm >/dev/null \
  || { echo "validate.sh: node and npm are needed (scripts/setup installs them)" >&2; exit 1; }
cd "$here"
if ! cmp -s package-lock.json node_modules/.mqp-installed 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
  cp package-lock.json node_modules/.mqp-installed
fi
node validate.mjs "$k8s"
if command -v kubectl >/dev/null; then
  out=$(mktemp -d /tmp/k8s-rendered-XXXXXX)
  trap 'rm -rf "$out"' EXIT
  for k in $(cd "$k8s" && find . -name kustomization.yaml | sort); do
    dir=$(dirname "$k")
    grep -q '^kind: Kustomization' "$k8s/$k" || continue
    kubectl kustomize "$k8s/$dir" >"$out/$(echo "$dir" | tr ./ __).yaml"
  done
  node validate.mjs "$out" | sed 's/^validate.mjs:/validate.mjs (kubectl kustomize output):/'
else
  echo "validate.sh: kubectl is not installed: the kustomizations were checked, not rendered"
fi
