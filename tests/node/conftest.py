"""Fixtures of the node tests: the fake NVML build and an NVML session on a described node."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from nvml_fake import FakeLibs, FakeNode, build_fakes, compiler  # noqa: E402

from gpugov.node.nvml.library import Nvml  # noqa: E402

if compiler() is None:  # pragma: no cover - depends on the machine
    pytest.skip("no C compiler (cc) on PATH: the fake NVML is compiled", allow_module_level=True)


@pytest.fixture(scope="session")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> FakeLibs:
    return build_fakes(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    return FakeNode(tmp_path / "node")


@pytest.fixture
def open_nvml(fakes: FakeLibs, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[Callable[..., Nvml]]:
    """open_nvml(node, legacy=False): an NVML session on the fake, closed afterwards."""
    opened: list[Nvml] = []

    def open_(node: FakeNode, legacy: bool = False) -> Nvml:
        for k, v in node.write().items():
            monkeypatch.setenv(k, v)
        lib = (fakes.legacy if legacy else fakes.current) / "libnvidia-ml.so.1"
        nv = Nvml(str(lib))
        opened.append(nv)
        return nv

    yield open_
    for nv in opened:
        nv.close()
    os.environ.pop("FAKE_NVML_CONFIG", None)


@pytest.fixture
def sleepers() -> Iterator[object]:
    """Real processes standing in for container processes, stopped afterwards."""
    from region_files import Sleepers

    s = Sleepers()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def scrub_fake(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The fake CUDA driver (no test hooks) the node scrub's tests run processes on."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
    from native_build import build_all

    return build_all(tmp_path_factory.mktemp("scrub-native"), test_hooks=False)


@pytest.fixture
def device_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A 64 MiB fake device whose memory outlives its processes (as a GPU's may)."""
    env = {"FAKECUDA_DEVICE_FILE": str(tmp_path / "gpu0.mem"),
           "FAKECUDA_MEM_BYTES": str(64 * 2**20)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # for the scrub's child process
    return env


@pytest.fixture(scope="session")
def kubelet_driver_binary() -> Path:
    """The kubelet device-manager peer (kubelet_driver/), built once into the cache folder;
    the tests that need it skip, with the reason, only where Go is absent."""
    from kubelet_driver.driver import DriverUnavailable, build

    try:
        return build()
    except DriverUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def dra_plane(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A control plane with DRA (v1.34) for one module of kubelet-plugin tests."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "k8s"))
    from dra_support import plane_fixture

    yield from plane_fixture(tmp_path_factory)


@pytest.fixture(scope="module")
def peer_binary() -> Path:
    """The kubelet's DRA manager driver (built once, cached); skipped where Go is missing."""
    from kubelet_dra_driver.driver import DriverUnavailable, build

    try:
        return build()
    except DriverUnavailable as e:
        pytest.skip(str(e))
