"""What decoding one hostile stored value costs a reader, in a fresh process each time:
a 16 MiB envelope of empty maps (stopped by the container bound) and one of two-character
strings (bounded by ``max_bytes`` alone).

    python -m bench.exact.decode_bounds [--rounds 3] [--mib 16]

Reported per round: seconds to decode (or refuse) and the growth of the process's peak RSS.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = """
import resource, sys, time
import msgpack
from cachekit._core.serialization import MsgpackSerializer, SerializationError, decode_envelope
kind, size = sys.argv[1], int(sys.argv[2])
head = msgpack.packb([1, 1e12, 60.0, 0.0, None])
n, item = (size, b"\\x80") if kind == "maps" else (size // 3, b"\\xa2ab")
data = b"m\\x96" + head[1:] + b"\\xdd" + n.to_bytes(4, "big") + item * n
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
try:
    decode_envelope(MsgpackSerializer(), data)
    outcome = "decoded"
except SerializationError:
    outcome = "refused"
took = time.perf_counter() - t0
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(f"{took:.2f} s, peak RSS +{grew:.0f} MiB, {outcome}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=16)
    args = ap.parse_args()
    for r in range(args.rounds):
        for kind in ("maps", "strings"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, kind, str(args.mib * 2**20)],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            print(f"round {r + 1}: {args.mib} MiB of {kind}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
