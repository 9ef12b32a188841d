#!/usr/bin/env python3
"""Benchmark body, run inside the test VM by bench/run.sh (tests/vm/run.sh bench/guest.py).

Measures roce-ipvlan against Debian's reference chain (ipvlan + tuning + sbr, host-local IPAM)
on the same kernel, rails and libcni driver (tests/cnidriver), A/B interleaved, and prints one
JSON document on a line starting with "@@BENCH-JSON " for the host side (bench/report.py).

Sizes come from the environment (BENCH_PODS, BENCH_CONC, BENCH_V6_TRIALS, ...) so the bench
can be developed with small ones; bench/run.sh sets the published sizes.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

RAILS = os.environ["VM_RAILS"].split()
PEERS = int(os.environ.get("VM_PEERS", "0"))
CNI_BIN = os.environ.get("CNI_BIN_DIR", "/run/cni/bin")
PODS = int(os.environ.get("BENCH_PODS", "6"))
SCALE_RAILS = [int(x) for x in os.environ.get("BENCH_SCALE_RAILS", "1 4 16").split()]
SCALE_PODS = int(os.environ.get("BENCH_SCALE_PODS", "5"))
CONC = [int(x) for x in os.environ.get("BENCH_CONC", "1 8 32").split()]
CONC_ROUNDS = int(os.environ.get("BENCH_CONC_ROUNDS", "2"))
V6_TRIALS = int(os.environ.get("BENCH_V6_TRIALS", "5"))
RSS_RUNS = int(os.environ.get("BENCH_RSS_RUNS", "9"))
# The binary of an earlier commit (bench/run.sh, BENCH_BEFORE_REV) for the IPv6 "before" row.
BEFORE_BIN = os.environ.get("BENCH_BEFORE_BIN", "")
BEFORE_REV = os.environ.get("BENCH_BEFORE_REV", "")
BEFORE_CNI_BIN = "/run/cni-before/bin"
WORK = "/run/bench"
TIMING = f"{WORK}/libcni-timing"
IMPLS = ("roce", "chain")
SYSCTLS = {  # the plugin's defaults (docs/configuration.md), given to tuning for the chain
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.IFNAME.arp_announce": "2",
    "net.ipv4.conf.IFNAME.arp_filter": "1",
    "net.ipv4.conf.IFNAME.arp_ignore": "1",
    "net.ipv4.conf.IFNAME.rp_filter": "0",
    "net.ipv4.conf.IFNAME.accept_local": "1",
}


def log(msg):
    print(f"bench: {msg}", flush=True)


def sh(*args, check=True, env=None, **kw):
    return subprocess.run(args, check=check, env=env, capture_output=True, text=True, **kw)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


# --- configurations ---
def conflist(impl, rail_idx, ipam_type="host-local", tag="v4"):
    rail = RAILS[rail_idx]
    if impl == "roce":
        subnet = f"10.20.{rail_idx}.0/24"
        plugins = [{"type": "roce-ipvlan", "master": rail, "mode": "l2",
                    "ipam": {"type": ipam_type, "subnet": subnet}}]
    else:
        subnet = f"10.21.{rail_idx}.0/24"
        plugins = [{"type": "ipvlan", "master": rail, "mode": "l2",
                    "ipam": {"type": ipam_type, "subnet": subnet}},
                   {"type": "tuning", "sysctl": SYSCTLS},
                   {"type": "sbr"}]
    return write_json(f"{WORK}/{impl}-{tag}-{rail_idx}.conflist",
                      {"cniVersion": "1.0.0", "name": f"bench-{impl}-{tag}-{rail_idx}",
                       "plugins": plugins})


def new_pod(name, v6=True):
    sh("ip", "netns", "del", name, check=False)
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")
    if not v6:
        sh("ip", "netns", "exec", name, "sysctl", "-qw",
           "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")


def del_pod(name):
    sh("ip", "netns", "del", name, check=False)


def driver_env(cni_path=CNI_BIN):
    env = dict(os.environ, CNI_PATH=cni_path, CNIDRIVER_TIMING=TIMING)
    return env


def read_timing():
    """The libcni call's own duration (ns) from the driver's last line."""
    with open(TIMING) as f:
        return int(f.read().split()[-1]) / 1e6


def driver(verb, conf, pod, ifname, cid, env):
    """One cnidriver call; returns (wall ms, libcni ms)."""
    t0 = time.perf_counter()
    r = subprocess.run(["cnidriver", verb, conf, f"/run/netns/{pod}", "--ifname", ifname,
                        "--container-id", cid], env=env, capture_output=True, text=True)
    wall = (time.perf_counter() - t0) * 1e3
    if r.returncode != 0:
        raise RuntimeError(f"cnidriver {verb} {conf} {pod} {ifname}: {r.stdout} {r.stderr}")
    return wall, read_timing()


# --- IPv4: sequential pods (Multus order: ADD rail by rail, DEL in reverse) ---
def pod_cycle(impl, pod, nrails, env):
    new_pod(pod)
    rows = []
    confs = [conflist(impl, i) for i in range(nrails)]
    t0 = time.perf_counter()
    for i in range(nrails):
        w, l = driver("add", confs[i], pod, f"net{i + 1}", pod, env)
        rows.append({"impl": impl, "op": "add", "rail": i, "wall_ms": w, "libcni_ms": l})
    add_total = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    for i in reversed(range(nrails)):
        w, l = driver("del", confs[i], pod, f"net{i + 1}", pod, env)
        rows.append({"impl": impl, "op": "del", "rail": i, "wall_ms": w, "libcni_ms": l})
    del_total = (time.perf_counter() - t0) * 1e3
    del_pod(pod)
    return rows, add_total, del_total


def bench_rails(nrails, npods):
    """npods pods per implementation, A/B interleaved (ABBA order so drift cancels)."""
    per_op, totals = [], []
    env = driver_env()
    for k in range(npods):
        order = IMPLS if k % 2 == 0 else IMPLS[::-1]
        for impl in order:
            rows, a, d = pod_cycle(impl, f"b{impl}{k}", nrails, env)
            for r in rows:
                r.update(pod=k, rails=nrails)
            per_op += rows
            totals.append({"impl": impl, "pod": k, "rails": nrails, "add_ms": a, "del_ms": d})
        log(f"{nrails} rails, pod {k + 1}/{npods} done")
    return per_op, totals


# --- concurrency: N pods at once, one attachment each, rails round-robin ---
def bench_concurrency():
    out = []
    env = driver_env()
    for n in CONC:
        for rnd in range(CONC_ROUNDS):
            order = IMPLS if rnd % 2 == 0 else IMPLS[::-1]
            for impl in order:
                pods = [f"c{impl}{j}" for j in range(n)]
                for p in pods:
                    new_pod(p)
                confs = [conflist(impl, j % len(RAILS)) for j in range(n)]
                for verb in ("add", "del"):
                    procs = []
                    t0 = time.perf_counter()
                    for j, p in enumerate(pods):
                        e = dict(env, CNIDRIVER_TIMING=f"{TIMING}-{j}")
                        procs.append((time.perf_counter(), subprocess.Popen(
                            ["cnidriver", verb, confs[j], f"/run/netns/{p}", "--ifname", "net1",
                             "--container-id", p], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)))
                    lat = []
                    for j, (ts, pr) in enumerate(procs):
                        so, se = pr.communicate()
                        if pr.returncode != 0:
                            raise RuntimeError(f"concurrent {verb} {impl} {j}: {so} {se}")
                        with open(f"{TIMING}-{j}") as f:
                            lat.append(int(f.read().split()[-1]) / 1e6)
                        os.unlink(f"{TIMING}-{j}")
                    batch = (time.perf_counter() - t0) * 1e3
                    out.append({"impl": impl, "op": verb, "pods": n, "round": rnd,
                                "batch_ms": batch, "per_attachment_ms": batch / n,
                                "libcni_median_ms": statistics.median(lat),
                                "libcni_max_ms": max(lat)})
                for p in pods:
                    del_pod(p)
            log(f"concurrency {n}, round {rnd + 1}/{CONC_ROUNDS} done")
    return out


# --- peak RSS and CPU time per process, through /usr/bin/time wrappers ---
STUB_IPAM = """#!/bin/busybox sh
# IPAM stub for the RSS pass: a static busybox shell (about 1 MiB), so the parent's
# ru_maxrss (which includes its children's) is the plugin's own.
while read -r _; do :; done
n=${CNI_IFNAME#net}
case $CNI_COMMAND in
ADD) cat /proc/$PPID/smaps_rollup >"/run/bench/smaps-$(cat /proc/$PPID/comm)"
     printf '{"cniVersion":"1.0.0","ips":[{"address":"10.30.%s.%s/24"}]}' "$n" "${CNI_CONTAINERID#rss}" ;;
VERSION) printf '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
esac
"""


def read_smaps(impl):
    """The memory of the plugin that called the stub IPAM, as the stub saw it mid-ADD."""
    proc = "roce-ipvlan" if impl == "roce" else "ipvlan"
    path = f"{WORK}/smaps-{proc}"
    kib = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 3 and p[2] == "kB":
                kib[p[0].rstrip(":")] = int(p[1])
    os.unlink(path)
    return {"proc": proc, "rss_kib": kib["Rss"], "anon_kib": kib["Anonymous"],
            "file_kib": kib["Rss"] - kib["Anonymous"] - kib.get("Shmem", 0)}


def bench_rusage():
    wrap = f"{WORK}/wrap"
    os.makedirs(wrap, exist_ok=True)
    usage = f"{WORK}/rusage"
    for name in ("roce-ipvlan", "ipvlan", "tuning", "sbr", "host-local"):
        with open(f"{wrap}/{name}", "w") as f:
            f.write(f'#!/bin/sh\nexec /usr/bin/time -a -o {usage} -f "{name} $CNI_COMMAND %M %U %S %e" '
                    f'{CNI_BIN}/{name} "$@"\n')
        os.chmod(f"{wrap}/{name}", 0o755)
    with open(f"{wrap}/stub-ipam", "w") as f:
        f.write(STUB_IPAM)
    os.chmod(f"{wrap}/stub-ipam", 0o755)
    env = driver_env(wrap)
    rows, smaps = [], []

    def collect(kind, impl):
        if not os.path.exists(usage):
            return
        with open(usage) as f:
            for line in f:
                p = line.split()
                if len(p) == 6 and p[1] in ("ADD", "DEL"):
                    rows.append({"pass": kind, "impl": impl, "proc": p[0], "cmd": p[1],
                                 "maxrss_kib": int(p[2]), "user_s": float(p[3]),
                                 "sys_s": float(p[4]), "wall_s": float(p[5])})
        os.unlink(usage)

    for k in range(RSS_RUNS):
        for impl in (IMPLS if k % 2 == 0 else IMPLS[::-1]):
            for kind, ipam in (("host-local", "host-local"), ("stub", "stub-ipam")):
                pod = f"rss{k}"
                new_pod(pod)
                conf = conflist(impl, 0, ipam_type=ipam, tag=f"rss-{kind}")
                driver("add", conf, pod, "net1", pod, env)
                driver("del", conf, pod, "net1", pod, env)
                del_pod(pod)
                collect(kind, impl)
                if kind == "stub":
                    smaps.append(dict(impl=impl, **read_smaps(impl)))
    return {"rows": rows, "smaps": smaps}


# --- IPv6 SLAAC ---
def start_router(n):
    rtr = f"rtr{n}"
    sh("ip", "netns", "add", rtr)
    sh("ip", "netns", "exec", rtr, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0",
       "net.ipv6.conf.all.forwarding=1")
    sh("ip", "link", "set", f"peer{n}", "netns", rtr)
    sh("ip", "-n", rtr, "link", "set", "lo", "up")
    sh("ip", "-n", rtr, "link", "set", f"peer{n}", "up")
    conf = f"{WORK}/radvd-{n}.conf"
    with open(conf, "w") as f:  # as tests/vm/suite/15-ipv6.sh
        f.write(f"interface peer{n} {{\n  AdvSendAdvert on; MinRtrAdvInterval 3; MaxRtrAdvInterval 10;"
                f" AdvDefaultLifetime 1800;\n  prefix 2001:db8:{n + 1}::/64 {{ AdvOnLink on;"
                f" AdvAutonomous on; }};\n}};\n")
    subprocess.Popen(["ip", "netns", "exec", rtr, "radvd", "-C", conf, "-p", f"/run/radvd-{n}.pid",
                      "-m", "stderr", "-n"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if os.path.exists(f"/run/radvd-{n}.pid"):
            break
        time.sleep(0.1)


TS = re.compile(r"^\[(\S+)\]\s*(.*)$")


def monitor(pod):
    """ip monitor in the pod with timestamps; returns the process (started before the link)."""
    p = subprocess.Popen(["stdbuf", "-oL", "ip", "-n", pod, "-ts", "monitor", "link", "address"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(0.3)  # let it subscribe
    return p


def parse_monitor(text, ifname):
    """(link up, first global address, first global non-tentative address), epoch seconds."""
    up = glob = ready = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = TS.match(lines[i])
        i += 1
        if not m:
            continue
        ts = datetime.fromisoformat(m.group(1)).timestamp()
        body = m.group(2)
        # The pod holds only the child (lo is up before the monitor starts), so any link's
        # first UP is the child's. ip prints address events under the name it cached first,
        # which is a temporary one when roce-ipvlan had to rename the child.
        if up is None and re.search(r"^\d+: \S+: <[^>]*\bUP\b", body):
            up = ts
        am = re.search(r"^\d+: \S+\s+inet6 (\S+) scope global(.*)", body)
        if am and not body.startswith("Deleted"):
            if glob is None:
                glob = ts
            if ready is None and "tentative" not in am.group(2):
                ready = ts
    return up, glob, ready


def v6_trial(mode, rail_n, t):
    pod = f"v6{mode}{t}"
    ifname = "net1"
    if mode == "kernel":
        new_pod(pod)
        sh("ip", "link", "add", "link", RAILS[rail_n], "name", ifname, "netns", pod,
           "type", "ipvlan", "mode", "l2")
        mon = monitor(pod)
        t0 = time.time()
        sh("ip", "-n", pod, "link", "set", ifname, "up")
        deadline = time.time() + 15
        while time.time() < deadline:
            out = sh("ip", "-n", pod, "-6", "-o", "addr", "show", "dev", ifname, "scope", "global").stdout
            if out and "tentative" not in out:
                break
            time.sleep(0.05)
        time.sleep(0.2)
        mon.terminate()
        text = mon.communicate()[0]
        up, glob, ready = parse_monitor(text, ifname)
        end = ready
        res = {"mode": mode, "rail": rail_n, "trial": t, "add_ms": None,
               "after_up_ms": (end - up) * 1e3 if end and up else None,
               "global_after_up_ms": (glob - up) * 1e3 if glob and up else None,
               "monitor": text[-3000:]}
    else:
        new_pod(pod, v6=False)
        # "before": `dad: wait` of the earlier commit's binary (BENCH_BEFORE_BIN).
        dad, env = ("wait", driver_env(BEFORE_CNI_BIN)) if mode == "before" else (mode, driver_env())
        conf = write_json(f"{WORK}/v6-{mode}-{rail_n}.conflist", {
            "cniVersion": "1.0.0", "name": f"bench-v6-{mode}-{rail_n}",
            "plugins": [{"type": "roce-ipvlan", "master": RAILS[rail_n],
                         "ipv6": {"slaac": True, "dad": dad}}]})
        mon = monitor(pod)
        wall, _ = driver("add", conf, pod, ifname, pod, env)
        done = time.time()
        time.sleep(0.1)
        mon.terminate()
        text = mon.communicate()[0]
        up, glob, ready = parse_monitor(text, ifname)
        res = {"mode": mode, "rail": rail_n, "trial": t, "add_ms": wall,
               "after_up_ms": (done - up) * 1e3 if up else None,
               "global_after_up_ms": (glob - up) * 1e3 if glob and up else None,
               "monitor": text[-3000:]}
        driver("del", conf, pod, ifname, pod, env)
    del_pod(pod)
    return res


def before_cni_path():
    """The earlier binary as roce-ipvlan in a CNI_PATH of its own, next to the same reference
    plugins (BENCH_BEFORE_BIN); made once, used by the IPv6 and the profile sections."""
    os.makedirs(BEFORE_CNI_BIN, exist_ok=True)
    for name in os.listdir("/usr/lib/cni"):
        if not os.path.exists(f"{BEFORE_CNI_BIN}/{name}"):
            os.symlink(f"/usr/lib/cni/{name}", f"{BEFORE_CNI_BIN}/{name}")
    if not os.path.lexists(f"{BEFORE_CNI_BIN}/roce-ipvlan"):
        os.symlink(BEFORE_BIN, f"{BEFORE_CNI_BIN}/roce-ipvlan")
    return BEFORE_CNI_BIN


def bench_ipv6():
    nrtr = min(PEERS, 4)
    if nrtr == 0:
        log("no peer NICs: IPv6 skipped")
        return []
    for n in range(nrtr):
        start_router(n)
    time.sleep(1)
    rows = []
    last = {}
    modes = ["kernel", "wait", "optimistic", "off"]
    if BEFORE_BIN:
        # Its trials are interleaved with the others'.
        before_cni_path()
        modes.insert(2, "before")
    k = 0
    for t in range(V6_TRIALS):
        for mode in (modes if t % 2 == 0 else modes[::-1]):
            n = k % nrtr
            k += 1
            # radvd paces multicast RAs to one per 3 s per interface (RFC 4861): give each
            # router that long between trials so no trial inherits the previous one's pacing.
            wait = 3.2 - (time.time() - last.get(n, 0))
            if wait > 0:
                time.sleep(wait)
            rows.append(v6_trial(mode, n, t))
            last[n] = time.time()
            log(f"ipv6 {mode} trial {t}: {rows[-1]}")
    for n in range(nrtr):
        if os.path.exists(f"/run/radvd-{n}.pid"):
            sh("kill", open(f"/run/radvd-{n}.pid").read().strip(), check=False)
    return rows


# --- many rails in one ADD ("rails", docs/configuration.md) ---
MULTI_TRIALS = int(os.environ.get("BENCH_MULTI_TRIALS", "5"))
# A rail-N event of one multi-rail ADD (the debug log's rail span): "... rail{rail=rdma3 ...}: ..."
RAIL_EVENT = re.compile(r"^(\S+)Z\s+\w+\s.*?\brail\{rail=(\S+) child=\S+\}.*?: roce_ipvlan(?:::\w+)*: (.*)$")
RAIL_EVENTS = ["child created", "IPAM done", "sysctls set", "routes installed",
               "SLAAC address ready", "GID visible", "attachment ready"]


def rails_conf(tag, extra, rails=None):
    """A `rails` NAD over `rails` (all of them by default). Timed trials run at the plugin's
    default log level, as the one-rail and chain runs they are compared with; the timelines come
    from one more ADD with logLevel debug (timeline_add)."""
    return {"cniVersion": "1.0.0", "name": f"bench-multi-{tag}", "type": "roce-ipvlan",
            "rails": rails or RAILS, **extra}


def timeline_add(pod, conf, env, v6):
    """One ADD (and DEL) of `conf` with logLevel debug, untimed: its rails' timeline."""
    new_pod(pod, v6=v6)
    _, _, tl = multi_add(pod, json.dumps(dict(conf, logLevel="debug")), env)
    del_pod(pod)
    return tl


def start_ipvlan_router(n):
    """A router on rail n without a peer NIC: radvd on an IPvlan child of the rail in a
    namespace of its own (IPvlan L2 delivers its advertisements to the other children of the
    rail, the pods' among them)."""
    rtr = f"mrtr{n}"
    sh("ip", "netns", "del", rtr, check=False)
    sh("ip", "netns", "add", rtr)
    sh("ip", "netns", "exec", rtr, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0",
       "net.ipv6.conf.all.forwarding=1")
    sh("ip", "link", "add", "link", RAILS[n], "name", "rtr", "netns", rtr, "type", "ipvlan",
       "mode", "l2")
    sh("ip", "-n", rtr, "link", "set", "lo", "up")
    sh("ip", "-n", rtr, "link", "set", "rtr", "up")
    conf = f"{WORK}/mradvd-{n}.conf"
    with open(conf, "w") as f:
        f.write(f"interface rtr {{\n  AdvSendAdvert on; MinRtrAdvInterval 3; MaxRtrAdvInterval 10;"
                f" AdvDefaultLifetime 1800;\n  prefix 2001:db8:{0x100 + n:x}::/64 {{ AdvOnLink on;"
                f" AdvAutonomous on; }};\n}};\n")
    subprocess.Popen(["ip", "netns", "exec", rtr, "radvd", "-C", conf, "-p", f"/run/mradvd-{n}.pid",
                      "-m", "stderr", "-n"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if os.path.exists(f"/run/mradvd-{n}.pid"):
            break
        time.sleep(0.1)


def rail_timeline(stderr, spawned):
    """Per rail, the ms from exec to each of its events (the debug log of one ADD)."""
    out = {}
    for line in stderr.splitlines():
        m = RAIL_EVENT.match(line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
        for key in RAIL_EVENTS:
            if m.group(3).startswith(key):
                out.setdefault(m.group(2), {}).setdefault(key, (t - spawned) * 1e3)
    return out


def multi_add(pod, conf, env):
    """One ADD (and its DEL) by direct exec; (ADD ms, DEL ms, stderr of the ADD)."""
    cni = dict(env, CNI_CONTAINERID=pod, CNI_NETNS=f"/run/netns/{pod}", CNI_IFNAME="net1")
    spawned = time.time()
    ms, r = run_ms([f"{CNI_BIN}/roce-ipvlan"], dict(cni, CNI_COMMAND="ADD"), conf)
    if r.returncode != 0:
        raise RuntimeError(f"multi-rail ADD: {r.stdout} {r.stderr}")
    del_ms, d = run_ms([f"{CNI_BIN}/roce-ipvlan"], dict(cni, CNI_COMMAND="DEL"), conf)
    if d.returncode != 0:
        raise RuntimeError(f"multi-rail DEL: {d.stdout} {d.stderr}")
    return ms, del_ms, rail_timeline(r.stderr, spawned)


def bench_multi():
    """16 IPv4 rails in one ADD against the chain's 16 sequential attachments; 16 (and 8)
    routed IPv6 rails with `dad: wait` in one ADD against one such rail's ADD. Interleaved
    trials."""
    env = dict(os.environ, CNI_PATH=CNI_BIN)
    v4 = rails_conf("v4", {"ipam": {"type": "host-local", "subnet": "10.24.0.0/16"}})
    rows = []
    for t in range(MULTI_TRIALS):
        for what in (("one", "chain") if t % 2 == 0 else ("chain", "one")):
            pod = f"m{what}{t}"
            if what == "one":
                new_pod(pod)
                add, dl, _ = multi_add(pod, json.dumps(v4), env)
                del_pod(pod)
            else:
                _, add, dl = pod_cycle("chain", pod, len(RAILS), driver_env())
            rows.append({"case": f"v4-{what}", "trial": t, "add_ms": add, "del_ms": dl})
            log(f"multi v4 {what} trial {t}: ADD {add:.0f} ms")
    timeline = timeline_add("mtl4", v4, env, v6=True)
    for n in range(len(RAILS)):
        start_ipvlan_router(n)
    time.sleep(1)
    slaac = {"ipv6": {"slaac": True, "dad": "wait"}}
    cases = [("one-rail", {"cniVersion": "1.0.0", "name": "bench-multi-v6one",
                           "type": "roce-ipvlan", "master": RAILS[0], **slaac}),
             ("all", rails_conf("v6", slaac))]
    if len(RAILS) > 8:
        # Eight rails: the size of issue #28's acceptance.
        cases.append(("eight", rails_conf("v6eight", slaac, RAILS[:8])))
    for t in range(MULTI_TRIALS):
        for what, conf in (cases if t % 2 == 0 else cases[::-1]):
            # radvd paces multicast RAs to one per 3 s per interface (RFC 4861).
            time.sleep(3.2)
            pod = f"m6{what}{t}"
            new_pod(pod, v6=False)
            add, dl, _ = multi_add(pod, json.dumps(conf), env)
            del_pod(pod)
            rows.append({"case": f"v6-{what}", "trial": t, "add_ms": add, "del_ms": dl})
            log(f"multi v6 {what} trial {t}: ADD {add:.0f} ms")
    time.sleep(3.2)
    v6_timeline = timeline_add("mtl6", cases[1][1], env, v6=False)
    for n in range(len(RAILS)):
        if os.path.exists(f"/run/mradvd-{n}.pid"):
            sh("kill", open(f"/run/mradvd-{n}.pid").read().strip(), check=False)
        sh("ip", "netns", "del", f"mrtr{n}", check=False)
    return {"rows": rows, "timeline_v4": timeline, "timeline_v6": v6_timeline, "rails": RAILS}


# --- profile: where the time goes ---
PROFILE_RUNS = int(os.environ.get("BENCH_PROFILE_RUNS", "20"))
START_RUNS = int(os.environ.get("BENCH_START_RUNS", "20"))
# The debug events of one roce-ipvlan ADD/DEL, in order (plugin/src/lib.rs, add.rs, del.rs); each
# phase ends at its event.
ADD_PHASES = [("configuration read", "exec, start-up, configuration"),
              ("validated", "checks: rail, RDMA port, pod"),
              ("child created", "create the IPvlan child"),
              ("IPAM done", "IPAM (exec host-local)"),
              ("sysctls set", "sysctls, addresses, link up"),
              ("routes installed", "routes and source rule"),
              ("GID visible", "wait for the RoCE v2 GID"),
              ("attachment ready", "ifalias, result")]
DEL_PHASES = [("configuration read", "exec, start-up, configuration"),
              ("pod side removed", "rules and child")]
LOG_LINE = re.compile(r"^(\S+)Z\s+\w+\s.*?: roce_ipvlan(?:::\w+)*: (.*)$")


def run_ms(argv, env, stdin=""):
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True)
    return (time.perf_counter() - t0) * 1e3, r


def phases_of(stderr, spawned, ended, names, last):
    """Milliseconds per phase from the plugin's debug events (UTC stamps, compared with time.time())."""
    stamps = {}
    for line in stderr.splitlines():
        m = LOG_LINE.match(line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
        for key, _ in names:
            if m.group(2).startswith(key) and key not in stamps:
                stamps[key] = t
    if len(stamps) != len(names):
        raise RuntimeError(f"profile: missing debug events {set(k for k, _ in names) - set(stamps)}:\n{stderr}")
    row, prev = {}, spawned
    for key, label in names:
        row[label] = (stamps[key] - prev) * 1e3
        prev = stamps[key]
    row[last] = (ended - prev) * 1e3
    return row


def bench_profile():
    base = dict(os.environ, CNI_PATH=CNI_BIN)
    version = dict(base, CNI_COMMAND="VERSION")
    # Process start-up alone: exec, runtime initialisation, a VERSION reply, exit. Interleaved.
    starters = {"/bin/true": ["/bin/true"]}
    for name in ("roce-ipvlan", "ipvlan", "tuning", "sbr", "host-local"):
        starters[name] = [f"{CNI_BIN}/{name}"]
    start = {name: [] for name in starters}
    for _ in range(START_RUNS):
        for name, argv in starters.items():
            ms, r = run_ms(argv, version, '{"cniVersion":"1.0.0"}')
            if r.returncode != 0:
                raise RuntimeError(f"{name} VERSION: {r.stdout} {r.stderr}")
            start[name].append(ms)
    # host-local on its own, as both sides execute it.
    hl = json.dumps({"cniVersion": "1.0.0", "name": "bench-hl",
                     "ipam": {"type": "host-local", "subnet": "10.22.0.0/24"}})
    rc = json.dumps({"cniVersion": "1.0.0", "name": "bench-debug", "type": "roce-ipvlan",
                     "master": RAILS[1], "logLevel": "debug",
                     "ipam": {"type": "host-local", "subnet": "10.23.0.0/24"}})
    hostlocal = {"add": [], "del": []}
    # This binary's phases, and (BENCH_BEFORE_BIN) the earlier commit's, the same events in both,
    # runs interleaved.
    binaries = {"": CNI_BIN}
    if BEFORE_BIN:
        binaries["before_"] = before_cni_path()
    phases = {f"{b}{op}_phases_ms": [] for b in binaries for op in ("add", "del")}
    for k in range(PROFILE_RUNS):
        pod = f"phase{k}"
        new_pod(pod)
        cni = dict(base, CNI_CONTAINERID=pod, CNI_NETNS=f"/run/netns/{pod}", CNI_IFNAME="net1")
        for verb in ("ADD", "DEL"):
            ms, r = run_ms([f"{CNI_BIN}/host-local"], dict(cni, CNI_COMMAND=verb), hl)
            if r.returncode != 0:
                raise RuntimeError(f"host-local {verb}: {r.stdout} {r.stderr}")
            hostlocal[verb.lower()].append(ms)
        order = list(binaries.items())
        for b, cni_path in (order if k % 2 == 0 else order[::-1]):
            env = dict(cni, CNI_PATH=cni_path)
            for verb, names, last in (("ADD", ADD_PHASES, "exit"),
                                      ("DEL", DEL_PHASES, "IPAM DEL, exit")):
                spawned = time.time()
                r = subprocess.run([f"{cni_path}/roce-ipvlan"], env=dict(env, CNI_COMMAND=verb),
                                   input=rc, capture_output=True, text=True)
                ended = time.time()
                if r.returncode != 0:
                    raise RuntimeError(f"roce-ipvlan {b}{verb}: {r.stdout} {r.stderr}")
                phases[f"{b}{verb.lower()}_phases_ms"].append(
                    phases_of(r.stderr, spawned, ended, names, last))
        del_pod(pod)
    return {"start_ms": start, "hostlocal_ms": hostlocal, **phases}


def setup():
    os.makedirs(WORK, exist_ok=True)
    info = {
        "kernel": os.uname().release,
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                     if l.startswith("model name")), "?"),
        "vcpus": os.cpu_count(),
        "mem_mib": int(next(l.split()[1] for l in open("/proc/meminfo")
                            if l.startswith("MemTotal"))) // 1024,
        "rails": len(RAILS),
        "pods": PODS,
    }
    return info


def main():
    sections = os.environ.get("BENCH_SECTIONS", "v4 scale conc rusage ipv6 multi profile").split()
    result = {"vm": setup(), "sizes": {"pods": PODS, "scale_rails": SCALE_RAILS,
                                       "scale_pods": SCALE_PODS, "conc": CONC,
                                       "conc_rounds": CONC_ROUNDS, "v6_trials": V6_TRIALS,
                                       "rss_runs": RSS_RUNS, "start_runs": START_RUNS,
                                       "profile_runs": PROFILE_RUNS,
                                       "multi_trials": MULTI_TRIALS,
                                       "before_rev": BEFORE_REV if BEFORE_BIN else None}}
    t0 = time.time()
    if "v4" in sections:
        log(f"IPv4: {PODS} pods x {len(RAILS)} rails per implementation")
        result["v4_ops"], result["v4_pods"] = bench_rails(len(RAILS), PODS)
    if "scale" in sections:
        result["scale_ops"] = []
        for r in SCALE_RAILS:
            if r == len(RAILS) and "v4" in sections:
                continue  # the 16-rail point is the main run's
            ops, _ = bench_rails(r, SCALE_PODS)
            result["scale_ops"] += ops
    if "conc" in sections:
        result["conc"] = bench_concurrency()
    if "rusage" in sections:
        result["rusage"] = bench_rusage()
    if "ipv6" in sections:
        result["ipv6"] = bench_ipv6()
    if "multi" in sections:
        result["multi"] = bench_multi()
    if "profile" in sections:
        result["profile"] = bench_profile()
    result["guest_seconds"] = time.time() - t0
    print("@@BENCH-JSON " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
