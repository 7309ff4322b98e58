"""Zero the GPU code a shared library carries for every GPU architecture but one, so it compresses small.

    python scripts/gpu_prune.py libonnxruntime_providers_cuda.so pruned.so --keep 90

A CUDA library holds fat binaries (magic 0xBA55ED50): per kernel module, one machine-code (cubin)
or PTX entry per architecture. The GPU driver loads the entry that matches the device and never
reads the others, so zeroing the others keeps the file's size and layout (nothing moves, no offset
changes) and leaves a library that runs on the kept architecture only. onnxruntime-gpu 1.31.1's
CUDA provider: 284 MB, of which sm_75/80/86/89/120 cubins 141.6 MB and sm_90 76.9 MB (no PTX);
zeroed to sm_90 it compresses (zstd -19 --long=27) to 52 MB instead of 186 MB, one carried chunk
instead of three. It ran on an H200 (sm_90). A PTX entry for an architecture at or below a kept one
is kept too, as the driver may compile it when no cubin matches.
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

MAGIC = struct.pack("<I", 0xBA55ED50)
HEADER = struct.Struct("<IHHQ")  # magic, version (1), header size (16), size of the entries
ENTRY = struct.Struct("<HHIQ")  # kind (1 PTX, 2 cubin), version, header size, payload size
ARCH_AT = 28  # the entry's architecture (e.g. 90 for sm_90), within its header
PTX = 1


def prune(data: bytearray, keep: set[int]) -> dict[str, int]:
    """Zero, in place, the payload of every entry for an architecture not in ``keep``; bytes zeroed and kept."""
    zeroed = kept = 0
    pos = 0
    while (i := data.find(MAGIC, pos)) >= 0:
        _, version, header, size = HEADER.unpack_from(data, i)
        if version != 1 or header != HEADER.size or i + header + size > len(data):
            pos = i + 4  # the magic's bytes inside something else
            continue
        entry, end = i + header, i + header + size
        while entry < end:
            kind, _, entry_header, payload = ENTRY.unpack_from(data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + ARCH_AT)
            start = entry + entry_header
            if arch in keep or (kind == PTX and arch <= max(keep)):
                kept += payload
            else:
                data[start:start + payload] = bytes(payload)
                zeroed += payload
            entry = start + payload
        pos = end
    return {"zeroed": zeroed, "kept": kept}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/gpu_prune.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--keep", default="90", help="architectures kept, comma-separated (90: H100, H200)")
    args = p.parse_args(argv)
    keep = {int(a) for a in args.keep.split(",")}
    data = bytearray(args.src.read_bytes())
    counts = prune(data, keep)
    if not counts["kept"]:
        print(f"{args.src}: no GPU code for {sorted(keep)}; nothing written", file=sys.stderr)
        return 1
    args.dst.write_bytes(data)
    print(f"{args.dst}: zeroed {counts['zeroed'] / 1e6:.1f} MB, kept {counts['kept'] / 1e6:.1f} MB for {sorted(keep)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
