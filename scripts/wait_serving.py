"""Wait until a server's health check says SERVING (exit 1 after --timeout seconds).

With --pid, the server must be that process: waiting stops as soon as it exits, and a
SERVING answer from another process on the port (a server left running, say) fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from run_checks import listener_is  # scripts/ is this script's directory

from cli import GRPC_ADDRESS


def alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped by its parent, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--address", default=GRPC_ADDRESS, help="HOST:PORT of the server (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait (default: %(default)s)")
    p.add_argument("--pid", type=int, help="the server's process id (default: any server on the port)")
    args = p.parse_args()
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(args.address))
    end = time.monotonic() + args.timeout
    while time.monotonic() < end:
        if args.pid and not alive(args.pid):
            print(f"the server (pid {args.pid}) exited before it was SERVING: see its message above",
                  file=sys.stderr)
            return 1
        try:
            if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == \
                    health_pb2.HealthCheckResponse.SERVING:
                if args.pid:
                    return listener_is(int(args.address.rsplit(":", 1)[1]), args.pid)
                return 0
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    print(f"{args.address} did not become SERVING within {args.timeout:.0f}s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
