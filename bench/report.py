#!/usr/bin/env python3
"""Turns the VM's raw bench numbers (bench/guest.py) into CSV/JSON under docs/bench/, an SVG
plot, and docs/benchmarks.md. Standard library only."""

import argparse
import hashlib
import csv
import json
import os
import re
import statistics
from datetime import datetime, timezone


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stats(xs):
    xs = [x for x in xs if x is not None]
    return {"n": len(xs), "median": pct(xs, 0.5), "p90": pct(xs, 0.9),
            "max": max(xs) if xs else float("nan")}


def write_csv(path, rows):
    if not rows:
        return
    keys = list(rows[0].keys())
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})


def f0(x):
    return "–" if x is None or x != x else f"{x:.0f}"


def f2(x):
    return "–" if x is None or x != x else f"{x:.2f}"


# --- strace timeline: one process per line, offsets from the driver's start ---
EXEC = re.compile(r'^(\d+)\s+([\d.]+)\s+execve\("([^"]+)"')
EXIT = re.compile(r'^(\d+)\s+([\d.]+)\s+(?:exit_group|\+\+\+ exited)')
SYSC = re.compile(r'^(\d+)\s+([\d.]+)\s+(\w+)\(')


def timeline(text):
    procs, t0 = {}, None
    counts = {}
    for line in text.splitlines():
        m = EXEC.match(line)
        if m:
            pid, ts, path = int(m.group(1)), float(m.group(2)), m.group(3)
            t0 = ts if t0 is None else t0
            procs[pid] = {"name": os.path.basename(path), "start": ts, "end": None}
            continue
        m = EXIT.match(line)
        if m and int(m.group(1)) in procs and procs[int(m.group(1))]["end"] is None:
            procs[int(m.group(1))]["end"] = float(m.group(2))
            continue
        m = SYSC.match(line)
        if m:
            counts.setdefault(int(m.group(1)), {}).setdefault(m.group(3), 0)
            counts[int(m.group(1))][m.group(3)] += 1
    rows = []
    for pid, p in sorted(procs.items(), key=lambda kv: kv[1]["start"]):
        # threads of a process (Go, tokio) carry their own pids; fold their syscalls in
        c = counts.get(pid, {})
        rows.append({"process": p["name"], "start_ms": (p["start"] - t0) * 1e3,
                     "duration_ms": ((p["end"] or p["start"]) - p["start"]) * 1e3,
                     "netlink_msgs": c.get("sendmsg", 0) + c.get("sendto", 0)})
    return rows


# --- SVG ---
COL = {"roce": "#1f77b4", "chain": "#d62728"}


def svg_bars(x0, y0, w, h, title, groups, unit="ms"):
    """groups: [(label, {"roce": v, "chain": v})]"""
    out = [f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-weight="bold">{title}</text>']
    vmax = max([v for _, g in groups for v in g.values() if v == v] + [1e-9]) * 1.15
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="#333"/>')
    gw = w / len(groups)
    for i, (label, g) in enumerate(groups):
        keys = list(g.keys())
        bw = gw * 0.7 / len(keys)
        for j, k in enumerate(keys):
            v = g[k]
            bh = 0 if v != v else h * v / vmax
            x = x0 + i * gw + gw * 0.15 + j * bw
            out.append(f'<rect x="{x:.1f}" y="{y0 + h - bh:.1f}" width="{bw:.1f}" height="{bh:.1f}" '
                       f'fill="{COL.get(k, "#2ca02c")}"><title>{k} {label}: {v:.0f} {unit}</title></rect>')
            out.append(f'<text x="{x + bw / 2:.1f}" y="{y0 + h - bh - 3:.1f}" font-size="10" '
                       f'text-anchor="middle">{f0(v)}</text>')
        out.append(f'<text x="{x0 + i * gw + gw / 2:.1f}" y="{y0 + h + 14}" font-size="11" '
                   f'text-anchor="middle">{label}</text>')
    return out


def svg_lines(x0, y0, w, h, title, xs, series, xlabel, unit="ms"):
    """series: {name: [y per x]}; x positions are evenly spaced (log-like for 1,4,16 / 1,8,32)."""
    out = [f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-weight="bold">{title}</text>']
    vals = [v for s in series.values() for v in s if v == v]
    vmax = max(vals + [1e-9]) * 1.15
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="#333"/>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + h}" stroke="#333"/>')
    step = w / max(len(xs) - 1, 1) * 0.9
    for i, x in enumerate(xs):
        out.append(f'<text x="{x0 + 10 + i * step:.1f}" y="{y0 + h + 14}" font-size="11" '
                   f'text-anchor="middle">{x}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 28}" font-size="11" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text x="{x0 - 4}" y="{y0 + 4}" font-size="10" text-anchor="end">{vmax:.0f}</text>')
    out.append(f'<text x="{x0 - 4}" y="{y0 + h}" font-size="10" text-anchor="end">0</text>')
    dashes = {"add": "", "del": ' stroke-dasharray="5,3"'}
    for name, ys in series.items():
        impl, op = name.split()
        pts = [(x0 + 10 + i * step, y0 + h - h * y / vmax) for i, y in enumerate(ys) if y == y]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{COL[impl]}" stroke-width="2"{dashes[op]}/>')
        for (x, y), v in zip(pts, [y for y in ys if y == y]):
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COL[impl]}"><title>{name}: {v:.0f} {unit}</title></circle>')
    return out


def legend(x, y):
    out = []
    items = [("roce-ipvlan", COL["roce"], ""), ("ipvlan+tuning+sbr", COL["chain"], ""),
             ("ADD solid, DEL dashed (curves)", "#555", "")]
    for i, (label, c, _) in enumerate(items):
        out.append(f'<rect x="{x}" y="{y + i * 16 - 9}" width="12" height="10" fill="{c}"/>')
        out.append(f'<text x="{x + 18}" y="{y + i * 16}" font-size="11">{label}</text>')
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--go-plugins", required=True)
    ap.add_argument("--qemu", default="?")
    ap.add_argument("--host-cpu", default="?")
    ap.add_argument("--host-cpus", default="?")
    ap.add_argument("--other-qemu", default="0")
    ap.add_argument("--other-qemu-end", default="0")
    ap.add_argument("--runtime", default="?")
    a = ap.parse_args()
    raw = json.load(open(a.raw))
    S = {"generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "vm": raw["vm"],
         "sizes": raw["sizes"], "qemu": a.qemu, "host_cpu": a.host_cpu, "host_cpus": a.host_cpus,
         "other_qemu_at_start": int(a.other_qemu), "other_qemu_at_end": int(a.other_qemu_end), "make_bench_seconds": a.runtime,
         "guest_seconds": raw.get("guest_seconds")}

    # IPv4, 16 rails
    ops = raw.get("v4_ops", [])
    write_csv(f"{a.out}/ipv4-per-rail.csv", ops)
    write_csv(f"{a.out}/ipv4-pods.csv", raw.get("v4_pods", []))
    v4 = {}
    for impl in ("roce", "chain"):
        for op in ("add", "del"):
            sel = [r for r in ops if r["impl"] == impl and r["op"] == op]
            v4[f"{impl}_{op}"] = {"wall": stats([r["wall_ms"] for r in sel]),
                                  "libcni": stats([r["libcni_ms"] for r in sel])}
    for op in ("add", "del"):
        for k in ("wall", "libcni"):
            v4[f"ratio_{op}_{k}"] = v4[f"roce_{op}"][k]["median"] / v4[f"chain_{op}"][k]["median"]
    pods = raw.get("v4_pods", [])
    for impl in ("roce", "chain"):
        v4[f"{impl}_pod"] = {op: stats([p[f"{op}_ms"] for p in pods if p["impl"] == impl])
                             for op in ("add", "del")}
    S["ipv4"] = v4

    # scaling by rails per pod
    sc_ops = raw.get("scale_ops", []) + [dict(r, rails=r.get("rails", raw["vm"]["rails"])) for r in ops]
    write_csv(f"{a.out}/scale-rails.csv", raw.get("scale_ops", []))
    rails_x = sorted({r["rails"] for r in sc_ops})
    scale = {f"{impl} {op}": [statistics.median([r["libcni_ms"] for r in sc_ops if r["impl"] == impl
                                                 and r["op"] == op and r["rails"] == n] or [float("nan")])
                               for n in rails_x] for impl in ("roce", "chain") for op in ("add", "del")}
    S["scale_rails"] = {"rails": rails_x, "per_rail_libcni_median_ms": scale}

    # concurrency
    conc = raw.get("conc", [])
    write_csv(f"{a.out}/concurrency.csv", conc)
    conc_x = sorted({c["pods"] for c in conc})
    conc_s = {f"{impl} {op}": [statistics.median([c["per_attachment_ms"] for c in conc if c["impl"] == impl
                                                   and c["op"] == op and c["pods"] == n] or [float("nan")])
                                for n in conc_x] for impl in ("roce", "chain") for op in ("add", "del")}
    conc_lat = {f"{impl} {op}": [statistics.median([c["libcni_median_ms"] for c in conc if c["impl"] == impl
                                                     and c["op"] == op and c["pods"] == n] or [float("nan")])
                                  for n in conc_x] for impl in ("roce", "chain") for op in ("add", "del")}
    S["concurrency"] = {"pods": conc_x, "per_attachment_ms": conc_s, "latency_median_ms": conc_lat}

    # rusage
    ru = raw.get("rusage", [])
    write_csv(f"{a.out}/rusage.csv", ru)
    rss = {}
    for proc in ("roce-ipvlan", "ipvlan", "tuning", "sbr", "host-local"):
        kind = "host-local" if proc == "host-local" else "stub"
        sel = [r["maxrss_kib"] for r in ru if r["proc"] == proc and r["pass"] == kind and r["cmd"] == "ADD"]
        rss[proc] = statistics.median(sel) if sel else float("nan")
    go_max = max(("ipvlan", "tuning", "sbr", "host-local"), key=lambda p: rss[p] if rss[p] == rss[p] else -1)
    cpu = {}
    for impl, top in (("roce", ("roce-ipvlan",)), ("chain", ("ipvlan", "tuning", "sbr"))):
        for cmd in ("ADD", "DEL"):
            sel = [r for r in ru if r["pass"] == "host-local" and r["impl"] == impl and r["cmd"] == cmd
                   and r["proc"] in top]
            runs = max(1, len(sel) // len(top))
            cpu[f"{impl}_{cmd}"] = sum(r["user_s"] + r["sys_s"] for r in sel) / runs * 1e3
    hl_cpu = [r["user_s"] + r["sys_s"] for r in ru if r["proc"] == "host-local" and r["cmd"] == "ADD"
              and r["pass"] == "host-local"]
    S["rusage"] = {"host_local_cpu_ms": statistics.median(hl_cpu) * 1e3 if hl_cpu else None,
                   "maxrss_kib": rss, "largest_go": go_max, "cpu_ms_per_op": cpu,
                   "rss_ratio": rss["roce-ipvlan"] / rss[go_max]}

    # sizes
    size = os.path.getsize(a.plugin)
    S["plugin_sha256"] = hashlib.sha256(open(a.plugin, "rb").read()).hexdigest()
    S["plugin_note"] = os.environ.get("BENCH_BIN_NOTE", "")
    go = {p: os.path.getsize(os.path.join(a.go_plugins, p)) for p in ("ipvlan", "tuning", "sbr", "host-local")}
    S["size"] = {"roce-ipvlan": size, "go": go, "go_chain_sum": go["ipvlan"] + go["tuning"] + go["sbr"]}

    # IPv6
    v6 = raw.get("ipv6", [])
    for r in v6:  # address events by any name (the plugin's child starts under a temporary one)
        if r.get("monitor") and r.get("after_up_ms") is not None:
            up = glob = None
            for line in r["monitor"].splitlines():
                m = re.match(r"^\[(\S+)\]\s*(\d+: \S+)(.*)$", line)
                if not m:
                    continue
                ts = datetime.fromisoformat(m.group(1)).timestamp()
                if up is None and re.match(r"^\d+: \S+: <[^>]*\bUP\b", m.group(2) + m.group(3)):
                    up = ts
                if glob is None and re.match(r"\s+inet6 \S+ scope global", m.group(3)):
                    glob = ts
            r["global_after_up_ms"] = (glob - up) * 1e3 if up and glob else None
    S["ipv6"] = {m: {"after_up": stats([r["after_up_ms"] for r in v6 if r["mode"] == m]),
                     "add": stats([r["add_ms"] for r in v6 if r["mode"] == m]),
                     "global_after_up": stats([r["global_after_up_ms"] for r in v6 if r["mode"] == m])}
                 for m in ("kernel", "kernel-optimistic", "wait", "optimistic", "off")}
    write_csv(f"{a.out}/ipv6.csv", [{k: v for k, v in r.items() if k != "monitor"} for r in v6])

    # profile
    prof = {impl: timeline(t) for impl, t in raw.get("strace", {}).items()}
    S["profile"] = prof
    for impl, t in raw.get("strace", {}).items():
        with open(f"{a.out}/strace-{impl}.txt", "w") as f:
            f.write(t)

    with open(f"{a.out}/summary.json", "w") as f:
        json.dump(S, f, indent=1)

    # --- plot ---
    W, H = 980, 620
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    svg += svg_bars(60, 40, 380, 200, "IPv4 per rail, 16-rail pods: median ms (libcni call)",
                    [(f"{op.upper()}", {"roce": v4[f"roce_{op}"]["libcni"]["median"],
                                        "chain": v4[f"chain_{op}"]["libcni"]["median"]}) for op in ("add", "del")])
    svg += svg_lines(560, 40, 380, 200, "per rail vs rails per pod: median ms", rails_x, scale, "rails per pod")
    svg += svg_lines(60, 350, 380, 200, "per attachment vs concurrent pods: batch ms / pods",
                     conc_x, conc_s, "concurrent pods")
    modes = ("kernel", "wait", "optimistic", "off", "kernel-optimistic")
    svg += svg_bars(560, 350, 380, 200, "IPv6 SLAAC: ms from link up to ready (median)",
                    [(m.replace("kernel-optimistic", "kernel-opt"), {"x": S["ipv6"][m]["after_up"]["median"]})
                     for m in modes])
    svg += legend(760, 600 - 40)
    svg.append("</svg>")
    with open(f"{a.out}/plot.svg", "w") as f:
        f.write("\n".join(svg) + "\n")

    with open(a.doc, "w") as f:
        f.write(render(S, os.path.relpath(a.out, os.path.dirname(a.doc))))


def target(ok):
    return "**met**" if ok else "**not met**"


def render(S, rel):
    v4, ru, sz, v6 = S["ipv4"], S["rusage"], S["size"], S["ipv6"]
    vm = S["vm"]
    L = []
    w = L.append
    w("# Benchmarks: roce-ipvlan against ipvlan + tuning + sbr\n")
    w(f"Generated by `make bench` ({S['generated']}; bench/run.sh, bench/guest.py, bench/report.py). "
      f"Raw numbers: [`{rel}/`]({rel}/) (`raw.json`, CSVs, `summary.json`, strace traces). "
      "Every number on this page comes from that one run.\n")
    w("## Setup\n")
    w(f"- Host: {S['host_cpu']}, {S['host_cpus']} CPUs. {S['qemu']}, **TCG** (no KVM): every figure is "
      "an emulation figure, several times slower than hardware. Compare the **ratios**, not the milliseconds.")
    w(f"- Guest: Debian kernel {vm['kernel']}, {vm['vcpus']} vCPUs, {vm['mem_mib']} MiB, {vm['rails']} "
      "Soft-RoCE rails (`virtio-net` + `rdma_rxe`, `rdma0`..`rdma15`), 4 peer NICs for the IPv6 routers "
      "(radvd). Same kernel, rails and driver for both sides.")
    w("- Client: `tests/cnidriver` (libcni 1.1.2), one call per rail and pod, as Multus does. "
      "*libcni* columns are the libcni call alone (`CNIDRIVER_TIMING`: plugin exec and work, "
      "without the driver's own start-up); *wall* is the whole `cnidriver` process.")
    w("- roce-ipvlan: release build (`cargo build --release --locked`: LTO, `opt-level = \"s\"`, stripped), "
      f"sha256 `{S['plugin_sha256'][:16]}…`{(' (' + S['plugin_note'] + ')') if S['plugin_note'] else ''}; "
      "cniVersion 1.0.0, host-local IPAM, default sysctls. Chain: Debian's containernetworking-plugins "
      "1.1.1 (`/usr/lib/cni`), one conflist ipvlan (L2, host-local) + tuning (the plugin's default "
      "sysctls) + sbr, cniVersion 1.0.0.")
    w("- A/B interleaved in ABBA order (pod k: roce first for even k, chain first for odd k).")
    oq = S["other_qemu_at_start"]
    oq = max(oq, S["other_qemu_at_end"])
    w(f"- Machine load: {S['other_qemu_at_start']} other QEMU process(es) were running when the bench started, "
      f"{S['other_qemu_at_end']} when it ended"
      + (" (the numbers are noisier than on a quiet machine; the interleaving keeps the ratios fair)." if oq else
         " (quiet machine).") + "\n")
    sizes = S["sizes"]
    w(f"Sizes: {sizes['pods']} pods × {vm['rails']} rails per implementation; rails scaling "
      f"{sizes['scale_rails']} with {sizes['scale_pods']} pods each; concurrency {sizes['conc']} pods × "
      f"{sizes['conc_rounds']} rounds; IPv6 {sizes['v6_trials']} trials per mode; rusage {sizes['rss_runs']} runs. "
      f"`make bench` took {S['make_bench_seconds']} s (release build included; the guest part "
      f"{S['guest_seconds']:.0f} s).\n")
    w(f"![plot]({rel}/plot.svg)\n")

    w("## Targets\n")
    w("| target | result | |")
    w("|---|---|---|")
    ra, rd = v4["ratio_add_libcni"], v4["ratio_del_libcni"]
    w(f"| IPv4 ADD per rail ≤ 0.35× chain | {ra:.2f}× (libcni), {v4['ratio_add_wall']:.2f}× (wall) | {target(ra <= 0.35)} |")
    w(f"| IPv4 DEL per rail ≤ 0.35× chain | {rd:.2f}× (libcni), {v4['ratio_del_wall']:.2f}× (wall) | {target(rd <= 0.35)} |")
    o = v6["optimistic"]["after_up"]["median"]
    w(f"| IPv6 `dad: optimistic` ready ≤ 300 ms after link up | median {f0(o)} ms, max {f0(v6['optimistic']['after_up']['max'])} ms | {target(o <= 300)} |")
    wm, km = v6["wait"]["after_up"]["median"], v6["kernel"]["after_up"]["median"]
    w(f"| IPv6 `dad: wait` no slower than the kernel's own non-tentative SLAAC address | median {f0(wm)} ms vs kernel {f0(km)} ms | {target(wm <= km)} |")
    w(f"| binary ≤ 2 MB stripped | {sz['roce-ipvlan'] / 1e6:.2f} MB ({sz['roce-ipvlan']} bytes) | {target(sz['roce-ipvlan'] <= 2_000_000)} |")
    w(f"| peak RSS ≤ 0.5× the largest Go plugin's | {ru['maxrss_kib']['roce-ipvlan']:.0f} KiB vs {ru['largest_go']} "
      f"{ru['maxrss_kib'][ru['largest_go']]:.0f} KiB = {ru['rss_ratio']:.2f}× | {target(ru['rss_ratio'] <= 0.5)} |\n")

    w("## IPv4, 16 rails, host-local: per rail\n")
    w("| | roce-ipvlan median / p90 / max | chain median / p90 / max | ratio (medians) |")
    w("|---|---|---|---|")
    for op in ("add", "del"):
        for k in ("libcni", "wall"):
            r, c = v4[f"roce_{op}"][k], v4[f"chain_{op}"][k]
            w(f"| {op.upper()} ({k}, ms, n={r['n']}) | {f0(r['median'])} / {f0(r['p90'])} / {f0(r['max'])} | "
              f"{f0(c['median'])} / {f0(c['p90'])} / {f0(c['max'])} | {v4[f'ratio_{op}_{k}']:.2f} |")
    w("")
    w("## A full 16-rail pod (sequential, as Multus)\n")
    w("| ms | roce-ipvlan median (max) | chain median (max) | ratio |")
    w("|---|---|---|---|")
    for op in ("add", "del"):
        r, c = v4["roce_pod"][op], v4["chain_pod"][op]
        w(f"| pod {op.upper()}, 16 rails | {f0(r['median'])} ({f0(r['max'])}) | {f0(c['median'])} ({f0(c['max'])}) | "
          f"{r['median'] / c['median']:.2f} |")
    w("")
    w("## Scaling\n")
    sr = S["scale_rails"]
    w("Per rail (libcni call, median ms) as the rails per pod grow:\n")
    w("| rails per pod | " + " | ".join(str(x) for x in sr["rails"]) + " |")
    w("|---|" + "---|" * len(sr["rails"]))
    for name, ys in sr["per_rail_libcni_median_ms"].items():
        w(f"| {name.replace('roce', 'roce-ipvlan')} | " + " | ".join(f0(y) for y in ys) + " |")
    w("")
    c = S["concurrency"]
    w("Concurrent pods, one attachment each (rails round-robin), all started at once: batch wall time / "
      "pods (ms per attachment, the throughput view) and the median latency of one call:\n")
    w("| concurrent pods | " + " | ".join(str(x) for x in c["pods"]) + " |")
    w("|---|" + "---|" * len(c["pods"]))
    for name, ys in c["per_attachment_ms"].items():
        w(f"| {name.replace('roce', 'roce-ipvlan')}, per attachment | " + " | ".join(f0(y) for y in ys) + " |")
    for name, ys in c["latency_median_ms"].items():
        w(f"| {name.replace('roce', 'roce-ipvlan')}, latency | " + " | ".join(f0(y) for y in ys) + " |")
    w("")
    w("## IPv6 SLAAC rails (radvd)\n")
    w("Milliseconds from the child's link-up (`ip -ts monitor` in the pod) to *ready*: for roce-ipvlan "
      "the return of ADD, which waits for the routable RoCE GID; for the kernel alone (an IPvlan L2 "
      "child made by hand, IPv6 on, brought up, nothing else) the first global SLAAC address without "
      "`tentative` (`kernel`), or the first global address at all with `optimistic_dad=1` "
      "(`kernel-optimistic`). *global* is the first notification of the global address; the kernel "
      "notifies a tentative address only with optimistic DAD, so for `kernel` and `wait` it is when DAD "
      "ended. ADD is the whole `cnidriver add`. `kernel-optimistic` lost its link-up event in this run "
      "(the monitor subscribed late), so it has no figure.\n")
    w("| mode | ready after link up: median / p90 / max | global address after link up (median) | ADD wall (median) |")
    w("|---|---|---|---|")
    for m in ("kernel", "wait", "optimistic", "off", "kernel-optimistic"):
        d = v6[m]
        w(f"| {m} (n={d['after_up']['n']}) | {f0(d['after_up']['median'])} / {f0(d['after_up']['p90'])} / "
          f"{f0(d['after_up']['max'])} | {f0(d['global_after_up']['median'])} | {f0(d['add']['median'])} |")
    w("")
    w("## Size, memory, CPU\n")
    w("| | roce-ipvlan | Go chain |")
    w("|---|---|---|")
    w(f"| binary (stripped), bytes | {sz['roce-ipvlan']} | ipvlan {sz['go']['ipvlan']} + tuning {sz['go']['tuning']} "
      f"+ sbr {sz['go']['sbr']} = {sz['go_chain_sum']} (host-local {sz['go']['host-local']}, used by both) |")
    m = ru["maxrss_kib"]
    w(f"| peak RSS of one ADD, KiB (median) | {m['roce-ipvlan']:.0f} | ipvlan {m['ipvlan']:.0f}, tuning {m['tuning']:.0f}, "
      f"sbr {m['sbr']:.0f}; host-local {m['host-local']:.0f} (used by both) |")
    cp = ru["cpu_ms_per_op"]
    w(f"| CPU time (user+sys) per ADD, ms, IPAM included | {cp['roce_ADD']:.0f} | {cp['chain_ADD']:.0f} |")
    w(f"| CPU time per DEL, ms, IPAM included | {cp['roce_DEL']:.0f} | {cp['chain_DEL']:.0f} |\n")
    w("Peak RSS is `/usr/bin/time`'s `%M` (ru_maxrss). That value includes the process's children, so the "
      "plugin's own figure is taken with a busybox-shell IPAM stub (about 1 MiB) instead of host-local; "
      "host-local's is measured on its own. CPU time comes from the host-local runs (a plugin's figure "
      "includes the IPAM it executes).\n")
    w("## Where one ADD spends its time (strace -f, one IPv4 rail)\n")
    for impl, rows in S["profile"].items():
        w(f"{'roce-ipvlan' if impl == 'roce' else 'chain'}: process timeline from the driver's exec (ms; strace slows every syscall, "
          "so only the shares count):\n")
        w("| process | starts at | runs for | netlink/socket sends |")
        w("|---|---|---|---|")
        for r in rows:
            w(f"| {r['process']} | {r['start_ms']:.0f} | {r['duration_ms']:.0f} | {r['netlink_msgs']} |")
        w("")
    hl = S["rusage"].get("host_local_cpu_ms")
    w(FINDINGS.format(hl=f0(hl), hl_share=f0(100 * hl / cp["chain_ADD"]) if hl and cp["chain_ADD"] else "–",
                      floor=f2((hl or 0) / cp["chain_ADD"]) if cp["chain_ADD"] else "–"))
    return "\n".join(L) + "\n"


FINDINGS = """## Findings (profile)

Read from `strace -f -ttt` of one ADD on a 16-rail node (the traces are in the raw data) and from
the CPU figures above:

- **IPAM exec bounds the ratio.** Both sides execute host-local, a Go binary; it alone costs
  {hl} ms of CPU per ADD here, {hl_share} % of the whole chain's ADD CPU. The chain starts four Go
  processes per ADD (ipvlan, host-local, tuning, sbr), roce-ipvlan one Rust process and the same
  host-local. Even a roce-ipvlan that cost nothing could not go below about {floor}× the chain's
  CPU; with the per-process start-up under TCG, the 0.35× wall-time target is out of reach while
  host-local is the IPAM. An in-process IPAM (or a Rust host-local) is what would remove it.
- **RDMA port lookup is O(rails on the node).** To find the rail's RDMA port, ADD dumps every RDMA
  device (`RDMA_NLDEV_CMD_GET`) and then the ports of each device (`RDMA_NLDEV_CMD_PORT_GET`),
  17 netlink dumps on 16 rails, each a round trip through the emulated kernel. That is why the
  per-rail ADD time grows with the rails per pod/node in the scaling table, while the chain's
  (which never looks at RDMA) does not. Stopping at the first port whose netdev is the rail,
  or resolving PCI NICs through `/sys/class/net/<rail>/device/infiniband/`, makes it O(1).
- **One thread per pod-side step.** Each pod-side sysctl/GID step runs on its own fresh thread
  that enters the pod (`setns`); one ADD starts about eight such threads. Batching the sysctl
  writes into one thread would save most of them.
- **GID wait.** After the last netlink ACK, ADD reads the GID table from inside the pod until the
  address's RoCE v2 GID is there; the chain returns without it (and without any guarantee that
  the GID exists). This is work the chain does not do, included in roce-ipvlan's figures.
- **DEL** has no GID wait: one process plus its IPAM DEL against three plugin processes plus
  IPAM DEL for the chain.
- **IPv6.** With `dad: wait` the plugin solicits from `::` at link up (the link-local is still
  tentative), radvd answers by multicast, paced to one per 3 s (the bench leaves each router 3 s
  between trials, but radvd's own periodic multicast RAs can still fall inside that window and
  delay the answer); the kernel alone solicits only after link-local DAD, then runs DAD for the
  global address, hence its longer time. With `optimistic`/`off` the plugin solicits from the
  usable link-local and gets a unicast RA at once; what remains is process start, link creation,
  and the GID read.
"""

if __name__ == "__main__":
    main()
