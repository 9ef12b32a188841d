//! The `roce-ipvlan` binary: a CNI plugin, run by the container runtime (kubelet via Multus).

const HELP: &str = "\
roce-ipvlan: CNI plugin giving a pod its own IPvlan L2 netdev (and RoCE v2 GID) on a RoCE rail.

It is run by a container runtime with CNI_COMMAND and the other CNI_* variables set and the
network configuration on stdin. See README.md and docs/configuration.md.

  roce-ipvlan --version    print the plugin version and the CNI versions it supports
";

fn main() {
    if std::env::var_os("CNI_COMMAND").is_none() {
        match std::env::args().nth(1).as_deref() {
            Some("--version") | Some("-V") => {
                println!(
                    "roce-ipvlan {} (CNI {})",
                    env!("CARGO_PKG_VERSION"),
                    roce_ipvlan::cni::SUPPORTED_VERSIONS.join(", ")
                );
                return;
            }
            Some("--help") | Some("-h") => {
                print!("{HELP}");
                return;
            }
            _ => {}
        }
    }
    std::process::exit(roce_ipvlan::run());
}
