"""Every layout of mig-parted's own config-default.yaml (unedited, tests/model/upstream) fits
gpugov's MIG geometry of the GPUs it is for, or is named here as unsupported with the reason:
an operator's mig-parted config means the same thing to gpugov's planner and node agent."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpugov.model.catalog import CATALOG
from gpugov.model.mig import MIG_GEOMETRIES, find_placement, get_geometry, layout_errors

CONFIG = Path(__file__).parent / "upstream" / "mig-parted" / "config-default.yaml"
# profiles config-default.yaml uses that no GPU it names offers: it gives no model for them
UNSUPPORTED = {
    "3g.95gb": "no GPU named in config-default.yaml has it (no model comment, no device filter)",
    "4g.95gb": "no GPU named in config-default.yaml has it (no model comment, no device filter)",
    "7g.189gb": "no GPU named in config-default.yaml has it (no model comment, no device filter)",
    "1g.24gb+me": "listed under \"H100 NVL, H800 NVL, GH200\", whose 1-slice profile with media "
                  "extensions is 1g.12gb+me (1g.24gb is their 2-slice 1g, which has no +me); "
                  "RTX PRO 6000's media flavours are +me.all and -me: no GPU known to offer it",
}
# device-filter ids of OEM/regional variants: the same silicon and MIG table as a catalog model
VARIANTS = {
    "0x20B110DE": "A100-SXM4-40GB", "0x20F110DE": "A100-SXM4-40GB",  # A100 40GB PCIe, A800
    "0x20F610DE": "A100-SXM4-40GB",
    "0x20B510DE": "A100-SXM4-80GB", "0x20F310DE": "A100-SXM4-80GB",  # A100 80GB PCIe, A800
    "0x20F510DE": "A100-SXM4-80GB",
    "0x232210DE": "H100-SXM5-80GB", "0x232410DE": "H100-SXM5-80GB",  # H800
    "0x233A10DE": "H100-NVL",  # H800 NVL
    "0x20B610DE": "H100-96GB",  # PG506-96GB: the 96 GB table
}


def _entries() -> list[tuple[str, int, dict]]:
    cfg = yaml.safe_load(CONFIG.read_text())
    assert cfg["version"] == "v1"
    return [(name, i, e) for name, entries in cfg["mig-configs"].items()
            for i, e in enumerate(entries)]


def _models(entry: dict, profiles: list[str]) -> list[str]:
    """The catalog models an entry is for: its device filter, else every model offering all
    of its profiles (mig-parted applies `devices: all` to whatever GPU the node has)."""
    filt = entry.get("device-filter")
    if filt is not None:
        by_pci = {m.pci_device_id: name for name, m in CATALOG.items() if m.pci_device_id}
        ids = [filt] if isinstance(filt, str) else filt
        missing = [i for i in ids if i not in by_pci and i not in VARIANTS]
        assert not missing, f"device ids gpugov does not know: {missing}"
        return sorted({by_pci.get(i) or VARIANTS[i] for i in ids})
    return [m for m, g in MIG_GEOMETRIES.items() if set(profiles) <= set(g.profile_names())]


ENTRIES = _entries()


@pytest.mark.parametrize(("name", "i", "entry"), ENTRIES,
                         ids=[f"{n}[{i}]" for n, i, _ in ENTRIES])
def test_layout_fits_the_geometry_of_its_gpus(name: str, i: int, entry: dict) -> None:
    devices = entry.get("mig-devices") or {}
    if not entry["mig-enabled"] or not devices:
        return  # all-disabled / all-enabled: no layout
    profiles = [p for p, n in devices.items() for _ in range(n)]
    models = _models(entry, profiles)
    if not models:
        assert set(devices) <= set(UNSUPPORTED), f"{name}: no gpugov geometry offers {devices}"
        return
    for model in models:
        g = get_geometry(model)
        placement = find_placement(g, profiles)
        assert placement is not None, f"{name}[{i}] does not fit a {model}"
        assert layout_errors(g, placement) == []


def test_every_gpu_the_config_names_has_a_geometry() -> None:
    ids = {i for _, _, e in ENTRIES for i in ([e["device-filter"]] if isinstance(
        e.get("device-filter"), str) else e.get("device-filter") or [])}
    by_pci = {m.pci_device_id: name for name, m in CATALOG.items() if m.pci_device_id}
    models = {by_pci.get(i) or VARIANTS[i] for i in ids}
    assert models <= set(MIG_GEOMETRIES)
    # the models the issue names, each with its own table
    assert {"B200", "B300", "GB200", "GB300", "GH200", "GH200-144GB", "H20", "H100-96GB",
            "H100-PCIE-80GB", "RTX-PRO-6000"} <= set(MIG_GEOMETRIES)


def test_each_profile_name_is_served_or_explained() -> None:
    names = {p for _, _, e in ENTRIES for p in (e.get("mig-devices") or {})}
    known = {p for g in MIG_GEOMETRIES.values() for p in g.profile_names()}
    assert names - known == set(UNSUPPORTED)


def test_two_slice_1g_depends_on_the_gpu() -> None:
    # 1g.35gb: the 2-memory-slice 1g on an H200 (4 fit), the 1-slice 1g on a GB300 (7 fit)
    assert find_placement(get_geometry("H200"), ["1g.35gb"] * 4) is not None
    assert find_placement(get_geometry("H200"), ["1g.35gb"] * 5) is None
    assert find_placement(get_geometry("GB300"), ["1g.35gb"] * 7) is not None
    # RTX PRO 6000: +gfx / -me flavours share the slices; +me.all is one per GPU
    rtx = get_geometry("RTX-PRO-6000")
    assert find_placement(rtx, ["2g.48gb+gfx", "1g.24gb-me", "1g.24gb"]) is not None
    assert find_placement(rtx, ["1g.24gb+me.all", "2g.48gb+me.all"]) is None


def test_the_node_agent_reads_the_file_unedited() -> None:
    # the loader `gpugov node` applies mig-parted configs with: every config, every entry
    from gpugov.node.mig_config import load

    configs = load(CONFIG)
    assert len(configs) == len({n for n, _, _ in ENTRIES}) == 81
    for name, i, entry in ENTRIES:
        got = configs[name][i]
        assert got.enabled == entry["mig-enabled"]
        assert got.mig_devices == (entry.get("mig-devices") or {})
