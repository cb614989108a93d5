#!/usr/bin/env bash
# The kubelet DRA-manager test peer (tests/node/kubelet_dra_driver: a Go driver around
# k8s.io/kubernetes/pkg/kubelet/cm/dra and pkg/kubelet/pluginmanager) built into
# ${XDG_CACHE_HOME:-~/.cache}/gpugov/k8s-v<VERSION>/bin by the same helper the tests call.
# Cached: a no-op when it is current. Without Go the DRA kubelet tests skip: only a warning.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
    echo "warning: Go is absent; the DRA kubelet plugin's kubelet tests will skip" >&2
    exit 0
fi
python3 -c 'import sys; sys.path.insert(0, "tests/node"); sys.path.insert(0, "src")
from kubelet_dra_driver.driver import build
print(build())'
