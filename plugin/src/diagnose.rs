//! `roce-ipvlan diagnose [--netns PATH | --pid PID] [--json] [--snapshot FILE]`: why a pod sees
//! zero or unusable RoCE GIDs.
//!
//! Three parts: `gather` reads the kernel into a [`snapshot::Snapshot`] (all the I/O),
//! `analyze` turns a snapshot into findings (pure, unit-tested on recorded fixtures), and this
//! file parses arguments and prints. `--json` prints the report and the snapshot it came from,
//! so a snapshot taken on a broken node can be replayed with `--snapshot FILE`.
//!
//! Exit status: 0 healthy, 1 a problem was found (a warning or an error), 2 diagnose itself
//! could not run (bad arguments, namespace not found).

pub mod analyze;
pub mod gather;
pub mod snapshot;

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::cli::{self, Long, Parsed, Short};
use analyze::{GidClass, Report, Severity};
use gather::Target;
use snapshot::Snapshot;

const USAGE: &str = "\
usage: roce-ipvlan diagnose [--netns PATH | --pid PID] [--json] [--snapshot FILE]

Reports the RDMA netns mode, which ib_core runs (kernel's own or DOCA-OFED), every RDMA port
with its GID table as seen from the namespace, the namespace's netdevs on rails, and verdicts
with fixes. Without --netns/--pid it looks at its own namespace (run it inside the pod, or on
the node for the node's view).

  --netns PATH     a network namespace path (/run/netns/NAME, /proc/PID/ns/net)
  --pid PID        the network namespace of process PID (e.g. the pod's pause process)
  --json           one JSON document: {\"report\": ..., \"snapshot\": ...}
  --snapshot FILE  analyze a snapshot saved from --json output (its \"snapshot\" member)

Exit status: 0 healthy, 1 a problem was found, 2 diagnose could not run.
";

#[derive(Debug, PartialEq)]
struct Args {
    target: Option<TargetArg>,
    json: bool,
    snapshot: Option<PathBuf>,
}

#[derive(Debug, PartialEq)]
enum TargetArg {
    Netns(PathBuf),
    Pid(u32),
}

fn parse_args(args: &[String]) -> cli::Outcome<Args> {
    cli::parse(args, |p| {
        let mut parsed = Args {
            target: None,
            json: false,
            snapshot: None,
        };
        while let Some(arg) = p.next()? {
            let target = match arg {
                Short('h') | Long("help") => return Ok(Parsed::Help),
                Long("json") => {
                    parsed.json = true;
                    continue;
                }
                Long("snapshot") => {
                    parsed.snapshot = Some(PathBuf::from(cli::string(p)?));
                    continue;
                }
                Long("netns") => TargetArg::Netns(PathBuf::from(cli::string(p)?)),
                Long("pid") => TargetArg::Pid(cli::parsed(p, "--pid")?),
                arg => return Err(cli::unexpected(arg)),
            };
            if parsed.target.is_some() {
                return Err(cli::Error::new("give at most one of --netns and --pid"));
            }
            parsed.target = Some(target);
        }
        if parsed.snapshot.is_some() && parsed.target.is_some() {
            return Err(cli::Error::new(
                "--snapshot analyzes a saved snapshot; it takes no --netns/--pid",
            ));
        }
        Ok(Parsed::Run(parsed))
    })
}

/// Entry point of the subcommand; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let args = match cli::args_or_exit("diagnose", USAGE, parse_args(args)) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let snapshot = match &args.snapshot {
        Some(path) => load_snapshot(path),
        None => {
            let target = match &args.target {
                None => Target::Current,
                Some(TargetArg::Netns(path)) => Target::Path(path.clone()),
                Some(TargetArg::Pid(pid)) => Target::Pid(*pid),
            };
            gather::gather(&target).map_err(|e| e.to_string())
        }
    };
    let snapshot = match snapshot {
        Ok(snapshot) => snapshot,
        Err(err) => {
            eprintln!("roce-ipvlan diagnose: {err}");
            return 2;
        }
    };
    let report = analyze::analyze(&snapshot);
    if args.json {
        let doc = serde_json::json!({ "report": report, "snapshot": snapshot });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("the report always serializes")
        );
    } else {
        print!("{}", render(&report, &snapshot));
    }
    if report.healthy {
        0
    } else {
        1
    }
}

fn load_snapshot(path: &std::path::Path) -> Result<Snapshot, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    // Accept both the whole --json output and its "snapshot" member alone.
    let value = match value.get("snapshot") {
        Some(inner) => inner.clone(),
        None => value,
    };
    serde_json::from_value(value).map_err(|e| {
        format!(
            "{} is not a diagnose snapshot (expected --json output): {e}",
            path.display()
        )
    })
}

/// The human-readable report.
fn render(report: &Report, snap: &Snapshot) -> String {
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

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let pid42 = Parsed::Run(Args {
            target: Some(TargetArg::Pid(42)),
            json: true,
            snapshot: None,
        });
        assert_eq!(
            parse_args(&args(&["--pid", "42", "--json"])).unwrap(),
            pid42
        );
        assert_eq!(parse_args(&args(&["--json", "--pid=42"])).unwrap(), pid42);
        let Parsed::Run(netns) = parse_args(&args(&["--netns=/run/netns/p"])).unwrap() else {
            panic!("not a help request");
        };
        assert_eq!(netns.target, Some(TargetArg::Netns("/run/netns/p".into())));
        assert_eq!(parse_args(&args(&["-h"])).unwrap(), Parsed::Help);
        for bad in [
            &["--pid"][..],
            &["--pid", "x"],
            &["--pid", "1", "--netns", "/x"],
            &["--snapshot", "f", "--pid", "1"],
            &["--bogus"],
            &["--json=yes"],
            &["extra"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn text_report_of_a_fixture() {
        let snap: Snapshot = serde_json::from_str(include_str!(
            "diagnose/fixtures/ofed-pod-no-rail-netdev.json"
        ))
        .unwrap();
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
