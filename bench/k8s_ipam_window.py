#!/usr/bin/env python3
"""nv-ipam's ADD calls for one sandbox, from its CNI shim's log (bench/k8s-start.sh).

    bench/k8s_ipam_window.py SANDBOX_ID < /var/log/nv-ipam-cni.log

Prints {"ipam_calls": N, "ipam_window_s": S}: how many ADD calls the sandbox made and the time
from the first call to the last "CmdAdd succeed", the window in which every rail's IPAM was
done (for the chain, each rail's ipvlan, tuning and sbr between one rail's call and the next; for
roce-ipvlan, the rails' calls at once). The shim logs the container ID with the call only, so a
success is the sandbox's when it comes after the sandbox's first call and before another
sandbox's call: the bench starts one pod at a time. Prints {} when the log has no call of the
sandbox. Standard library only.
"""

import datetime
import json
import re
import sys

CALL = re.compile(r"^(\S+) \[info\] CMD ADD Call: ContainerID: (\w+) ")
DONE = re.compile(r"^(\S+) \[info\] CmdAdd succeed")


def epoch(ts):
    """RFC 3339 with nanoseconds and Z, as the shim writes it, to seconds."""
    whole, _, frac = ts.rstrip("Z").partition(".")
    t = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + float("0." + (frac or "0"))


def window(lines, sid):
    first = last = None
    calls = 0
    for line in lines:
        m = CALL.match(line)
        if m:
            if m.group(2) == sid:
                first = first if first is not None else epoch(m.group(1))
                calls += 1
            elif first is not None:
                break
            continue
        m = DONE.match(line)
        if m and first is not None:
            last = epoch(m.group(1))
    if first is None or last is None:
        return {}
    return {"ipam_calls": calls, "ipam_window_s": round(last - first, 3)}


def main():
    if len(sys.argv) != 2 or not sys.argv[1]:
        sys.exit("usage: k8s_ipam_window.py SANDBOX_ID < nv-ipam-cni.log")
    print(json.dumps(window(sys.stdin, sys.argv[1])))


if __name__ == "__main__":
    main()
