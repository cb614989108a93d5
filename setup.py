"""Package build hook: compiles the enforcement library libgpugov.so with plain `cc`, and
FGD's per-node score (native/placement/, libgpugov_placement.so, loaded with ctypes by
gpugov.placement.native_fgd; the Python path answers without it).

No CUDA toolkit and no make are needed; the same command runs for `pip install .`
(the library lands in the wheel at gpugov/_native/) and `pip install -e .` (it is
built in place under src/gpugov/_native/). Set CC to use another compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
NATIVE = ROOT / "native"
LIB_NAME = "gpugov._native.libgpugov"
CFLAGS = ["-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared", "-fvisibility=hidden"]
LDLIBS = ["-ldl", "-lpthread"]


class NativeLibrary(Extension):
    """A plain shared library (not a Python extension module) built from native/."""

    def __init__(self, name: str = LIB_NAME, folder: Path = NATIVE,
                 libs: tuple[str, ...] = tuple(LDLIBS)) -> None:
        sources = sorted(str(p.relative_to(ROOT)) for p in folder.glob("*.c"))
        super().__init__(name, sources=sources)
        self.ldlibs = list(libs)


class BuildNative(build_ext):
    """Builds NativeLibrary with `cc` and the project's warning flags; others as usual."""

    def get_ext_filename(self, fullname: str) -> str:
        if fullname.split(".")[-1].startswith("libgpugov"):
            return os.path.join(*fullname.split(".")[:-1], fullname.split(".")[-1] + ".so")
        return super().get_ext_filename(fullname)

    def copy_extensions_to_source(self) -> None:
        # Editable installs copy the library into src/gpugov/_native/, created here.
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            package = ".".join(ext.name.split(".")[:-1])
            Path(build_py.get_package_dir(package)).mkdir(parents=True, exist_ok=True)
        super().copy_extensions_to_source()

    def build_extension(self, ext: Extension) -> None:
        if not isinstance(ext, NativeLibrary):
            super().build_extension(ext)
            return
        out = Path(self.get_ext_fullpath(ext.name))
        out.parent.mkdir(parents=True, exist_ok=True)
        cc = os.environ.get("CC", "cc")
        if shutil.which(cc) is None:
            raise SystemExit(f"gpugov: C compiler {cc!r} not found; install gcc or set CC")
        sources = [str(ROOT / s) for s in ext.sources]
        subprocess.run([cc, *CFLAGS, "-o", str(out), *sources, *ext.ldlibs], check=True)
        if ext.name != LIB_NAME:
            return
        # The layout header is the region's single source of truth; the Python reader
        # parses it. Editable installs read it from native/ directly.
        if not str(out.parent).startswith(str(ROOT / "src")):
            shutil.copy2(NATIVE / "region_layout.h", out.parent / "region_layout.h")


setup(ext_modules=[NativeLibrary(),
                   NativeLibrary("gpugov._native.libgpugov_placement", NATIVE / "placement", ())],
      cmdclass={"build_ext": BuildNative})
