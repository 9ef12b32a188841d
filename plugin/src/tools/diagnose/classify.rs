//! Classification (pure): which ib_core runs, and what each GID slot and netdev of the snapshot
//! is (usable, foreign, hidden, empty; on which port; which GID index to use).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr};

use super::report::{AddressReport, Flavor, GidClass, GidReport, IbCore, NetdevReport, PortReport};
use super::snapshot::{Address, Device, IbCoreFacts, Netdev, Port, Snapshot};
use crate::kernel::rdma::{roce_gid, Gid, GidType};
use crate::protocol::cni::Roce;

/// Which ib_core this is. The kernel's own ib_core declares no MODULE_VERSION and is not
/// out-of-tree; every MLNX_OFED/DOCA-OFED build loads mlx_compat first and, being built by
/// DKMS, carries the out-of-tree taint.
pub fn classify_ib_core(facts: &IbCoreFacts, devices_seen: bool) -> IbCore {
    let mut evidence = Vec::new();
    if !facts.present {
        let flavor = if devices_seen {
            evidence.push(
                "/sys/module/ib_core is missing although RDMA devices exist (sysfs not mounted \
                 or not the host's?)"
                    .into(),
            );
            Flavor::Unknown
        } else {
            evidence.push("/sys/module/ib_core does not exist".into());
            Flavor::NotLoaded
        };
        return IbCore { flavor, evidence };
    }
    let mut ofed = false;
    if facts.mlx_compat {
        ofed = true;
        evidence.push("mlx_compat (the MLNX_OFED/DOCA-OFED compat module) is loaded".into());
    }
    if let Some(version) = &facts.version {
        ofed = true;
        evidence.push(format!(
            "ib_core declares version {version:?} (the kernel's own ib_core declares none)"
        ));
    }
    if facts.taint.as_deref().is_some_and(|t| t.contains('O')) {
        ofed = true;
        evidence.push("ib_core is an out-of-tree module (taint O), as DKMS builds are".into());
    }
    if ofed {
        return IbCore {
            flavor: Flavor::Ofed,
            evidence,
        };
    }
    if !facts.loadable {
        evidence.push("ib_core is built into the kernel".into());
    } else {
        evidence.push(
            "ib_core is an in-tree module: no version, no out-of-tree taint, no mlx_compat".into(),
        );
    }
    IbCore {
        flavor: Flavor::Upstream,
        evidence,
    }
}

pub(super) fn host_port<'a>(snap: &'a Snapshot, device: &str, port: u32) -> Option<&'a Port> {
    snap.host
        .as_ref()?
        .devices
        .iter()
        .find(|d| d.name == device)?
        .ports
        .iter()
        .find(|p| p.port == port)
}

/// RoCE GIDs of a netdev's addresses (DAD must be done for the kernel to add them).
pub(super) fn address_gids(netdev: &Netdev) -> BTreeSet<Ipv6Addr> {
    netdev
        .addresses
        .iter()
        .filter(|a| !a.tentative && !a.dadfailed)
        .map(|a| roce_gid(a.ip))
        .collect()
}

pub(super) fn is_link_local(gid: &Ipv6Addr) -> bool {
    gid.segments()[0] & 0xffc0 == 0xfe80
}

pub(super) fn port_report(
    snap: &Snapshot,
    flavor: Flavor,
    device: &Device,
    port: &Port,
) -> PortReport {
    let host = host_port(snap, &device.name, port.port);
    let ethernet = port.link_layer.as_deref() == Some("Ethernet");
    let local: BTreeMap<&str, BTreeSet<Ipv6Addr>> = snap
        .netdevs
        .iter()
        .map(|n| (n.name.as_str(), address_gids(n)))
        .collect();
    let gids = port
        .gids
        .iter()
        .map(|slot| {
            let host_slot = host.and_then(|h| h.gids.iter().find(|g| g.index == slot.index));
            classify_gid(
                slot,
                host_slot,
                flavor,
                ethernet,
                snap.host.is_some(),
                &local,
            )
        })
        .collect();
    let mut netdevs_here = Vec::new();
    if let Some(netdev) = &port.netdev {
        netdevs_here.push(netdev.clone());
    }
    PortReport {
        device: device.name.clone(),
        port: port.port,
        link_layer: port.link_layer.clone(),
        state: port.state.clone(),
        rail: port
            .netdev
            .clone()
            .or_else(|| host.and_then(|h| h.netdev.clone())),
        netdevs_here,
        gids,
        gids_error: port.gids_error.clone(),
    }
}

pub(super) fn classify_gid(
    slot: &Gid,
    host_slot: Option<&Gid>,
    flavor: Flavor,
    ethernet: bool,
    have_host_view: bool,
    local: &BTreeMap<&str, BTreeSet<Ipv6Addr>>,
) -> GidReport {
    let class = match (&slot.gid, &slot.ndev) {
        (Some(gid), Some(ndev)) => match local.get(ndev.as_str()) {
            // Names are per namespace: "net1" of another pod has the same name as ours, so the
            // value must also be one of our netdev's addresses (or its link-local GID).
            Some(gids) if gids.contains(gid) || is_link_local(gid) => GidClass::Usable,
            _ => GidClass::Foreign,
        },
        // InfiniBand GIDs have no netdev and pass the OFED check.
        (Some(_), None) if !ethernet => GidClass::Usable,
        // Value visible, owner unreadable: the entry is changing under us.
        (Some(_), None) => GidClass::Foreign,
        // The kernel's own ib_core hides nothing: zero means unused.
        (None, _) if flavor == Flavor::Upstream => GidClass::Empty,
        (None, _) => match host_slot {
            Some(Gid { gid: Some(_), .. }) => GidClass::Hidden,
            // A slot the host sees as zero too may still hold a GID of a third namespace.
            Some(_) => GidClass::EmptyOrHidden,
            // Without a host view: slot 0 holds the default (link-local) GID of any RoCE port
            // with a netdev, so a zero there is a hidden GID.
            None if !have_host_view && ethernet && slot.index == 0 => GidClass::Hidden,
            None => GidClass::EmptyOrHidden,
        },
    };
    let hidden_owner = if class == GidClass::Hidden {
        host_slot
    } else {
        None
    };
    GidReport {
        slot: slot.clone(),
        class,
        host_gid: hidden_owner.and_then(|h| h.gid),
        host_ndev: hidden_owner.and_then(|h| h.ndev.clone()),
    }
}

pub(super) fn is_child_kind(kind: Option<&str>) -> bool {
    matches!(kind, Some("ipvlan" | "macvlan" | "macvtap"))
}

pub(super) fn is_ula(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xfe00 == 0xfc00)
}

pub(super) fn is_slaac_global(a: &Address) -> bool {
    matches!(a.ip, IpAddr::V6(v6) if !a.permanent && !is_link_local(&v6) && !is_ula(&a.ip))
}

/// The port index in `ports` a netdev sits on, and how that was found.
pub(super) fn port_of(snap: &Snapshot, ports: &[PortReport], netdev: &Netdev) -> Option<usize> {
    // 1. It is the port's own netdev (the rail on the node; a VF netdev in a pod).
    if let Some(i) = ports
        .iter()
        .position(|p| p.netdevs_here.first() == Some(&netdev.name))
    {
        return Some(i);
    }
    // 2. Its GIDs sit on the port.
    if let Some(i) = ports.iter().position(|p| {
        p.gids
            .iter()
            .any(|g| g.class == GidClass::Usable && g.slot.ndev.as_deref() == Some(&netdev.name))
    }) {
        return Some(i);
    }
    // 3. The plugin wrote it in the ifalias.
    if let Some(roce) = netdev.alias.as_deref().and_then(Roce::from_ifalias) {
        if let Some(i) = ports
            .iter()
            .position(|p| p.device == roce.rdma_device && p.port == roce.port)
        {
            return Some(i);
        }
    }
    // 4. Its lower device is a rail: in the host view (a child in a pod) or here (on the node).
    let parent = netdev.parent_index?;
    snap.devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .position(|(d, p)| {
            if netdev.parent_elsewhere {
                host_port(snap, &d.name, p.port).and_then(|h| h.netdev_index) == Some(parent)
            } else {
                p.netdev_index == Some(parent)
            }
        })
}

pub(super) fn parent_name(snap: &Snapshot, netdev: &Netdev) -> Option<String> {
    let parent = netdev.parent_index?;
    if parent == netdev.index && !netdev.parent_elsewhere {
        return None;
    }
    if netdev.parent_elsewhere {
        snap.host
            .as_ref()?
            .links
            .iter()
            .find(|l| l.index == parent)
            .map(|l| l.name.clone())
    } else {
        snap.netdevs
            .iter()
            .find(|n| n.index == parent)
            .map(|n| n.name.clone())
    }
}

pub(super) fn netdev_reports(snap: &Snapshot, ports: &mut [PortReport]) -> Vec<NetdevReport> {
    let mut reports = Vec::new();
    for netdev in &snap.netdevs {
        let port_index = port_of(snap, ports, netdev);
        let child = is_child_kind(netdev.kind.as_deref());
        if port_index.is_none() && !child {
            continue;
        }
        let port = port_index.map(|i| &ports[i]);
        let has_slaac = netdev.addresses.iter().any(is_slaac_global);
        let addresses: Vec<AddressReport> = netdev
            .addresses
            .iter()
            .map(|a| {
                let gid = roce_gid(a.ip);
                let index = port.and_then(|p| {
                    p.gids
                        .iter()
                        .find(|g| {
                            g.slot.gid == Some(gid)
                                && g.slot.gid_type == Some(GidType::RoceV2)
                                && g.class == GidClass::Usable
                                && g.slot.ndev.as_deref() == Some(&netdev.name)
                        })
                        .map(|g| g.slot.index)
                });
                let slaac = is_slaac_global(a);
                let placeholder = a.ip.is_ipv6()
                    && !is_link_local(&gid)
                    && !slaac
                    && (is_ula(&a.ip) || has_slaac);
                AddressReport {
                    address: format!("{}/{}", a.ip, a.prefix),
                    tentative: a.tentative,
                    dadfailed: a.dadfailed,
                    slaac,
                    placeholder,
                    roce_v2_gid_index: index,
                }
            })
            .collect();
        let recommended = recommend(&addresses, &netdev.addresses);
        let report = NetdevReport {
            name: netdev.name.clone(),
            kind: netdev.kind.clone(),
            parent: parent_name(snap, netdev),
            rdma_port: port.map(PortReport::name),
            rail: port.and_then(|p| p.rail.clone()),
            addresses,
            recommended_gid_index: recommended,
            ifalias: netdev.alias.as_deref().and_then(Roce::from_ifalias),
        };
        if let Some(i) = port_index {
            if !ports[i].netdevs_here.contains(&netdev.name) {
                ports[i].netdevs_here.push(netdev.name.clone());
            }
        }
        reports.push(report);
    }
    reports
}

/// The GID index a workload should use: a routable address's RoCE v2 GID, preferring SLAAC
/// (routed by the rail router) over anything else, and never a placeholder or link-local one
/// when something better exists. Lowest index among equals.
pub(super) fn recommend(reports: &[AddressReport], addrs: &[Address]) -> Option<u32> {
    reports
        .iter()
        .zip(addrs)
        .filter_map(|(r, a)| {
            let index = r.roce_v2_gid_index?;
            let rank = if is_link_local(&roce_gid(a.ip)) {
                3
            } else if r.placeholder {
                2
            } else if r.slaac {
                0
            } else {
                1
            };
            Some((rank, index))
        })
        .min()
        .filter(|&(rank, _)| rank < 3)
        .map(|(_, index)| index)
}
