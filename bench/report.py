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


# The IPv6 modes in table order; "before" is `dad: wait` of an earlier commit (bench/run.sh).
V6_MODES = ("kernel", "wait", "before", "optimistic", "off")

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
    ap.add_argument("--libcni", default="?")
    a = ap.parse_args()
    raw = json.load(open(a.raw))
    S = {"generated": datetime.fromtimestamp(os.path.getmtime(a.raw), timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "vm": raw["vm"],
         "sizes": raw["sizes"], "qemu": a.qemu, "host_cpu": a.host_cpu, "host_cpus": a.host_cpus,
         "other_qemu_at_start": int(a.other_qemu), "other_qemu_at_end": int(a.other_qemu_end), "make_bench_seconds": a.runtime,
         "guest_seconds": raw.get("guest_seconds"), "libcni": a.libcni}

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
    ru = raw.get("rusage", {}).get("rows", [])
    smaps = raw.get("rusage", {}).get("smaps", [])
    write_csv(f"{a.out}/rusage.csv", ru)
    write_csv(f"{a.out}/smaps.csv", smaps)
    rss, rss_range = {}, {}
    for proc in ("roce-ipvlan", "ipvlan", "tuning", "sbr", "host-local"):
        kind = "host-local" if proc == "host-local" else "stub"
        sel = [r["maxrss_kib"] for r in ru if r["proc"] == proc and r["pass"] == kind and r["cmd"] == "ADD"]
        rss[proc] = statistics.median(sel) if sel else float("nan")
        rss_range[proc] = (min(sel), max(sel)) if sel else (float("nan"), float("nan"))
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
                   "rss_ratio": rss["roce-ipvlan"] / rss[go_max], "maxrss_range_kib": rss_range,
                   "mid_add": {proc: {k: statistics.median([m[k] for m in smaps if m["proc"] == proc] or [float("nan")])
                                      for k in ("rss_kib", "anon_kib", "file_kib")}
                               for proc in ("roce-ipvlan", "ipvlan")}}

    # sizes
    size = os.path.getsize(a.plugin)
    S["plugin_sha256"] = hashlib.sha256(open(a.plugin, "rb").read()).hexdigest()
    S["plugin_note"] = os.environ.get("BENCH_BIN_NOTE", "")
    # The Rust target from the build's path (target/<triple>/release/roce-ipvlan).
    parts = os.path.normpath(a.plugin).split(os.sep)
    S["plugin_target"] = parts[-3] if len(parts) >= 3 and parts[-2] == "release" else "unknown"
    go = {p: os.path.getsize(os.path.join(a.go_plugins, p)) for p in ("ipvlan", "tuning", "sbr", "host-local")}
    S["size"] = {"roce-ipvlan": size, "go": go, "go_chain_sum": go["ipvlan"] + go["tuning"] + go["sbr"]}

    # IPv6
    v6 = raw.get("ipv6", [])
    for r in v6:  # address events by any name (a child may start under a temporary one)
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
                 for m in V6_MODES}
    write_csv(f"{a.out}/ipv6.csv", [{k: v for k, v in r.items() if k != "monitor"} for r in v6])

    # profile
    pr = raw.get("profile", {})

    def med(xs):
        return statistics.median(xs) if xs else float("nan")
    prof = {"start_ms": {k: med(v) for k, v in pr.get("start_ms", {}).items()},
            "hostlocal_ms": {k: med(v) for k, v in pr.get("hostlocal_ms", {}).items()}}
    for b in ("", "before_"):
        for op in ("add", "del"):
            rows = pr.get(f"{b}{op}_phases_ms", [])
            if b and not rows:
                continue
            write_csv(f"{a.out}/phases-{b}{op}.csv", rows)
            prof[f"{b}{op}_phases_ms"] = {k: med([r[k] for r in rows]) for k in (rows[0] if rows else {})}
            prof[f"{b}{op}_total_ms"] = med([sum(r.values()) for r in rows])
    st, hl = prof["start_ms"], prof["hostlocal_ms"]
    if st and hl:
        # A roce-ipvlan that did nothing but start and run host-local, against the chain's median.
        for op in ("add", "del"):
            floor = st["roce-ipvlan"] + hl[op]
            prof[f"floor_{op}_ms"] = floor
            prof[f"floor_{op}_ratio"] = floor / v4[f"chain_{op}"]["libcni"]["median"]
        prof["chain_starts_ms"] = sum(st[p] for p in ("ipvlan", "tuning", "sbr", "host-local"))
    S["profile"] = prof

    # many rails in one ADD
    mu = raw.get("multi")
    if mu:
        rows = mu["rows"]
        write_csv(f"{a.out}/multi-rail.csv", rows)
        S["multi"] = {c: {"add": stats([r["add_ms"] for r in rows if r["case"] == c]),
                          "del": stats([r["del_ms"] for r in rows if r["case"] == c])}
                      for c in sorted({r["case"] for r in rows})}
        S["multi_timeline"] = {"v4": mu.get("timeline_v4") or {}, "v6": mu.get("timeline_v6") or {}}
        S["multi_rails"] = mu.get("rails", [])

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
    modes = [m for m in V6_MODES if S["ipv6"][m]["after_up"]["n"]]
    svg += svg_bars(560, 350, 380, 200, "IPv6 SLAAC: ms from link up to ready (median)",
                    [(m, {"x": S["ipv6"][m]["after_up"]["median"]})
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
      f"Raw numbers: [`{rel}/`]({rel}/) (`raw.json`, CSVs, `summary.json`). "
      "Every number on this page comes from that one run, but for the two sections of their own that "
      "`make bench-fabric` (two hosts) and `make bench-k8s` (pod start on Kubernetes) replace alone.\n")
    w("## Setup\n")
    w(f"- Host: {S['host_cpu']}, {S['host_cpus']} CPUs. {S['qemu']}, **TCG** (no KVM): every figure is "
      "an emulation figure, several times slower than hardware. Compare the **ratios**, not the milliseconds.")
    w(f"- Guest: Debian kernel {vm['kernel']}, {vm['vcpus']} vCPUs, {vm['mem_mib']} MiB, {vm['rails']} "
      "Soft-RoCE rails (`virtio-net` + `rdma_rxe`, `rdma0`..`rdma15`), 4 peer NICs for the IPv6 routers "
      "(radvd). Same kernel, rails and driver for both sides.")
    w(f"- Client: `tests/cnidriver` (libcni {S['libcni']}), one call per rail and pod, as Multus does. "
      "*libcni* columns are the libcni call alone (`CNIDRIVER_TIMING`: plugin exec and work, "
      "without the driver's own start-up); *wall* is the whole `cnidriver` process.")
    w("- roce-ipvlan: the binary the image ships (deploy/Containerfile), built by `make static`: "
      f"`cargo build --release --target {S['plugin_target']}` with `-C target-feature=+crt-static` "
      f"(static, {'musl' if S['plugin_target'].endswith('musl') else 'glibc' if S['plugin_target'].endswith('gnu') else 'libc unknown'}; "
      "LTO, `opt-level = \"z\"`, stripped), "
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
      f"`make bench` took {S['make_bench_seconds']} s (static build included; the guest part "
      f"{S['guest_seconds']:.0f} s).\n")
    w(f"![plot]({rel}/plot.svg)\n")

    w("## Targets\n")
    w("| target | result | |")
    w("|---|---|---|")
    ra, rd = v4["ratio_add_libcni"], v4["ratio_del_libcni"]
    pr = S["profile"]

    def why_v4(op, ok):
        # Not met: how far the exec floor (start-up + host-local under TCG) leaves the target.
        if ok or f"floor_{op}_ratio" not in pr:
            return ""
        return (f" (the floor, roce-ipvlan's start-up and host-local alone: {pr[f'floor_{op}_ratio']:.2f}×; "
                "the rest is the plugin's own work: [findings](#findings))")
    w(f"| IPv4 ADD per rail ≤ 0.50× chain | {ra:.2f}× (libcni), {v4['ratio_add_wall']:.2f}× (wall){why_v4('add', ra <= 0.50)} | {target(ra <= 0.50)} |")
    w(f"| IPv4 DEL per rail ≤ 0.50× chain | {rd:.2f}× (libcni), {v4['ratio_del_wall']:.2f}× (wall){why_v4('del', rd <= 0.50)} | {target(rd <= 0.50)} |")
    o = v6["optimistic"]["after_up"]["median"]
    w(f"| IPv6 `dad: optimistic` ready ≤ 300 ms after link up | median {f0(o)} ms, max {f0(v6['optimistic']['after_up']['max'])} ms | {target(o <= 300)} |")
    wm, km = v6["wait"]["after_up"]["median"], v6["kernel"]["after_up"]["median"]
    was = ""
    if v6["before"]["after_up"]["n"]:
        was = f"; before, {S['sizes'].get('before_rev')}: {f0(v6['before']['after_up']['median'])} ms"
    w(f"| IPv6 `dad: wait` ready ≤ 300 ms after link up, DAD done | median {f0(wm)} ms, max {f0(v6['wait']['after_up']['max'])} ms (the kernel alone: {f0(km)} ms{was}"
      f"{'' if wm <= 300 else '; the floor is two DAD periods of `ipv6.retransTimeMs`, 100 ms each ([ipv6.md](ipv6.md#dad-the-trade-off)); the rest is the router answer between them and the ADD own steps under TCG'}) | {target(wm <= 300)} |")
    st = S["profile"].get("start_ms", {})
    if "/bin/true" in st and "roce-ipvlan" in st:
        d = st["roce-ipvlan"] - st["/bin/true"]
        w(f"| start-up (VERSION round trip) within 5 ms of `/bin/true` | median {f0(st['roce-ipvlan'])} ms vs "
          f"{f0(st['/bin/true'])} ms ({d:+.1f} ms) | {target(d <= 5)} |")
    w(f"| binary ≤ 2 MB stripped | {sz['roce-ipvlan'] / 1e6:.2f} MB ({sz['roce-ipvlan']} bytes, the operator "
      f"tools included; where the size goes and the split that is not needed: "
      f"[design.md](design.md#one-binary-or-two)) | {target(sz['roce-ipvlan'] <= 2_000_000)} |")
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
      "`tentative`. *global* is the first notification of the global address; the kernel notifies a "
      "tentative address only with optimistic DAD, so for `kernel` and `wait` it is when DAD ended. "
      "ADD is the whole `cnidriver add`." + (
          f" *wait, before* is `dad: wait` of the static build of commit {S['sizes']['before_rev']} "
          "(`BENCH_BEFORE_REV` of bench/run.sh" + ("; the state before issue #18's short-DAD sequence"
                                                if S['sizes']['before_rev'] == "49f5276" else "") + "), "
          "its trials interleaved with the others in the same run." if v6["before"]["after_up"]["n"]
          else "") + "\n")
    w("| mode | ready after link up: median / p90 / max | global address after link up (median) | ADD wall (median) |")
    w("|---|---|---|---|")
    before = S["sizes"].get("before_rev")
    for m in V6_MODES:
        d = v6[m]
        if not d["after_up"]["n"]:
            continue
        label = f"wait, before ({before})" if m == "before" else m
        w(f"| {label} (n={d['after_up']['n']}) | {f0(d['after_up']['median'])} / {f0(d['after_up']['p90'])} / "
          f"{f0(d['after_up']['max'])} | {f0(d['global_after_up']['median'])} | {f0(d['add']['median'])} |")
    w("")
    w("## Size, memory, CPU\n")
    w("| | roce-ipvlan | Go chain |")
    w("|---|---|---|")
    w(f"| binary (stripped), bytes | {sz['roce-ipvlan']} | ipvlan {sz['go']['ipvlan']} + tuning {sz['go']['tuning']} "
      f"+ sbr {sz['go']['sbr']} = {sz['go_chain_sum']} (host-local {sz['go']['host-local']}, used by both) |")
    m, mr = ru["maxrss_kib"], ru["maxrss_range_kib"]

    def rss_cell(p):
        return f"{m[p]:.0f} ({mr[p][0]:.0f}–{mr[p][1]:.0f})"
    w(f"| peak RSS of one ADD, KiB: median (min–max) | {rss_cell('roce-ipvlan')} | ipvlan {rss_cell('ipvlan')}, "
      f"tuning {rss_cell('tuning')}, sbr {rss_cell('sbr')}; host-local {rss_cell('host-local')} (used by both) |")
    cp = ru["cpu_ms_per_op"]
    w(f"| CPU time (user+sys) per ADD, ms, IPAM included | {cp['roce_ADD']:.0f} | {cp['chain_ADD']:.0f} |")
    w(f"| CPU time per DEL, ms, IPAM included | {cp['roce_DEL']:.0f} | {cp['chain_DEL']:.0f} |\n")
    w("Peak RSS is `/usr/bin/time`'s `%M` (ru_maxrss). That value includes the process's children, so the "
      "plugin's own figure is taken with a busybox-shell IPAM stub (about 1 MiB) instead of host-local; "
      "host-local's is measured on its own. CPU time comes from the host-local runs (a plugin's figure "
      "includes the IPAM it executes).\n")
    render_multi(S, w)
    render_profile(S, w)
    return "\n".join(L) + "\n"


RAIL_EVENTS = ["child created", "IPAM done", "sysctls set", "routes installed",
               "SLAAC address ready", "GID visible", "attachment ready"]


def render_multi(S, w):
    """Many rails in one ADD ("rails"): the targets of issue #28 and one ADD's timeline."""
    m = S.get("multi")
    if not m:
        return
    n = len(S.get("multi_rails", [])) or S["vm"]["rails"]
    med = lambda c, op="add": m.get(c, {}).get(op, {}).get("median", float("nan"))
    v4, chain = med("v4-one"), med("v4-chain")
    v6all, v6one = med("v6-all"), med("v6-one-rail")
    w("## Many rails in one ADD (`rails`)\n")
    w(f"One ADD of a NAD with `\"rails\"` matching all {n} rails (one child per rail, the rails set up "
      "at once, docs/configuration.md) against what Multus does without it: one attachment per rail, one "
      f"after the other. Medians of {S['sizes'].get('multi_trials', '?')} interleaved trials; direct exec "
      f"of the plugin for `rails`, the chain's {n} ADDs through libcni (cnidriver) as in the IPv4 section.\n")
    w("| case | ADD ms | DEL ms | target | |")
    w("|---|---|---|---|---|")
    w(f"| IPv4: {n} rails in one ADD | {f0(v4)} | {f0(med('v4-one', 'del'))} | ≤ 0.25× the chain's {n} "
      f"sequential attachments ({f0(chain)} ms): {v4 / chain:.2f}× | {target(v4 <= 0.25 * chain)} |")
    w(f"| IPv4: the chain, {n} sequential attachments | {f0(chain)} | {f0(med('v4-chain', 'del'))} | | |")
    w(f"| IPv6 routed, `dad: wait`: {n} rails in one ADD | {f0(v6all)} | {f0(med('v6-all', 'del'))} | ≤ 2× one "
      f"rail's ADD ({f0(v6one)} ms): {v6all / v6one:.2f}× | {target(v6all <= 2 * v6one)} |")
    if "v6-eight" in m:
        v6eight = med("v6-eight")
        w(f"| IPv6 routed, `dad: wait`: 8 rails in one ADD | {f0(v6eight)} | {f0(med('v6-eight', 'del'))} | "
          f"≤ 2× one rail's ADD: {v6eight / v6one:.2f}× | {target(v6eight <= 2 * v6one)} |")
    w(f"| IPv6 routed, `dad: wait`: one rail | {f0(v6one)} | {f0(med('v6-one-rail', 'del'))} | | |\n")
    w("The routers of the IPv6 rows are radvd on an IPvlan child of each rail in a namespace of its own "
      "(the VM has peer NICs on 4 rails only). Every timed ADD runs at the default log level; the "
      "timelines below are of one more ADD each, with `logLevel: debug`.\n")
    for fam, title in (("v4", "IPv4"), ("v6", "IPv6 `dad: wait`")):
        tl = S["multi_timeline"].get(fam) or {}
        if not tl:
            continue
        w(f"**Timeline of one {n}-rail {title} ADD**: ms after the exec at which each rail's thread "
          "logged each step (its debug log). The rails' columns overlap: each step of each rail starts "
          "while the other rails are in theirs.\n")
        w("| rail | " + " | ".join(RAIL_EVENTS) + " |")
        w("|---|" + "---|" * len(RAIL_EVENTS))
        for rail in sorted(tl, key=lambda r: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", r)]):
            w(f"| {rail} | " + " | ".join(f0(tl[rail].get(e)) for e in RAIL_EVENTS) + " |")
        w("")


def render_profile(S, w):
    p, v4, ru, sz = S["profile"], S["ipv4"], S["rusage"], S["size"]
    st, hl = p.get("start_ms", {}), p.get("hostlocal_ms", {})
    if not st:
        return
    n_start, n_prof = S["sizes"].get("start_runs", "?"), S["sizes"].get("profile_runs", "?")
    w("## Where the time goes (profile)\n")
    w(f"Process start-up alone: exec, runtime initialisation, a VERSION reply, exit (median of {n_start} "
      "interleaved runs, ms, timed around `subprocess.run` in the guest):\n")
    names = ["/bin/true", "roce-ipvlan", "ipvlan", "tuning", "sbr", "host-local"]
    w("| " + " | ".join(names) + " |")
    w("|" + "---|" * len(names))
    w("| " + " | ".join(f0(st.get(n)) for n in names) + " |\n")
    w(f"host-local on its own (direct exec): ADD {f0(hl.get('add'))} ms, DEL {f0(hl.get('del'))} ms.\n")
    before = S["sizes"].get("before_rev") if "before_add_phases_ms" in p else None
    w(f"One roce-ipvlan ADD and DEL on an IPv4 rail with host-local (direct exec, `logLevel: debug`), "
      f"median of {n_prof} runs: each phase ends at one of the plugin's debug events (`plugin/src/commands/add.rs`, "
      "`del.rs`), the first one at the spawn, the last one at the exit."
      + (f" *before* is the static build of commit {before} (the IPv6 section's *before*), the same events, "
         "its runs interleaved with this binary's." if before else "") + "\n")
    cols = ([f"before ({before})"] if before else []) + ["now"]

    def phase_rows(op):
        now = p[f"{op}_phases_ms"]
        old = p.get(f"before_{op}_phases_ms", {})
        rows = [[k] + ([f0(old.get(k))] if before else []) + [f0(v)] for k, v in now.items()]
        total = ([f"**{f0(p[f'before_{op}_total_ms'])}**"] if before else []) + [f"**{f0(p[f'{op}_total_ms'])}**"]
        return rows + [["**total**"] + total]
    add, dele = phase_rows("add"), phase_rows("del")
    blank = [""] * (1 + len(cols))
    w("| ADD phase, ms | " + " | ".join(cols) + " | | DEL phase, ms | " + " | ".join(cols) + " |")
    w("|---|" + "---|" * len(cols) + "---|---|" + "---|" * len(cols))
    # The totals stay on the last line of both halves.
    n = max(len(add), len(dele))
    add = add[:-1] + [blank] * (n - len(add)) + add[-1:]
    dele = dele[:-1] + [blank] * (n - len(dele)) + dele[-1:]
    for a, d in zip(add, dele):
        w("| " + " | ".join(a) + " | | " + " | ".join(d) + " |")
    w("")
    ph = p["add_phases_ms"]
    start_cfg = ph.get("exec, start-up, configuration", float("nan"))
    ipam = ph.get("IPAM (exec host-local)", float("nan"))
    ex = ph.get("exit", float("nan"))
    own = p["add_total_ms"] - start_cfg - ipam - ex
    m = ru["mid_add"]
    mx, mr, go = ru["maxrss_kib"], ru["maxrss_range_kib"], ("ipvlan", "tuning", "sbr")
    w("## Findings\n")
    w(f"- **Under TCG, process start-up and IPAM are most of an ADD.** Every exec costs about "
      f"{f0(st['/bin/true'])} ms here (`/bin/true`), a Go plugin starts in {f0(st['ipvlan'])}–"
      f"{f0(max(st['tuning'], st['sbr'], st['host-local']))} ms, roce-ipvlan in {f0(st['roce-ipvlan'])} ms. "
      f"Of roce-ipvlan's {f0(p['add_total_ms'])} ms ADD, start-up with the configuration is {f0(start_cfg)} ms, "
      f"host-local {f0(ipam)} ms and the exit {f0(ex)} ms; the plugin's own work, checks to result, is "
      f"{f0(own)} ms. The chain starts four Go processes per ADD: {f0(p['chain_starts_ms'])} ms of "
      "start-up before any work.")
    w(f"- **The floor under the ratio (issue #18 asks for ≤ 0.50×).** A roce-ipvlan whose own work took "
      f"no time would still start and run host-local: {f0(p['floor_add_ms'])} ms, "
      f"{f2(p['floor_add_ratio'])}× the chain's median ADD ({f0(v4['chain_add']['libcni']['median'])} ms); "
      f"for DEL {f0(p['floor_del_ms'])} ms, {f2(p['floor_del_ratio'])}×. Both sides pay host-local, and "
      "under TCG each exec is tens of milliseconds, so the ratio cannot fall far below that floor "
      "whatever the plugin does. What remains to win is the plugin's own work. On hardware an exec "
      "costs about a millisecond and the ratio would be set by the work itself; that was not measured "
      "here. Only an in-process IPAM would remove the floor, and delegating IPAM is part of the "
      "contract (docs/contract.md), so it stays.")
    w("- **Optimised after profiling.** Measured by hand with the same debug events before the change "
      "(16 rails): creating the child took about 36 ms, 15 of them a rename (`dev_change_name` waits "
      "for an RCU grace period); the child is now created under `CNI_IFNAME` in one request, with the "
      "temporary name and rename only when the host has a link of that name. Finding the rail's RDMA "
      "port took about 16 ms (a socket and a dump per RDMA device, 17 dumps on 16 rails); it now uses "
      "one socket, asks the device sysfs ties to the rail first and stops at the first match. The "
      "sysctls took a thread each (about 15 ms with addresses and link up); they are now written from "
      "one. The GID poll starts at 1 ms instead of 5. Later (issue #18): the IPAM plugin is "
      "driven from the main thread with poll(2) instead of a thread per pipe (three thread starts "
      "per IPAM call, ADD and DEL), a SLAAC ADD enters the pod once for its address subscription "
      "and its router solicitation's socket (twice before, the second at the end of link-local "
      "DAD), the threads share one malloc arena, a sysfs attribute is one read, and the runtime "
      "is not shut down before the exit. Then: the shipped build links musl instead of glibc (a "
      "shorter start), a link lookup by name is one RTM_GETLINK on a plain socket read for the few "
      "attributes the plugin uses (decoding the whole reply with netlink-packet-route was most of a "
      "~20 ms rail lookup), DEL's pod side (lookups, one rule dump for both families, the deletes) "
      "runs on that socket without a runtime, the GID wait reads slots by number instead of listing "
      "the table on every poll, and the software-device hint stops at the first match. Last, every "
      "route-netlink request of every command (ADD's child, addresses, routes, rules and ifalias; "
      "CHECK's, GC's and the SLAAC wait's dumps; the address events) moved to that plain socket, "
      "encoded as `ip` encodes it: rtnetlink, netlink-packet-route and tokio left the binary, so "
      "no command builds a runtime and the binary lost 0.78 MB. Then (issue #27) the requests "
      "are built from netlink-packet-route's typed messages again, on one blocking socket of "
      "netlink-sys and netlink-packet-core for route and RDMA netlink (still no runtime), the replies "
      "read lazily for the attributes used; and (issue #30) ADD leaves an attachment record: "
      f"the binary is {sz['roce-ipvlan']} bytes. Then (issue #28, for many rails at once) a "
      "multi-rail ADD finds every rail's RDMA port in one RDMA netlink walk, each rail's thread "
      "enters the pod once after its IPAM call, and a netlink exchange or a sysfs read no longer "
      "allocates a buffer of its own (a 64 KiB one per exchange was an mmap and a munmap under "
      "musl's single malloc lock, thousands of futex calls in a 16-rail ADD). "
      + (f"The *before* column of the phase table is commit {before}, its runs interleaved with "
         "this binary's: the same run's A/B. Besides the netlink layer, what came after it is "
         "in the *now* column too: the second hardening round (issue #25), `rails` (#28) and "
         "the attachment record (#30)." if before else "")
      )
    w(f"- **The GID wait** ({f0(ph.get('wait for the RoCE v2 GID'))} ms) is work the chain does not do: "
      "ADD returns only when the pod can see its RoCE v2 GID. The kernel adds the GID from a work item "
      "after the address, so the first read usually misses.")
    w(f"- **DEL**: removing rules and child takes {f0(p['del_phases_ms'].get('rules and child'))} ms, "
      "mostly the kernel unregistering the child (it waits for RCU grace periods), which the chain's "
      "ipvlan DEL pays too.")
    w(f"- **Memory.** Mid-ADD (read by the stub IPAM from `/proc/<plugin>/smaps_rollup`), roce-ipvlan "
      f"holds {f0(m['roce-ipvlan']['rss_kib'])} KiB: {f0(m['roce-ipvlan']['file_kib'])} KiB file-backed "
      f"(its code pages, the static libc included, mapped by the kernel's fault-around; shared page cache) and "
      f"{f0(m['roce-ipvlan']['anon_kib'])} KiB anonymous. ipvlan holds {f0(m['ipvlan']['rss_kib'])} KiB: "
      f"{f0(m['ipvlan']['file_kib'])} KiB file-backed and {f0(m['ipvlan']['anon_kib'])} KiB anonymous "
      "(Go heap and stacks). So roce-ipvlan's peak RSS is mostly code (a static libc maps less than "
      "a shared libc.so; the size this costs the binary, and the one-or-two-binaries decision, are in "
      "[design.md](design.md#one-binary-or-two)). "
      f"The Go plugins' peak RSS is bimodal between runs (the ranges in the table above: a Go process "
      "starts a varying number of runtime threads), so the RSS verdict depends on which mode the "
      f"medians over {S['sizes']['rss_runs']} runs fall in: against the largest Go plugin's lower value "
      f"roce-ipvlan's median is {f2(mx['roce-ipvlan'] / max(mr[p][0] for p in go))}×, "
      f"against its higher one {f2(mx['roce-ipvlan'] / max(mr[p][1] for p in go))}×.")
    w("- **IPv6.** With `dad: wait` the child starts with a 100 ms neighbour retransmit timer "
      "(`ipv6.retransTimeMs`) and no random delay before DAD: its link-local passes DAD after one "
      "100 ms probe, the plugin (and the kernel) then solicit from it, radvd answers by unicast at "
      "once (`AdvRASolicitedUnicast`, on by default), and the SLAAC address's own DAD takes another "
      "100 ms; DAD still runs for both addresses. Before that change (issue #18; median 1112 ms, "
      "max 2102 ms in the run of 2026-11-30) the plugin solicited from `::` while the link-local "
      "was tentative, which radvd can only answer by multicast, paced to one per 3 s per "
      "interface, and the global address's DAD waited the kernel's 1 s timer. The kernel alone "
      "solicits only after a 1 s link-local DAD (after a random delay of up to 1 s) and waits 1 s "
      "more for the global address's DAD, hence its longer time. With `optimistic`/`off` the "
      "plugin solicits from the usable link-local at link up and gets a unicast RA at once; what "
      "remains is process start, link creation, and the GID read.\n")


if __name__ == "__main__":
    main()
