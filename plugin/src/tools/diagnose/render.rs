//! The human-readable report of `diagnose` (the default; `--json` prints the data instead).

use std::fmt::Write as _;

use super::report::{GidClass, Report, Severity};
use super::snapshot::{self, Snapshot};

/// The human-readable report.
pub(super) fn render(report: &Report, snap: &Snapshot) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "roce-ipvlan diagnose: {}", report.target);
    let _ = writeln!(
        w,
        "ib_core: {} ({})",
        report.ib_core.flavor,
        report.ib_core.evidence.join("; ")
    );
    let _ = writeln!(
        w,
        "RDMA netns mode: {}",
        match report.netns_mode {
            Some(snapshot::NetnsModeName::Shared) => "shared",
            Some(snapshot::NetnsModeName::Exclusive) => "exclusive",
            None => "unknown",
        }
    );
    match (&snap.host, &snap.host_unavailable) {
        (Some(_), _) => {
            let _ = writeln!(w, "host view: read from PID 1's netns for comparison");
        }
        (None, Some(why)) => {
            let _ = writeln!(w, "host view: none ({why})");
        }
        (None, None) => {}
    }
    let _ = writeln!(w);
    for port in &report.ports {
        let here = if port.netdevs_here.is_empty() {
            "no netdev here".to_owned()
        } else {
            format!("here: {}", port.netdevs_here.join(", "))
        };
        let _ = writeln!(
            w,
            "{}: {}, {}, rail {}; {here}",
            port.name(),
            port.link_layer.as_deref().unwrap_or("?"),
            port.state.as_deref().unwrap_or("state ?"),
            port.rail.as_deref().unwrap_or("?"),
        );
        let mut empty = 0;
        let mut unknown = 0;
        for gid in &port.gids {
            match gid.class {
                GidClass::Empty => empty += 1,
                GidClass::EmptyOrHidden => unknown += 1,
                class => {
                    let value = gid
                        .slot
                        .gid
                        .map_or_else(|| "(zeros)".to_owned(), |g| g.to_string());
                    let mut line = format!(
                        "  gid {:>3}  {value:<40} {:<11} {:<12} {class}",
                        gid.slot.index,
                        gid.slot
                            .gid_type
                            .as_ref()
                            .map_or_else(|| "-".to_owned(), |t| t.to_string()),
                        gid.slot.ndev.as_deref().unwrap_or("-"),
                    );
                    if let (Some(host), Some(ndev)) = (gid.host_gid, &gid.host_ndev) {
                        let _ = write!(line, " (host: {host} on {ndev})");
                    }
                    let _ = writeln!(w, "{}", line.trim_end());
                }
            }
        }
        if empty + unknown > 0 {
            let mut parts = Vec::new();
            if empty > 0 {
                parts.push(format!("{empty} empty"));
            }
            if unknown > 0 {
                parts.push(format!("{unknown} zero (empty or hidden)"));
            }
            let _ = writeln!(w, "  … {} slots", parts.join(", "));
        }
    }
    if !report.netdevs.is_empty() {
        let _ = writeln!(w, "\nnetdevs on rails in this namespace:");
        for n in &report.netdevs {
            let on = match (&n.rail, &n.rdma_port) {
                (Some(rail), Some(port)) => format!("rail {rail} ({port})"),
                (None, Some(port)) => port.clone(),
                _ => "no RDMA port".to_owned(),
            };
            let gid = n.recommended_gid_index.map_or_else(
                || "no usable RoCE v2 GID".to_owned(),
                |i| format!("RoCE v2 GID index {i}"),
            );
            let _ = writeln!(
                w,
                "  {} ({}) on {on}: {gid}",
                n.name,
                n.kind.as_deref().unwrap_or("device")
            );
            for a in &n.addresses {
                let mut tags = Vec::new();
                if let Some(i) = a.roce_v2_gid_index {
                    tags.push(format!("gid {i}"));
                }
                for (on, tag) in [
                    (a.slaac, "slaac"),
                    (a.placeholder, "placeholder?"),
                    (a.tentative, "TENTATIVE"),
                    (a.dadfailed, "DADFAILED"),
                ] {
                    if on {
                        tags.push(tag.to_owned());
                    }
                }
                let _ = writeln!(w, "    {} {}", a.address, tags.join(" "));
            }
        }
    }
    let _ = writeln!(w, "\nfindings:");
    for f in &report.findings {
        let _ = writeln!(w, "  {:<7} {}", f.severity.to_string(), f.message);
        if let Some(fix) = &f.fix {
            let _ = writeln!(w, "          fix: {fix}");
        }
    }
    let problems = report
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .count();
    if report.healthy {
        let _ = writeln!(w, "\nverdict: healthy");
    } else {
        let _ = writeln!(w, "\nverdict: {problems} problem(s) found");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::diagnose::analyze;

    #[test]
    fn text_report_of_a_fixture() {
        let snap: Snapshot =
            serde_json::from_str(include_str!("fixtures/ofed-pod-no-rail-netdev.json")).unwrap();
        let text = render(&analyze::analyze(&snap), &snap);
        assert!(
            text.contains("mlx5_6 port 1: Ethernet, 4: ACTIVE, rail rdma6; no netdev here"),
            "{text}"
        );
        assert!(text.contains("gid   3  (zeros)"), "{text}");
        assert!(
            text.contains("hidden (host: ::ffff:10.224.12.143 on rdma6)"),
            "{text}"
        );
        assert!(text.contains("… 2 zero (empty or hidden) slots"), "{text}");
        assert!(text.ends_with("verdict: 2 problem(s) found\n"), "{text}");
    }
}
