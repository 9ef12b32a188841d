//! `roce-ipvlan diagnose [--netns PATH | --pid PID] [--json] [--snapshot FILE]`: why a pod sees
//! zero or unusable RoCE GIDs.
//!
//! `gather` reads the kernel into a [`snapshot::Snapshot`] (all the I/O); `analyze` turns a
//! snapshot into a `report::Report` (pure, unit-tested on recorded fixtures): `classify` says
//! what each port, GID and netdev is, `findings` what is wrong and how to fix it; `render`
//! prints the report for people; this file parses arguments. `--json` prints the report and the
//! snapshot it came from, so a snapshot taken on a broken node can be replayed with
//! `--snapshot FILE`.
//!
//! Exit status: 0 healthy, 1 a problem was found (a warning or an error), 2 diagnose itself
//! could not run (bad arguments, namespace not found).

pub mod analyze;
mod classify;
mod findings;
pub mod gather;
mod render;
mod report;
pub mod snapshot;

use std::path::PathBuf;

use crate::tools::cli::{self, Long, Parsed, Short};
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
        print!("{}", render::render(&report, &snapshot));
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
}
