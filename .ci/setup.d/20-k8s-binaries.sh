#!/usr/bin/env bash
# Upstream control-plane binaries (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, etcd, kwok) built from their Go modules into ${XDG_CACHE_HOME:-~/.cache}/gpugov/
# k8s-v<VERSION>/bin by the same code the tests use. Cached: a no-op when they are there.
# Without Go the k8s tests skip with the reason, so this script only warns.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
    echo "warning: Go is absent; Kubernetes tests will skip" >&2
    exit 0
fi
python3 -m pip install --quiet -e . >/dev/null
python3 -m gpugov.k8s.devcluster.build
