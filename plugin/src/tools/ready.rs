//! `roce-ipvlan ready [--to DIR] [--name NAME] [--rails LIST]`: is the plugin installed on this
//! node, and how healthy are its rails? The installer DaemonSet's readiness probe and, from
//! `install --wait`, a line in its log whenever the answer changes. Multus never sends STATUS
//! for a NAD, so the installer's log is where an operator sees rail health.
//!
//! Readiness is what the installer owns: the installed plugin is this binary and answers
//! (CNI_COMMAND=VERSION). Rail health does not gate it unless `--rails` names the rails: a node
//! has RoCE ports that are no rails (a front-end or storage port, an InfiniBand-only ConnectX
//! that the NIC label matches too), and a pod counted unready for them stalls every rollout of
//! the DaemonSet (`maxUnavailable`) and `kubectl rollout status`. With `--rails`, the operator
//! said which ports are rails: those, and the RDMA netns mode, gate readiness.
//!
//! Rail health, read-only, in the calling process's network namespace (the DaemonSet runs with
//! hostNetwork, so that is the node's): the RDMA subsystem's netns mode is shared; every rail
//! (each RDMA port with an Ethernet link layer whose netdev is here, or the netdevs `--rails`
//! names) is up, its RDMA port ACTIVE, and its GID table has room for a child (gid_capacity.rs). The
//! words are those of STATUS and `diagnose`. Reads sysfs and RDMA netlink only (a rail's
//! admin state from its sysfs `flags`, not an rtnetlink dump: the same bit, and it keeps the
//! route netlink code out of `roce-ipvlan-annotate`, whose `/metrics` reads the rails here
//! too): no capability is needed, and no namespace is entered.
//!
//! Exit status: 0 ready, 1 not ready (each problem on a line), 2 bad arguments.

use std::path::{Path, PathBuf};

use crate::attach::gid_capacity::{self, Usage};
use crate::attach::pod_record;
use crate::kernel::rdma::{self, NetnsMode, RdmaPort, Sysfs};
use crate::tools::cli::{self, Long, Parsed, Short};

/// Where the DaemonSet mounts the host's /opt/cni/bin: `install` copies the binary there, and
/// `ready` checks the copy.
pub const DEFAULT_DIR: &str = "/host/opt/cni/bin";
pub const DEFAULT_NAME: &str = "roce-ipvlan";

/// What was read from the node: the input of [`problems`].
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub netns_mode: Result<NetnsMode, String>,
    pub rails: Vec<RailFacts>,
    /// Rails named with `--rails` that have no RDMA port in this namespace.
    pub missing_rails: Vec<String>,
    pub binary: BinaryFacts,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RailFacts {
    pub netdev: String,
    pub port: RdmaPort,
    /// None: no such link (it went away while being read).
    pub up: Option<bool>,
    pub state: Result<String, String>,
    /// The GID table, counted as ADD counts it (attach/gid_capacity.rs). Slots hidden by
    /// DOCA-OFED (GIDs of children in pods) read as zeros here, and the installer does not
    /// mount the attachment records, so `used` is a lower bound there.
    pub gids: Result<Usage, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum BinaryFacts {
    /// This binary, and it answers CNI_COMMAND=VERSION.
    Same,
    Missing(PathBuf),
    Differs(PathBuf),
    /// This binary, but running it fails (not executable, a noexec mount): Multus could not
    /// run it either.
    Silent(PathBuf, String),
    Unreadable(String),
}

/// What keeps the installed plugin from working: the installer's own job; empty when it is in
/// place and answers.
pub fn plugin_problems(facts: &NodeFacts) -> Vec<String> {
    match &facts.binary {
        BinaryFacts::Same => vec![],
        BinaryFacts::Missing(path) => vec![format!(
            "the plugin binary {} is missing: Multus cannot run roce-ipvlan on this node",
            path.display()
        )],
        BinaryFacts::Differs(path) => vec![format!(
            "the plugin binary {} is not this image's: another version or a changed file",
            path.display()
        )],
        BinaryFacts::Silent(path, e) => vec![format!(
            "the plugin binary {} is this image's but does not answer CNI_COMMAND=VERSION \
             ({e}): Multus cannot run it either; check its mode (0755) and that the directory is \
             not mounted noexec",
            path.display()
        )],
        BinaryFacts::Unreadable(e) => vec![e.clone()],
    }
}

/// Every reason the node's rails cannot serve attachments; empty when they can.
pub fn rail_problems(facts: &NodeFacts) -> Vec<String> {
    let mut out = Vec::new();
    match &facts.netns_mode {
        Ok(NetnsMode::Shared) => {}
        Ok(NetnsMode::Exclusive) => out.push(
            "RDMA subsystem netns mode: exclusive: each RDMA device then belongs to one \
             namespace and pods cannot use the rails' devices; roce-ipvlan needs shared \
             (rdma system set netns shared)"
                .into(),
        ),
        Err(e) => out.push(format!(
            "RDMA subsystem netns mode: unknown (RDMA netlink did not answer): {e}"
        )),
    }
    for name in &facts.missing_rails {
        out.push(format!(
            "rail {name} has no RDMA port in this network namespace: expected a netdev of that \
             name bound to an RDMA device; check `rdma link show` and --rails"
        ));
    }
    if facts.rails.is_empty() && facts.missing_rails.is_empty() {
        out.push(
            "no rail: no RDMA port with an Ethernet link layer has its netdev in this network \
             namespace (the installer needs hostNetwork: true; check `rdma link show`)"
                .into(),
        );
    }
    for rail in &facts.rails {
        let name = format!("rail {} ({})", rail.netdev, rail.port);
        match rail.up {
            Some(true) => {}
            Some(false) => out.push(format!(
                "rail {} is down: pods already on it have no connectivity through it and new \
                 ones cannot attach; bring it up (ip link set {} up)",
                rail.netdev, rail.netdev
            )),
            None => out.push(format!("{name}: the netdev went away while being read")),
        }
        match &rail.state {
            Ok(state) if rdma::port_active(state) => {}
            Ok(state) => out.push(format!("{name} is {state}, not ACTIVE")),
            Err(e) => out.push(format!("{name} is in an unknown state, not ACTIVE: {e}")),
        }
        match rail.gids {
            Ok(ref usage) if usage.free() < usage.types => out.push(format!(
                "the GID table of {name} is full ({}): a new child's GIDs cannot be added, so \
                 ADD fails with 110",
                usage.describe()
            )),
            Ok(_) => {}
            Err(ref e) => out.push(format!("cannot read the GID table of {}: {e}", rail.port)),
        }
    }
    out
}

/// Reads the node. `rails`: the rail netdevs to check, or None for every RoCE port's netdev.
pub fn gather(rails: Option<&[String]>, installed: &Path) -> NodeFacts {
    let netns_mode = rdma::netns_mode().map_err(|e| e.to_string());
    let (rails, missing_rails, ports_error) = rail_facts(rails, &gid_capacity::records());
    let mut facts = NodeFacts {
        netns_mode,
        rails,
        missing_rails,
        binary: binary_facts(installed),
    };
    if let Some(e) = ports_error {
        // The netns mode read failed the same way, most likely; say it once.
        if facts.netns_mode.is_ok() {
            facts.netns_mode = Err(format!("listing RDMA ports: {e}"));
        }
    }
    facts
}

/// The rails as this namespace shows them (see [`gather`]), their GID tables counted with
/// `records`; the `rails` named that have no RDMA port here; why the ports could not be listed.
/// Also the installer's `/metrics` (tools/metrics.rs), which passes the records it reads.
pub fn rail_facts(
    rails: Option<&[String]>,
    records: &[pod_record::Record],
) -> (Vec<RailFacts>, Vec<String>, Option<String>) {
    let sysfs = Sysfs::system();
    let (ports, ports_error) = match rdma::netlink_ports() {
        Ok(p) => (p, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let mut found: Vec<(String, RdmaPort)> = ports
        .into_iter()
        .filter_map(|p| Some((p.ndev_name?, p.port)))
        .filter(|(netdev, port)| match rails {
            Some(names) => names.contains(netdev),
            None => sysfs.link_layer(port).is_ok_and(|l| l == "Ethernet"),
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let missing_rails: Vec<String> = rails
        .unwrap_or_default()
        .iter()
        .filter(|name| !found.iter().any(|(n, _)| n == *name))
        .cloned()
        .collect();
    let rails = found
        .into_iter()
        .map(|(netdev, port)| (sysfs.netdev_admin_up(&netdev), (netdev, port)))
        .map(|(up, (netdev, port))| RailFacts {
            state: sysfs.port_state(&port).map_err(|e| e.to_string()),
            gids: gid_capacity::measure(&sysfs, &port, records).map_err(|e| e.to_string()),
            netdev,
            port,
            up,
        })
        .collect();
    (rails, missing_rails, ports_error)
}

fn binary_facts(installed: &Path) -> BinaryFacts {
    let this = match std::env::current_exe().and_then(std::fs::read) {
        Ok(b) => b,
        Err(e) => return BinaryFacts::Unreadable(format!("cannot read this binary: {e}")),
    };
    match std::fs::read(installed) {
        Ok(b) if b == this => match answers(installed) {
            Ok(()) => BinaryFacts::Same,
            Err(e) => BinaryFacts::Silent(installed.to_path_buf(), e),
        },
        Ok(_) => BinaryFacts::Differs(installed.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            BinaryFacts::Missing(installed.to_path_buf())
        }
        Err(e) => BinaryFacts::Unreadable(format!("cannot read {}: {e}", installed.display())),
    }
}

/// Runs the installed plugin as Multus would, with CNI_COMMAND=VERSION (nothing on stdin, no
/// other environment): it must exit 0 with its supported versions.
fn answers(installed: &Path) -> Result<(), String> {
    let out = std::process::Command::new(installed)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && stdout.contains("supportedVersions") {
        Ok(())
    } else {
        Err(format!("{}, output {:?}", out.status, stdout.trim()))
    }
}

/// The verdict and the problems, as the probe prints them and the installer logs them. Rail
/// problems gate readiness only when `rails_gate` (the operator named the rails with
/// `--rails`); otherwise they are reported after the verdict.
pub fn report(facts: &NodeFacts, rails_gate: bool) -> (bool, String) {
    let plugin = plugin_problems(facts);
    let rails = rail_problems(facts);
    let mut gating = plugin;
    if rails_gate {
        gating.extend(rails.iter().cloned());
    }
    let list = |text: &mut String, problems: &[String]| {
        for p in problems {
            text.push_str("\n  ");
            text.push_str(p);
        }
    };
    let ok = gating.is_empty();
    let mut text = if !ok {
        format!("not ready: {} problem(s)", gating.len())
    } else if rails.is_empty() {
        let names: Vec<&str> = facts.rails.iter().map(|r| r.netdev.as_str()).collect();
        return (true, format!("ready: rails {}", names.join(", ")));
    } else {
        "ready: the plugin is installed and answers".to_string()
    };
    list(&mut text, &gating);
    if !rails_gate && !rails.is_empty() {
        text.push_str(&format!(
            "\nrail health (does not gate readiness without --rails): {} problem(s)",
            rails.len()
        ));
        list(&mut text, &rails);
    }
    (ok, text)
}

/// A `--rails` list: comma-separated netdev names (`install` passes its own on to `ready`).
pub(crate) fn rail_list(text: &str) -> Result<Vec<String>, cli::Error> {
    let list: Vec<String> = text
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if list.is_empty() {
        return Err(cli::Error::new(
            "--rails needs a comma-separated list of netdevs",
        ));
    }
    Ok(list)
}

/// Parsed `ready` arguments: the installed binary's path and the rails to check.
fn parse_args(args: &[String]) -> cli::Outcome<(PathBuf, Option<Vec<String>>)> {
    cli::parse(args, |p| {
        let mut dir = PathBuf::from(DEFAULT_DIR);
        let mut name = DEFAULT_NAME.to_string();
        let mut rails = None;
        while let Some(arg) = p.next()? {
            match arg {
                Long("to") => dir = PathBuf::from(cli::string(p)?),
                Long("name") => name = cli::string(p)?,
                Long("rails") => rails = Some(rail_list(&cli::string(p)?)?),
                Short('h') | Long("help") => return Ok(Parsed::Help),
                arg => return Err(cli::unexpected(arg)),
            }
        }
        Ok(Parsed::Run((dir.join(name), rails)))
    })
}

pub fn main(args: &[String]) -> i32 {
    const USAGE: &str =
        "usage: roce-ipvlan ready [--to DIR] [--name NAME] [--rails rdma0,rdma1,...]\n\
        The installer's readiness probe: ready when DIR/NAME (default \
        /host/opt/cni/bin/roce-ipvlan) is this binary and answers CNI_COMMAND=VERSION. Also \
        reports rail health (RDMA netns mode shared, every rail up with its RDMA port ACTIVE \
        and a free GID slot), which gates readiness only for the rails --rails names. \
        Read-only.\n\
        Exit status: 0 ready, 1 not ready, 2 bad arguments.";
    let (installed, rails) = match cli::args_or_exit("ready", USAGE, parse_args(args)) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let (ok, text) = report(&gather(rails.as_deref(), &installed), rails.is_some());
    println!("{text}");
    i32::from(!ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(visible: usize, slots: usize) -> Usage {
        Usage {
            port: RdmaPort {
                device: "rxe0".into(),
                port: 1,
            },
            slots,
            visible,
            hidden: 0,
            hidden_children: 0,
            types: 2,
        }
    }

    fn rail(netdev: &str) -> RailFacts {
        RailFacts {
            netdev: netdev.into(),
            port: RdmaPort {
                device: format!("rxe_{netdev}"),
                port: 1,
            },
            up: Some(true),
            state: Ok("4: ACTIVE".into()),
            gids: Ok(usage(2, 16)),
        }
    }

    fn healthy() -> NodeFacts {
        NodeFacts {
            netns_mode: Ok(NetnsMode::Shared),
            rails: vec![rail("rdma0"), rail("rdma1")],
            missing_rails: vec![],
            binary: BinaryFacts::Same,
        }
    }

    /// Every problem, plugin first, as the probe lists them with --rails.
    fn problems(f: &NodeFacts) -> Vec<String> {
        let mut p = plugin_problems(f);
        p.extend(rail_problems(f));
        p
    }

    #[test]
    fn a_healthy_node_is_ready() {
        assert_eq!(problems(&healthy()), Vec::<String>::new());
        for gate in [false, true] {
            assert_eq!(
                report(&healthy(), gate),
                (true, "ready: rails rdma0, rdma1".into())
            );
        }
    }

    /// Rail health gates readiness only for the rails the operator named: an unused port
    /// that is down must not stall the DaemonSet's rollout.
    #[test]
    fn rail_problems_gate_readiness_only_with_rails() {
        let mut f = healthy();
        f.rails[1].up = Some(false);
        let (ok, text) = report(&f, false);
        assert!(ok, "{text}");
        assert_eq!(
            text.lines().take(3).collect::<Vec<_>>(),
            [
                "ready: the plugin is installed and answers",
                "rail health (does not gate readiness without --rails): 1 problem(s)",
                "  rail rdma1 is down: pods already on it have no connectivity through it and \
                 new ones cannot attach; bring it up (ip link set rdma1 up)",
            ]
        );
        let (ok, text) = report(&f, true);
        assert!(!ok);
        assert!(
            text.starts_with("not ready: 1 problem(s)\n  rail rdma1 is down"),
            "{text}"
        );
        assert!(!text.contains("rail health"), "{text}");
        // An InfiniBand-only node: no rail at all, still ready without --rails.
        let mut f = healthy();
        f.rails.clear();
        f.netns_mode = Ok(NetnsMode::Exclusive);
        let (ok, text) = report(&f, false);
        assert!(
            ok && text.contains("2 problem(s)\n  RDMA subsystem netns mode"),
            "{text}"
        );
        // The plugin is the installer's own: it gates readiness either way.
        let mut f = healthy();
        f.binary = BinaryFacts::Silent("/d/roce-ipvlan".into(), "exit status: 126".into());
        let (ok, text) = report(&f, false);
        assert!(!ok);
        assert!(
            text.starts_with("not ready: 1 problem(s)\n  the plugin binary /d/roce-ipvlan is \
                              this image's but does not answer CNI_COMMAND=VERSION (exit status: 126)"),
            "{text}"
        );
    }

    #[test]
    fn each_problem_is_named_in_the_words_of_status_and_diagnose() {
        let mut f = healthy();
        f.rails[0].up = Some(false);
        f.rails[1].state = Ok("1: DOWN".into());
        let p = problems(&f);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("rail rdma0 is down: "), "{p:?}");
        assert!(
            p[0].ends_with("bring it up (ip link set rdma0 up)"),
            "{p:?}"
        );
        assert_eq!(p[1], "rail rdma1 (rxe_rdma1 port 1) is 1: DOWN, not ACTIVE");
        let (ok, text) = report(&f, true);
        assert!(!ok);
        assert!(
            text.starts_with("not ready: 2 problem(s)\n  rail rdma0 is down"),
            "{text}"
        );

        let mut f = healthy();
        f.rails[0].state = Ok("5: ACTIVE_DEFER".into());
        f.rails[1].gids = Ok(usage(15, 16));
        f.netns_mode = Ok(NetnsMode::Exclusive);
        f.binary = BinaryFacts::Differs("/host/opt/cni/bin/roce-ipvlan".into());
        let p = problems(&f);
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p[0].contains("is not this image's"), "{p:?}");
        assert!(
            p[1].starts_with("RDMA subsystem netns mode: exclusive"),
            "{p:?}"
        );
        assert!(p[2].contains("ACTIVE_DEFER, not ACTIVE"), "{p:?}");
        assert!(p[3].contains("is full (15 of 16 slots used"), "{p:?}");
    }

    #[test]
    fn no_rail_or_a_named_rail_missing_is_a_rail_problem() {
        let mut f = healthy();
        f.rails.clear();
        assert!(problems(&f)[0].starts_with("no rail: "));
        f.missing_rails = vec!["rdma7".into()];
        let p = problems(&f);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("rail rdma7 has no RDMA port"), "{p:?}");
        f.binary = BinaryFacts::Missing("/x/roce-ipvlan".into());
        assert!(problems(&f)[0].contains("/x/roce-ipvlan is missing"));
    }

    #[test]
    fn arguments() {
        let args = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let d_rails = Parsed::Run((
            PathBuf::from("/d/roce-ipvlan"),
            Some(vec!["rdma0".into(), "rdma1".into()]),
        ));
        assert_eq!(
            parse_args(&args(&["--to", "/d", "--rails", "rdma0, rdma1"])).unwrap(),
            d_rails
        );
        assert_eq!(
            parse_args(&args(&["--to=/d", "--rails=rdma0,rdma1"])).unwrap(),
            d_rails
        );
        assert_eq!(
            parse_args(&[]).unwrap(),
            Parsed::Run((PathBuf::from("/host/opt/cni/bin/roce-ipvlan"), None))
        );
        assert_eq!(parse_args(&args(&["--help"])).unwrap(), Parsed::Help);
        assert!(parse_args(&args(&["--rails", ","])).is_err());
        assert!(parse_args(&args(&["--to"])).is_err());
        assert!(parse_args(&args(&["--bogus"])).is_err());
    }
}
