"""Send one translation request to a running server and print the answer.

    python scripts/request.py --address 127.0.0.1:50051 --source en --target de "Jesus wept."
"""

from __future__ import annotations

import argparse
import sys

import grpc

from cli import GRPC_ADDRESS
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("texts", nargs="+")
    p.add_argument("--address", default=GRPC_ADDRESS)
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="de")
    p.add_argument("--beam", type=int, default=4)
    args = p.parse_args()
    stub = pb_grpc.TranslatorStub(grpc.insecure_channel(args.address))
    try:
        response = stub.Translate(pb.TranslateRequest(texts=args.texts, source_lang=args.source,
                                                      target_lang=args.target,
                                                      options=pb.DecodingOptions(beam_size=args.beam)), timeout=60)
    except grpc.RpcError as e:
        print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    for text, t in zip(args.texts, response.translations):
        print(f"{args.source}: {text}\n{args.target}: {t.hypotheses[0].text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
