"""Regenerate the Python stubs of dra_v1.proto and pluginregistration.proto (committed; a test
fails when stale). grpcio-tools is a test/dev dependency only, like generate.py's."""

from __future__ import annotations

import sys
from pathlib import Path

PROTOS = ("gpugov/node/proto/dra_v1.proto", "gpugov/node/proto/pluginregistration.proto")
SRC = Path(__file__).resolve().parents[3]


def generate(out: Path = SRC) -> None:
    """Write the *_pb2.py, _pb2.pyi and _pb2_grpc.py files under `out`/gpugov/node/proto/."""
    from grpc_tools import protoc  # test/dev dependency

    (out / Path(PROTOS[0]).parent).mkdir(parents=True, exist_ok=True)
    for proto in PROTOS:
        code = protoc.main(["protoc", f"-I{SRC}", f"--python_out={out}", f"--pyi_out={out}",
                            f"--grpc_python_out={out}", str(SRC / proto)])
        if code != 0:
            raise RuntimeError(f"protoc failed on {proto} (exit {code})")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)
