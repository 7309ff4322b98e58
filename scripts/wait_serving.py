"""Wait until a server's health check says SERVING (exit 1 after --timeout seconds).

With --pid, the server must be that process: waiting stops as soon as it exits, and a
SERVING answer from another process on the port (a server left running, say) fails.
The waiting itself is server/child.py's ``wait_serving``, as tests and benchmarks wait.
"""

from __future__ import annotations

import argparse
import sys

from run_checks import listener_is  # scripts/ is this script's directory

from cli import GRPC_ADDRESS
from server.child import NotServing, exit_status, wait_serving


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--address", default=GRPC_ADDRESS, help="HOST:PORT of the server (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait (default: %(default)s)")
    p.add_argument("--pid", type=int, help="the server's process id (default: any server on the port)")
    args = p.parse_args()
    try:
        wait_serving(args.address, args.timeout, exit_status(args.pid) if args.pid else None)
    except NotServing as e:
        if args.pid and exit_status(args.pid)() is not None:
            print(f"the server (pid {args.pid}) exited before it was SERVING: see its message above", file=sys.stderr)
        else:
            print(e, file=sys.stderr)
        return 1
    return listener_is(int(args.address.rsplit(":", 1)[1]), args.pid) if args.pid else 0


if __name__ == "__main__":
    sys.exit(main())
