"""`gpugov explain pod`'s answer from a state fed with API objects (the live path is in
test_scheduler_e2e.py): reason, position in the queue, bound pods, pods gpugov does not own."""

from __future__ import annotations

import pytest

from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.explain import ExplainError, explain_from_state
from gpugov.k8s.scheduler.harness import gpu_node, gpu_pod
from gpugov.k8s.scheduler.state import SchedulerState

NOW = 1_800_000_000.0


def _state(gpus: int = 2, limit: float | None = None) -> SchedulerState:
    st = SchedulerState()
    node = gpu_node("n0", gpus)
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    st.set_node(node)
    spec = {"limit": {"gpu": limit}} if limit is not None else {}
    st.set_object("queue", {"metadata": {"name": "q"}, "spec": spec})
    st.set_object("tenant", {"metadata": {"name": "t"},
                             "spec": {"queue": "q", "namespaces": ["ns"]}})
    return st


def _pod(name: str, minute: int, **kw) -> dict:
    p = gpu_pod(name, "ns", names.SCHEDULER_NAME, annotations={names.ANN_QUEUE: "q"}, **kw)
    p["metadata"]["uid"] = f"uid-{name}"
    p["metadata"]["creationTimestamp"] = f"2027-01-15T08:{minute:02d}:00Z"
    return p


def test_pending_pod_gets_reason_and_position() -> None:
    st = _state(gpus=4, limit=1)
    pods = [_pod(f"p{i}", i) for i in range(4)]
    for p in pods:
        st.set_pod(p)
    lines = explain_from_state(st, pods[2], NOW)
    text = "\n".join(lines)
    assert lines[0] == "pod ns/p2: pending"
    assert "reason: over-quota" in text and "cap 1" in text
    assert "position: 2 of 3 pending in its queue" in text  # p0 runs; p1 is ahead of p2
    assert "queue q: uses 1 GPU" in text


def test_a_pod_that_fits_now_says_so() -> None:
    st = _state()
    pod = _pod("lonely", 0)
    st.set_pod(pod)
    text = "\n".join(explain_from_state(st, pod, NOW))
    assert "it fits now" in text and names.SCHEDULER_NAME in text


def test_bound_pods_show_their_record_and_foreign_pods_are_refused() -> None:
    st = _state()
    pod = _pod("done", 0)
    pod["spec"]["nodeName"] = "n0"
    pod["metadata"]["annotations"][names.ANN_ALLOCATION] = '{"v":1}'
    assert explain_from_state(st, pod, NOW)[0] == "pod ns/done: bound to node n0"
    foreign = gpu_pod("other", "ns", "default-scheduler")
    with pytest.raises(ExplainError, match="gpugov does not schedule it"):
        explain_from_state(st, foreign, NOW)


def test_invalid_pod_explains_its_error() -> None:
    st = _state()
    pod = _pod("odd", 0, limits={"nvidia.com/gpucores": "250"})
    st.set_pod(pod)
    text = "\n".join(explain_from_state(st, pod, NOW))
    assert "invalid-request" in text and "250 % is more than one GPU" in text


def test_a_bound_pod_gpugov_cannot_account_for_says_what_is_held() -> None:
    st = _state(gpus=4)
    rec = ('{"v":1,"node":"n0","isolation":"hard","devices":[{"index":0,"mode":"exclusive",'
           '"milli":1000,"memoryMiB":81920}]}')
    first, second = _pod("first", 0), _pod("second", 1)
    for p in (first, second):  # both claim device 0: the earlier pod keeps it
        p["spec"]["nodeName"] = "n0"
        p["metadata"]["annotations"][names.ANN_ALLOCATION] = rec
        st.set_pod(p)
    text = "\n".join(explain_from_state(st, second, NOW))
    assert "does not trust its record" in text and "conflicts" in text
    assert "device(s) 0, 1 of node n0 held until it leaves" in text
    assert "held" not in "\n".join(explain_from_state(st, first, NOW))
    waiting = _pod("waiting", 2, limits={names.GPU_RESOURCE: "3"})
    st.set_pod(waiting)
    text = "\n".join(explain_from_state(st, waiting, NOW))
    assert "devices held for bound pods gpugov cannot account for: ns/second" in text
