#!/usr/bin/env bash
# helm, built from its Go module (helm.sh/helm/v3/cmd/helm) into the same binary cache, for the
# chart tests (`helm template` + server-side dry-run). Cached: a no-op when it is there.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
    echo "warning: Go is absent; chart tests will skip" >&2
    exit 0
fi
python3 -m pip install --quiet -e . >/dev/null
python3 -m gpugov.k8s.devcluster.build --helm-only
