//! The `roce-ipvlan` binary. Run by a container runtime (kubelet via Multus) with CNI_COMMAND
//! set, it is the CNI plugin; run by hand or in a pod, it offers a few subcommands.

const HELP: &str = "\
roce-ipvlan: CNI plugin giving a pod its own IPvlan L2 netdev (and RoCE v2 GID) on a RoCE rail.

As a CNI plugin it is run by a container runtime with CNI_COMMAND and the other CNI_* variables
set and the network configuration on stdin. See README.md and docs/configuration.md.

By hand:
  roce-ipvlan env [--format shell|json|nccl-conf]   NCCL/UCX settings for this pod's rails
  roce-ipvlan env --exec -- CMD [ARGS...]           run CMD with those settings (no shell)
  roce-ipvlan diagnose [--netns PATH | --pid PID] [--json]
                                                    why a pod sees zero or unusable RoCE GIDs
  roce-ipvlan fabric-check serve | PEER [--json]      which rails work between this pod and a
                                                    peer pod on another node, and why not
  roce-ipvlan validate FILE...                      check NetworkAttachmentDefinitions or configs
  roce-ipvlan install [--to DIR] [--wait]           copy this binary into DIR (default
                                                    /host/opt/cni/bin) atomically (DaemonSet)
  roce-ipvlan uninstall [--to DIR] [--wait]         remove DIR/roce-ipvlan (the DaemonSet's
                                                    uninstall mode, docs/deploy.md#uninstall)
  roce-ipvlan ready [--to DIR] [--rails LIST]       plugin installed and answering (readiness);
                                                    rail health, gating only with --rails
  roce-ipvlan --version                             plugin version, git commit, CNI versions
";

fn main() {
    if std::env::var_os("CNI_COMMAND").is_some() {
        std::process::exit(roce_ipvlan::run());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let code = match args.first().map(String::as_str) {
        // No CNI_COMMAND and no arguments: run as a plugin, which reports the missing
        // environment as a CNI error.
        None => roce_ipvlan::run(),
        Some("--version") | Some("-V") => {
            println!(
                "roce-ipvlan {} (commit {}, CNI {})",
                env!("CARGO_PKG_VERSION"),
                env!("ROCE_IPVLAN_COMMIT"),
                roce_ipvlan::protocol::cni::SUPPORTED_VERSIONS.join(", ")
            );
            0
        }
        Some("--help") | Some("-h") | Some("help") => {
            print!("{HELP}");
            0
        }
        Some("validate") => roce_ipvlan::subcommand::validate(rest),
        Some("install") => roce_ipvlan::subcommand::install(rest),
        Some("uninstall") => roce_ipvlan::subcommand::uninstall(rest),
        Some("ready") => roce_ipvlan::subcommand::ready(rest),
        Some("diagnose") => roce_ipvlan::subcommand::diagnose(rest),
        Some("env") => roce_ipvlan::subcommand::env(rest),
        Some("fabric-check") => roce_ipvlan::subcommand::fabric_check(rest),
        Some(other) => {
            eprintln!("roce-ipvlan: unknown command {other:?}\n\n{HELP}");
            2
        }
    };
    std::process::exit(code);
}
