"""Offline: every pod of the kept upstream files (HAMi examples, KAI-Scheduler docs, NVIDIA
device plugin, Volcano vGPU guide, Kueue samples; tests/compat/upstream/SOURCES.md) is
translated to the GpuRequest its project's docs promise, or refused with what to write
instead; docs/migration.md carries the same table."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.compat.compat_table import A100_V100, EXPECTED, render
from tests.compat.upstream_pods import upstream_pods

from gpugov.k8s.resources import RequestError
from gpugov.k8s.webhook import admission
from gpugov.k8s.webhook.tenancy import Resolution
from gpugov.model.catalog import CATALOG
from gpugov.model.isolation import TrustTier

PODS = upstream_pods()
DOCS = Path(__file__).parents[2] / "docs" / "migration.md"


def test_every_kept_pod_has_an_expectation() -> None:
    assert sorted(p.key for p in PODS) == sorted(EXPECTED)
    assert len(PODS) >= 30


@pytest.mark.parametrize("p", PODS, ids=[p.key for p in PODS])
def test_upstream_pod_translates_as_its_docs_promise(p) -> None:
    _, expected = EXPECTED[p.key]
    if isinstance(expected, list):
        with pytest.raises(RequestError) as info:
            admission.pod_request(p.pod)
        for word in [*expected, "instead,"]:
            assert word in str(info.value)
        return
    req = admission.pod_request(p.pod)
    if expected is None:
        assert req is None
        return
    assert req is not None
    for field, value in expected.items():
        if value == A100_V100:
            assert req.models and all(
                any(t in f"{CATALOG[m].nvml_name} {m}".upper() for t in ("A100", "V100"))
                for m in req.models)
            continue
        assert getattr(req, field) == value, field


@pytest.mark.parametrize("p", PODS, ids=[p.key for p in PODS])
def test_upstream_pod_is_admitted_under_the_migration_options(p) -> None:
    """The webhook (with the migration values' adoption list) admits every pod gpugov
    translates: other schedulers' names are taken over and recorded, KAI's queue label
    names the Tenant's queue."""
    _, expected = EXPECTED[p.key]
    opts = admission.Options(adopt=("kai-scheduler", "volcano", "hami-scheduler"))
    res = Resolution("t", "default-queue", TrustTier.INTERNAL)
    review = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
              "namespace": "ns", "operation": "CREATE", "object": p.pod}
    out = admission.mutate(review, lambda ns: res, options=opts)
    assert out["response"]["allowed"] == (not isinstance(expected, list)), out


def test_docs_carry_the_table() -> None:
    assert render() in DOCS.read_text()
