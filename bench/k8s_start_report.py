#!/usr/bin/env python3
"""The pod-start section of docs/benchmarks.md from bench/k8s-start.sh's numbers (docs/bench/k8s-start.json).

bench/run.sh writes it after the rest of the page; `make bench-k8s` runs only the pod-start
bench and replaces the section in the page as it is (between its two markers). Standard
library only.

    bench/k8s_start_report.py --json docs/bench/k8s-start.json --doc docs/benchmarks.md
"""

import argparse
import json
import statistics
import sys

from sections import write_section

BEGIN = "<!-- k8s-start-bench: begin (bench/k8s_start_report.py) -->"
END = "<!-- k8s-start-bench: end -->"
TARGET = 0.30  # issue #37: apply -> Ready at most 0.3x the chain's

# (label, the record's figure): the phases are consecutive, from `kubectl apply`.
ROWS = [
    ("apply → Ready", lambda r: r["ready_s"]),
    ("apply → GID seen in the pod", lambda r: r["gid_s"]),
    ("· apply → sandbox begins (API server, scheduler, kubelet)", lambda r: r.get("sandbox_begin_s")),
    ("· sandbox (pause, pod network: Multus and every delegate)", lambda r: r.get("sandbox_s")),
    ("· · in it, nv-ipam's first call → its last answer", lambda r: r.get("ipam_window_s")),
    ("· sandbox returned → container's command starts", lambda r: r.get("after_sandbox_s")),
    ("· container starts → GID seen", lambda r: r["gid_s"] - r["container_s"]),
    ("delete → pod gone", lambda r: r["delete_s"]),
]


def median(kind, runs, f):
    xs = [f(r) for r in runs if r["kind"] == kind and not r.get("warmup") and not r.get("failed")]
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def section(d):
    """The section's Markdown, markers included."""
    runs = d["runs"]
    med = {label: (median("roce", runs, f), median("chain", runs, f)) for label, f in ROWS}
    table = "\n".join(
        f"| {label} | {fmt(r)} | {fmt(c)} | {fmt(ratio(r, c))} |" for label, (r, c) in med.items()
    )
    ready_r, ready_c = med["apply → Ready"]
    gid_r, gid_c = med["apply → GID seen in the pod"]
    sb_r, sb_c = med["· sandbox (pause, pod network: Multus and every delegate)"]
    ipam_r, ipam_c = med["· · in it, nv-ipam's first call → its last answer"]
    measured = [r for r in runs if not r.get("warmup") and not r.get("failed")]
    pre_r, pre_c = med["· apply → sandbox begins (API server, scheduler, kubelet)"]
    rr = ratio(ready_r, ready_c)
    verdict = "**met**" if rr is not None and rr <= TARGET else "**missed**"
    ipam_ratio = ratio(med["· · in it, nv-ipam's first call → its last answer"][0],
                       med["· · in it, nv-ipam's first call → its last answer"][1])
    rails_note = (
        f"; the rails' own window in the sandbox (nv-ipam's first call → its last answer): {fmt(ipam_ratio)}×"
        if ipam_ratio is not None
        else ""
    )
    per_pod = "\n".join(
        f"| {r['pod']}{' (warm-up)' if r.get('warmup') else ''} | failed: {r['failed']} | | | | | | | |"
        if r.get("failed")
        else f"| {r['pod']}{' (warm-up)' if r.get('warmup') else ''} | {fmt(r['ready_s'])} | {fmt(r['gid_s'])} | "
        f"{fmt(r.get('sandbox_begin_s'))} | {fmt(r.get('sandbox_s'))} | {fmt(r['container_s'])} | "
        f"{fmt(r.get('ipam_window_s'))} | {r['gid_polls']} | {fmt(r['delete_s'])} |"
        for r in runs
    )
    failed = [r["pod"] for r in runs if r.get("failed") and not r.get("warmup")]
    counted = {k: sum(1 for r in runs if r["kind"] == k and not r.get("warmup") and not r.get("failed")) for k in ("roce", "chain")}
    failures = (
        f" **{len(failed)} measured pod(s) failed** ({', '.join(failed)}; below), so the medians are of "
        f"{counted['roce']} roce-ipvlan and {counted['chain']} chain pods."
        if failed
        else ""
    )
    # Where the difference is, and the floor: what roce-ipvlan's pod would need with a sandbox
    # that took no time at all (every phase but the sandbox is the cluster's, not the CNI's).
    where = ""
    if None not in (ready_r, ready_c, sb_r, sb_c):
        diff, sb_diff = ready_c - ready_r, sb_c - sb_r
        floor = ready_r - sb_r
        where = (
            f"\n**Where the time goes.** The chain's pod is Ready {diff:.2f} s later than roce-ipvlan's "
            f"(medians); its sandbox takes {sb_diff:.2f} s longer ({sb_c:.2f} s against {sb_r:.2f} s): "
            f"the pod network, where Multus runs the four NADs' chains one after another (per rail an "
            f"ipvlan ADD that calls nv-ipam, then tuning and sbr: 16 plugin processes, against one "
            f"roce-ipvlan ADD that calls nv-ipam for the 4 rails at once: 5). "
        )
        if None not in (ipam_r, ipam_c):
            where += (
                f"From nv-ipam's first call to its last answer, the window in which the rails are set up, "
                f"the chain takes {ipam_c:.2f} s and roce-ipvlan {ipam_r:.2f} s "
                f"({ipam_r / ipam_c:.2f}×); the rest of the sandbox, the chain's {sb_c - ipam_c:.2f} s and "
                f"roce-ipvlan's {sb_r - ipam_r:.2f} s, is the pause container, the cluster network's `eth0`, Multus "
                f"itself (a Go process that reads the pod and the NADs from the API server and writes "
                f"the pod's network-status back) and the first rail's start and the last rail's end. "
            )
        where += (
            f"Outside the sandbox the time is the cluster's and the same for both: before it (API server, scheduler, "
            f"the kubelet's pod worker) {fmt(pre_r)} s and {fmt(pre_c)} s, and from the sandbox to a "
            f"running container. A roce-ipvlan pod whose whole sandbox (pause, `eth0`, Multus, the "
            f"plugin) took no time would still be "
            f"Ready after {floor:.2f} s, {floor / ready_c:.2f}× the chain's: "
        )
        if floor / ready_c > TARGET:
            where += (
                f"above the {TARGET:.2f}× goal, so on this node no CNI plugin can reach it.\n"
            )
        else:
            where += f"under the {TARGET:.2f}× goal, so the goal is within the sandbox's reach.\n"
    if measured and all(r.get("gid_polls") == 1 for r in measured):
        where += (
            "Every pod read all its GIDs at its probe's first poll: the chain's GIDs too were in place "
            "before its container started, so *container starts → GID seen* is the probe's own start "
            "(one `ip` before its first read), not a wait for the kernel.\n"
        )
    host = d.get("host", {})
    machine = (
        f"Host: {host.get('cpu', 'unknown CPU')}, {host.get('cpus', '?')} CPUs, "
        f"{host.get('qemu', 'QEMU')}, **TCG** (no KVM); {host.get('other_qemu', '?')} other QEMU "
        f"process(es) running when the section started, {host.get('other_qemu_end', '?')} when it ended."
    )
    return f"""{BEGIN}
## Pod start on Kubernetes: one `rails` NAD against the chain's four

A pod on the node's {len(d['rails'])} rails ({', '.join(d['rails'])}), started with `kubectl apply`
on the one-node cluster of tests/k8s (Kubernetes {d['kubernetes']}, containerd, Multus thin,
nv-ipam; kernel {d['kernel']}, the {d['rdma_view']} view, {d['vcpus']} vCPUs), once through the seed's
chain ({d['chain']}: one NAD per rail, tuning with the field report's ARP sysctls) and once
through roce-ipvlan ({d['roce']}: `examples/pod-16-rails-one-nad.yaml`'s NAD), both from
`examples/a100-ippool.yaml`'s pool. {d['pods']} pods of each kind after {d['warmup']} warm-up
pod(s) of each, one at a time, the kinds interleaved ABBA; each pod deleted and gone before the
next.{failures} *Ready*: `kubectl wait --for=condition=Ready` returns (the test-pod image, already on the
node; no readiness probe). *GID seen*: the pod's own command, polling sysfs every 10 ms with
shell builtins, reads the RoCE v2 GID of every child's address on that child (roce-ipvlan: at
the index in the child's ifalias; the chain: in the rail device's first 64 slots); the VM's one
clock serves node and pod. The sandbox's begin and end are containerd's log lines for the pod's
RunPodSandbox. {machine} Every figure is an emulation figure: compare the ratios. Generated by
`make bench` or `make bench-k8s` ({d.get('date', 'date not recorded')}; bench/k8s-start.sh); raw numbers in
[`bench/k8s-start.json`](bench/k8s-start.json).

| median, s | roce-ipvlan | chain | roce / chain |
|---|---|---|---|
{table}

**apply → Ready: {fmt(rr)}× the chain's** (goal ≤ {TARGET:.2f}×: {verdict}); apply → GID seen in
the pod: {fmt(ratio(gid_r, gid_c))}×{rails_note}.
{where}
| pod | Ready, s | GID seen, s | sandbox begins, s | sandbox, s | container starts, s | nv-ipam window, s | GID polls | delete → gone, s |
|---|---|---|---|---|---|---|---|---|
{per_pod}
{END}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="bench/k8s-start.sh's numbers")
    ap.add_argument("--doc", required=True, help="the page to update in place")
    a = ap.parse_args()
    with open(a.json) as f:
        d = json.load(f)
    kinds = {r["kind"] for r in d.get("runs", []) if not r.get("warmup") and not r.get("failed")}
    if kinds != {"roce", "chain"}:
        sys.exit(f"k8s_start_report: {a.json} has no measured pods of both kinds")
    write_section(a.doc, section(d), BEGIN, END)


if __name__ == "__main__":
    main()
