//! The `roce-ipvlan-annotate` binary: the installer DaemonSet's `annotate` container, which
//! publishes the node's pods' RoCE GID indexes as their `roce-ipvlan.io/gids` annotation
//! (plugin/src/tools/annotate.rs, docs/deploy.md#gid-indexes-in-the-pod-object).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if matches!(
        args.first().map(String::as_str),
        Some("--version") | Some("-V")
    ) {
        println!(
            "roce-ipvlan-annotate {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            env!("ROCE_IPVLAN_COMMIT")
        );
        std::process::exit(0);
    }
    std::process::exit(roce_ipvlan::subcommand::annotate(&args));
}
