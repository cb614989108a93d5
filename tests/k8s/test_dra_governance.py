"""DRA pods and gpugov's scheduler: a pod that names ResourceClaims and asks gpugov's
scheduler to place it is held with a reason naming spec.resourceClaims and what to do
instead — never bound with its claims unallocated (its devices would escape the queues)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_scheduler_state import T0, make, pod  # noqa: E402

from gpugov.k8s.scheduler.state import INVALID  # noqa: E402


def _with_claims(p: dict, gpus: bool = False) -> dict:
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if not gpus:
        p["spec"]["containers"][0]["resources"]["limits"] = {}
    return p


def test_a_claim_pod_sent_to_gpugovs_scheduler_is_held_with_the_reason() -> None:
    st = make()
    st.set_pod(_with_claims(pod("dra", gpus=None)))
    st.set_pod(_with_claims(pod("both"), gpus=True))  # extended resources and a claim
    st.set_pod(pod("plain"))
    plan = st.cycle(T0)
    assert [b.name for b in plan.binds] == ["plain"]
    msgs = {c.name: (c.code, c.message) for c in plan.conditions}
    for name in ("dra", "both"):
        code, msg = msgs[name]
        assert code == INVALID
        assert "spec.resourceClaims ['gpu']" in msg
        assert "does not allocate DynamicResourceAllocation claims yet" in msg
        assert "kube-scheduler allocates claims from gpugov's ResourceSlices" in msg
