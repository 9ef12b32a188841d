#!/usr/bin/env python3
"""Start-up of a few builds against /bin/true, inside the test VM (docs/design.md#one-binary-or-two).

    tests/vm/run.sh python3 bench/startup.py true=/bin/true static=/abs/path/roce-ipvlan ...

Each NAME=PATH is copied to a tmpfs (so no run pays 9p reads), then all are run interleaved,
BENCH_START_RUNS (default 500) times each, with the VERSION round trip that bench/guest.py times
(CNI_COMMAND=VERSION, a one-line configuration on stdin, the reply read back). Prints the median,
the 10th and the 90th percentile in milliseconds per NAME, and the size of each file.
Paths must be absolute and outside /tmp, /run and /var/tmp (fresh tmpfs inside the VM).
"""

import os
import shutil
import statistics
import subprocess
import sys
import time

RUNS = int(os.environ.get("BENCH_START_RUNS", "500"))
WORK = "/run/startup"


def main(pairs):
    os.makedirs(WORK, exist_ok=True)
    progs = {}
    for pair in pairs:
        name, path = pair.split("=", 1)
        progs[name] = shutil.copy(path, f"{WORK}/{name}")
    env = dict(os.environ, CNI_COMMAND="VERSION")
    times = {name: [] for name in progs}
    for _ in range(RUNS):
        for name, prog in progs.items():
            t0 = time.perf_counter()
            r = subprocess.run([prog], env=env, input='{"cniVersion":"1.0.0"}', capture_output=True, text=True)
            times[name].append((time.perf_counter() - t0) * 1e3)
            if r.returncode != 0:
                sys.exit(f"startup: {name} exited {r.returncode}: {r.stdout} {r.stderr}")
    print(f"startup: {RUNS} runs each, interleaved, kernel {os.uname().release}")
    for name, ms in times.items():
        dec = statistics.quantiles(ms, n=10)
        print(f"startup: {name:10} median {statistics.median(ms):6.2f} ms  p10 {dec[0]:6.2f}  "
              f"p90 {dec[-1]:6.2f}  size {os.path.getsize(progs[name])} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
