"""On-demand MIG on the node (fake NVML): the agent's creation of an instance the scheduler
asked for, in free slices only, beside a busy instance it never touches; and each refusal with
its reason (overlap, a profile the driver does not offer, a start it cannot take, a GPU not in
MIG mode, the driver's own refusal)."""

from __future__ import annotations

from nvml_fake import H100_80

from gpugov.node.mig_apply import busy_pids
from gpugov.node.mig_on_demand import CREATED, create_instance
from gpugov.node.nvml.discovery import discover

GiB = 1 << 30


def test_instances_are_created_in_free_slices_beside_a_busy_one(node, open_nvml, sleepers):
    busy = sleepers.start()
    node.gpu(H100_80, "cc 9 0", "mig-mode 1", "gi 9 0", f"proc {busy} {GiB} 1")  # 3g.40gb@0
    node.gpu(H100_80, "cc 9 0")  # MIG off
    nv = open_nvml(node)
    gpus = discover(nv).gpus
    assert [(m.profile, m.start) for m in gpus[0].mig] == [("3g.40gb", 0)]
    assert create_instance(nv, gpus[0], "1g.10gb", 6) == CREATED
    after = discover(nv).gpus[0]
    got = {(m.profile, m.start): m.uuid for m in after.mig}
    assert set(got) == {("3g.40gb", 0), ("1g.10gb", 6)} and got[("1g.10gb", 6)]
    assert busy_pids(nv, 0) == [busy]  # the running instance kept its process
    # asked again (the scheduler's request is answered once, but a repeat is harmless)
    assert create_instance(nv, after, "1g.10gb", 6) == CREATED
    refusals = {
        ("2g.20gb", 2): "taken by 3g.40gb@0",
        ("5g.50gb", 0): "not available on this driver",
        ("2g.20gb", 5): "cannot start at 5",
    }
    for (profile, start), why in refusals.items():
        out = create_instance(nv, after, profile, start)
        assert out.startswith("refused: ") and why in out, out
    assert "not in MIG mode" in create_instance(nv, gpus[1], "1g.10gb", 0)
    # the driver's own refusal: a stale view that misses the new instance
    out = create_instance(nv, gpus[0], "1g.20gb", 6)
    assert out.startswith("refused: ") and "driver refused" in out, out
    assert {(m.profile, m.start) for m in discover(nv).gpus[0].mig} == set(got)
