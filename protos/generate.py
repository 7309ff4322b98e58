"""Regenerate the Python modules of the gRPC contract: ``python -m protos.generate``.

``--check`` exits non-zero when the files on disk differ from what would be generated.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PROTO = "nmt/v1/translator.proto"
OUTPUTS = ("translator_pb2.py", "translator_pb2.pyi", "translator_pb2_grpc.py")


def generate(out: Path) -> list[Path]:
    from grpc_tools import protoc

    args = ["protoc", f"-I{ROOT}", f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}",
            str(ROOT / PROTO)]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    return [out / "nmt" / "v1" / name for name in OUTPUTS]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        with tempfile.TemporaryDirectory() as tmp:
            stale = [p.name for p in generate(Path(tmp))
                     if p.read_text() != (ROOT / "nmt" / "v1" / p.name).read_text()]
        if stale:
            print(f"stale generated files: {', '.join(stale)}; run: python -m protos.generate", file=sys.stderr)
            return 1
        return 0
    for p in generate(ROOT):
        print(f"wrote {p.relative_to(ROOT.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
