//! Reads the [`Snapshot`]: everything `diagnose` looks at, and nothing else.
//!
//! Namespace rules: RDMA netlink, rtnetlink and the GID table are read from threads inside the
//! target namespace (netns.rs), because the kernel answers each of them for the caller's
//! namespace: RDMA netlink lists only the devices the namespace may use (exclusive mode) and
//! names a port's netdev only to its own namespace, and DOCA-OFED's GID check compares the GID's
//! netdev with the *calling thread's* namespace. `/sys` is this process's mount, so it shows the
//! host's devices when run on the node (in exclusive mode, a device moved into a pod is missing
//! from it; RDMA netlink still lists it).

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::sys::stat::fstat;

use super::snapshot::{
    Address, Device, HostLink, HostView, IbCoreFacts, Netdev, NetnsModeName, Port, Snapshot,
};
use crate::kernel::netlink::{AddressFlags, RouteSocket};
use crate::kernel::netns::Netns;
use crate::kernel::rdma::{self, NetnsMode, RdmaPort, Sysfs};
use crate::protocol::error::{Error, Result};

/// Which namespace to diagnose.
#[derive(Debug, Clone)]
pub enum Target {
    /// This process's own netns (run inside a pod, or on the node for the node's view).
    Current,
    Path(PathBuf),
    Pid(u32),
}

impl Target {
    fn path(&self) -> PathBuf {
        match self {
            Target::Current => PathBuf::from("/proc/self/ns/net"),
            Target::Path(p) => p.clone(),
            Target::Pid(pid) => PathBuf::from(format!("/proc/{pid}/ns/net")),
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Current => "this process's network namespace".into(),
            Target::Path(p) => format!("netns {}", p.display()),
            Target::Pid(pid) => format!("network namespace of pid {pid}"),
        }
    }
}

const SYS: &str = "/sys";

/// Reads everything. Fails only when the target namespace cannot be opened; every other failed
/// read lands in `Snapshot::errors` and the diagnosis goes on.
pub fn gather(target: &Target) -> Result<Snapshot> {
    let ns = Netns::open(&target.path())
        .map_err(|e| Error::io(format!("cannot read the {}", target.describe()), e))?;
    let mut errors = Vec::new();
    let pid1 = Netns::open(Path::new("/proc/1/ns/net")).map_err(|e| e.to_string());
    let (host_ns, target_is_pid1, host_unavailable) = match pid1 {
        Ok(pid1) if same_ns(&pid1, &ns) => (None, true, None),
        Ok(pid1) => (Some(pid1), false, None),
        Err(err) => (None, false, Some(err)),
    };

    let (netns_mode, devices) = ns.run(|| rdma_view(&mut errors))?;
    let netdevs = netdevs_in(&ns);
    let host_links = host_ns.as_ref().map(netdevs_in);
    let netdevs = netdevs.unwrap_or_else(|err| {
        errors.push(format!("listing the netdevs of the target: {err}"));
        Vec::new()
    });

    let mut host_unavailable = host_unavailable;
    let host = match (host_ns, host_links) {
        (Some(host_ns), Some(links)) => {
            let mut host_errors = Vec::new();
            let devices = host_ns.run(|| rdma_view(&mut host_errors).1);
            match (devices, links) {
                (Ok(devices), Ok(links)) => {
                    errors.extend(host_errors.into_iter().map(|e| format!("host view: {e}")));
                    Some(HostView {
                        devices,
                        links: links
                            .into_iter()
                            .map(|n| HostLink {
                                index: n.index,
                                name: n.name,
                            })
                            .collect(),
                    })
                }
                (Err(err), _) | (_, Err(err)) => {
                    host_unavailable = Some(format!("cannot read PID 1's netns: {err}"));
                    None
                }
            }
        }
        _ => None,
    };

    Ok(Snapshot {
        target: target.describe(),
        target_is_pid1_netns: target_is_pid1,
        ib_core: ib_core_facts(Path::new(SYS)),
        netns_mode,
        devices,
        host,
        host_unavailable,
        netdevs,
        errors,
    })
}

fn same_ns(a: &Netns, b: &Netns) -> bool {
    match (fstat(a.fd().as_fd()), fstat(b.fd().as_fd())) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// `/sys/module` facts; see `analyze::classify_ib_core` for what they mean.
pub fn ib_core_facts(sys: &Path) -> IbCoreFacts {
    let module = sys.join("module/ib_core");
    IbCoreFacts {
        present: module.is_dir(),
        loadable: module.join("initstate").exists(),
        version: read_trimmed(&module.join("version")),
        srcversion: read_trimmed(&module.join("srcversion")),
        taint: read_trimmed(&module.join("taint")),
        mlx_compat: sys.join("module/mlx_compat").is_dir(),
        netns_mode_param: read_trimmed(&module.join("parameters/netns_mode")),
    }
}

/// The netns mode and the RDMA devices as the calling thread's namespace sees them.
fn rdma_view(errors: &mut Vec<String>) -> (Option<NetnsModeName>, Vec<Device>) {
    let mode = match rdma::netns_mode() {
        Ok(NetnsMode::Shared) => Some(NetnsModeName::Shared),
        Ok(NetnsMode::Exclusive) => Some(NetnsModeName::Exclusive),
        Err(err) => {
            errors.push(err.to_string());
            None
        }
    };
    let sysfs = Sysfs::system();
    // RDMA netlink is the authority on which devices this namespace may use; sysfs is the
    // fallback when netlink is unavailable (old kernel, RDMA netlink blocked by seccomp).
    let mut ports: Vec<(RdmaPort, Option<String>, Option<u32>)> = match rdma::netlink_ports() {
        Ok(found) => found
            .into_iter()
            .map(|p| (p.port, p.ndev_name, p.ndev_index))
            .collect(),
        Err(err) => {
            errors.push(err.to_string());
            sysfs_ports(&sysfs, errors)
        }
    };
    ports.sort_by(|a, b| (&a.0.device, a.0.port).cmp(&(&b.0.device, b.0.port)));

    let mut devices: Vec<Device> = Vec::new();
    for (port, netdev, netdev_index) in ports {
        let dir = PathBuf::from(SYS)
            .join("class/infiniband")
            .join(&port.device)
            .join("ports")
            .join(port.port.to_string());
        let (gids, gids_error) = match sysfs.read_gid_table(&port) {
            Ok(table) => (table.slots, None),
            Err(err) => (Vec::new(), Some(err.to_string())),
        };
        let entry = Port {
            port: port.port,
            link_layer: read_trimmed(&dir.join("link_layer")),
            state: read_trimmed(&dir.join("state")),
            netdev,
            netdev_index,
            gids,
            gids_error,
        };
        match devices.iter_mut().find(|d| d.name == port.device) {
            Some(device) => device.ports.push(entry),
            None => devices.push(Device {
                name: port.device,
                ports: vec![entry],
            }),
        }
    }
    (mode, devices)
}

fn sysfs_ports(
    sysfs: &Sysfs,
    errors: &mut Vec<String>,
) -> Vec<(RdmaPort, Option<String>, Option<u32>)> {
    let class = Path::new(SYS).join("class/infiniband");
    let names = match fs::read_dir(&class) {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect::<Vec<_>>(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(err) => {
            errors.push(format!("{}: {err}", class.display()));
            Vec::new()
        }
    };
    let mut ports = Vec::new();
    for device in names {
        match sysfs.ports(&device) {
            Ok(numbers) => ports.extend(numbers.into_iter().map(|port| {
                (
                    RdmaPort {
                        device: device.clone(),
                        port,
                    },
                    None,
                    None,
                )
            })),
            Err(err) => errors.push(format!("ports of {device}: {err}")),
        }
    }
    ports
}

/// Every link of `ns` with its addresses (and their DAD flags), on a socket inside `ns`.
fn netdevs_in(ns: &Netns) -> Result<Vec<Netdev>> {
    let nl = RouteSocket::open_in(ns)?;
    let links = nl.links()?;
    let addrs = nl.all_addresses()?;
    let mut netdevs: Vec<Netdev> = links
        .into_iter()
        .map(|link| Netdev {
            index: link.index,
            name: link.name,
            kind: link.kind.map(|k| k.to_string()),
            parent_index: link.parent,
            parent_elsewhere: link.parent_elsewhere,
            alias: link.alias,
            up: link.admin_up,
            addresses: Vec::new(),
        })
        .collect();
    for addr in addrs {
        let Some(netdev) = netdevs.iter_mut().find(|n| n.index == addr.index) else {
            continue;
        };
        netdev.addresses.push(Address {
            ip: addr.ip,
            prefix: addr.prefix,
            tentative: addr.flags.contains(AddressFlags::TENTATIVE),
            dadfailed: addr.flags.contains(AddressFlags::DADFAILED),
            permanent: addr.flags.contains(AddressFlags::PERMANENT),
        });
    }
    Ok(netdevs)
}
