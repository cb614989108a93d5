"""Regenerate the Python stubs of deviceplugin.proto (committed; a test fails when stale).

Run `python -m gpugov.node.proto.generate` after editing the .proto. grpcio-tools is a test
dependency only: the generated files are committed so the runtime needs just grpcio + protobuf.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO = "gpugov/node/proto/deviceplugin.proto"
SRC = Path(__file__).resolve().parents[3]  # the folder that holds the gpugov package


def generate(out: Path = SRC) -> None:
    """Write deviceplugin_pb2.py, _pb2.pyi and _pb2_grpc.py under `out`/gpugov/node/proto/."""
    from grpc_tools import protoc  # test/dev dependency

    (out / Path(PROTO).parent).mkdir(parents=True, exist_ok=True)
    code = protoc.main(["protoc", f"-I{SRC}", f"--python_out={out}", f"--pyi_out={out}",
                        f"--grpc_python_out={out}", str(SRC / PROTO)])
    if code != 0:
        raise RuntimeError(f"protoc failed on {PROTO} (exit {code})")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)
