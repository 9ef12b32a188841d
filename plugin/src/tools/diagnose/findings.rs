//! The findings (pure): from the classified ports and netdevs to what is wrong and how to fix
//! it, each with a stable code.

use std::collections::BTreeSet;

use super::classify::is_child_kind;
use super::report::{
    finding, Finding, Flavor, GidClass, IbCore, NetdevReport, PortReport, Severity,
};
use super::snapshot::{NetnsModeName, Snapshot};
use crate::kernel::rdma::GidType;

const ATTACH_FIX: &str = "attach a roce-ipvlan network for this rail (one \
    NetworkAttachmentDefinition per rail, master = the rail netdev; see docs/configuration.md)";

pub(super) fn mode_name(mode: NetnsModeName) -> &'static str {
    match mode {
        NetnsModeName::Shared => "shared",
        NetnsModeName::Exclusive => "exclusive",
    }
}

pub(super) fn device_findings(
    snap: &Snapshot,
    ib_core: &IbCore,
    ports: &[PortReport],
    netdevs: &[NetdevReport],
    findings: &mut Vec<Finding>,
) {
    if ports.is_empty() {
        let host_devices = snap.host.as_ref().map_or(0, |h| h.devices.len());
        if snap.netns_mode == Some(NetnsModeName::Exclusive) {
            findings.push(finding(
                Severity::Error,
                "exclusive-no-device",
                format!(
                    "exclusive mode and no RDMA device in this namespace{}: in exclusive mode a \
                     device belongs to one namespace, so pods only see devices moved into them",
                    if host_devices > 0 {
                        format!(" (the node has {host_devices})")
                    } else {
                        String::new()
                    }
                ),
                Some(
                    "roce-ipvlan shares each rail's device between pods, which needs shared mode: \
                     'rdma system set netns shared' while no other netns exists, or the ib_core \
                     module parameter netns_mode=1 and a reboot; or give the pod an SR-IOV VF \
                     with the RDMA CNI, which moves the VF's device in"
                        .into(),
                ),
            ));
        } else {
            let why = match ib_core.flavor {
                Flavor::NotLoaded => "ib_core is not loaded",
                _ => "no RDMA device is registered (or /sys/class/infiniband is not visible)",
            };
            findings.push(finding(
                Severity::Error,
                "no-rdma-device",
                format!("no RDMA device visible from this namespace: {why}"),
                Some(
                    "on the node: load the NIC's RDMA driver (mlx5_ib, rdma_rxe) and check \
                     'rdma link'; in a pod: request the RDMA device-plugin resource so that \
                     /dev/infiniband is mounted, and mount sysfs"
                        .into(),
                ),
            ));
        }
        return;
    }

    let rails: Vec<&PortReport> = ports.iter().filter(|p| p.is_ethernet()).collect();
    let covered = rails.iter().filter(|p| !p.netdevs_here.is_empty()).count();
    if rails.is_empty() {
        return;
    }
    gid_capacity_findings(&rails, findings);
    for port in rails.iter().filter(|p| p.netdevs_here.is_empty()) {
        let hidden = port
            .gids
            .iter()
            .filter(|g| g.class == GidClass::Hidden)
            .count();
        let foreign = port
            .gids
            .iter()
            .filter(|g| g.class == GidClass::Foreign)
            .count();
        let why = if ib_core.flavor == Flavor::Ofed || (hidden > 0 && foreign == 0) {
            format!(
                "its GIDs are hidden by the OFED GID check ({hidden} slots read zero here but \
                 are in use), so verbs fail (ibv_modify_qp: ENODEV, UCX: Address not valid)"
            )
        } else if foreign > 0 {
            format!(
                "the {foreign} GIDs visible here belong to netdevs of other namespaces: this \
                 kernel's ib_core shows them, but traffic to their addresses goes there, and a \
                 DOCA-OFED kernel would hide them"
            )
        } else {
            "no GID here belongs to this namespace".to_owned()
        };
        let severity = if covered == 0 {
            Severity::Error
        } else {
            Severity::Info
        };
        let unused = if covered == 0 {
            ""
        } else {
            " (fine if the workload does not use it)"
        };
        findings.push(finding(
            severity,
            "no-rail-netdev",
            format!(
                "RDMA devices present but no netdev on {} in this namespace{unused}: {why}",
                port.rail_name()
            ),
            Some(ATTACH_FIX.into()),
        ));
    }
    if covered == 0 {
        let strays: Vec<String> = netdevs
            .iter()
            .filter(|n| n.rdma_port.is_none())
            .map(|n| match &n.parent {
                Some(parent) => format!("{} ({} on {parent})", n.name, kind_name(n)),
                None => format!("{} ({})", n.name, kind_name(n)),
            })
            .collect();
        let strays = if strays.is_empty() {
            String::new()
        } else {
            format!(
                "; {} on no RDMA port: its master must be the rail netdev",
                strays.join(", ")
            )
        };
        findings.push(finding(
            Severity::Error,
            "no-netdev-on-any-rail",
            format!(
                "no netdev on any rail in this namespace ({} RoCE ports){strays}",
                rails.len()
            ),
            Some(
                "give the pod a roce-ipvlan attachment per rail it uses (the device-plugin \
                 resource alone only mounts /dev/infiniband)"
                    .into(),
            ),
        ));
    }
}

/// A rail's GID table with no room for one more child (one entry per RoCE version the port
/// supports: how many slots hold the first visible value, as ADD counts in
/// attach/gid_capacity.rs), or with less than a tenth left. Zero slots may still hold GIDs
/// another namespace hides, so the free count is at most this.
fn gid_capacity_findings(rails: &[&PortReport], findings: &mut Vec<Finding>) {
    for port in rails.iter().filter(|p| !p.gids.is_empty()) {
        let slots = port.gids.len();
        let free = port
            .gids
            .iter()
            .filter(|g| matches!(g.class, GidClass::Empty | GidClass::EmptyOrHidden))
            .count();
        let values: Vec<_> = port.gids.iter().filter_map(|g| g.slot.gid).collect();
        let types = values
            .first()
            .map_or(2, |first| values.iter().filter(|v| *v == first).count())
            .clamp(1, 2);
        let fix = "free slots: delete pods that no longer need this rail, keep IPv6 off on IPv4                    rails (leave \"ipv6.linkLocal\" out: 2 entries less per child), remove                    addresses of the rail netdev on the node, or cap the pods per rail (the                    device plugin's resource count)";
        let (severity, code, what) = if free < types {
            (
                Severity::Error,
                "gid-table-full",
                "no room for one more child's GIDs: ADD fails with 110",
            )
        } else if free * 10 < slots {
            (
                Severity::Warning,
                "gid-table-nearly-full",
                "less than a tenth left; each address of a child takes one per RoCE version",
            )
        } else {
            continue;
        };
        findings.push(finding(
            severity,
            code,
            format!(
                "the GID table of {} has at most {free} free slots of {slots}: {what}",
                port.rail_name()
            ),
            Some(fix.into()),
        ));
    }
}

pub(super) fn kind_name(n: &NetdevReport) -> &str {
    n.kind.as_deref().unwrap_or("device")
}

pub(super) fn netdev_findings(
    ports: &[PortReport],
    netdevs: &[NetdevReport],
    findings: &mut Vec<Finding>,
) {
    for n in netdevs {
        let child = is_child_kind(n.kind.as_deref());
        for a in &n.addresses {
            if a.dadfailed {
                findings.push(finding(
                    Severity::Error,
                    "dad-failed",
                    format!(
                        "{} on {}: duplicate address detection failed; the kernel adds no GID \
                         for it",
                        a.address, n.name
                    ),
                    Some(
                        "another node or pod on the rail uses this address: fix the IPAM pool"
                            .into(),
                    ),
                ));
            } else if a.tentative {
                // A link-local address is tentative for the first second of every child's life
                // and carries no RoCE traffic: worth a line, not a problem.
                let link_local = a.address.starts_with("fe80:");
                findings.push(finding(
                    if link_local {
                        Severity::Info
                    } else {
                        Severity::Warning
                    },
                    "tentative-address",
                    format!(
                        "{} on {} is still tentative (IPv6 DAD running): peers cannot resolve \
                         it until DAD completes",
                        a.address, n.name
                    ),
                    Some(
                        "wait about a second and run diagnose again; if it stays tentative, the \
                         netdev may have no carrier"
                            .into(),
                    ),
                ));
            }
        }
        let Some(port_name) = &n.rdma_port else {
            if child {
                let on = n
                    .parent
                    .as_deref()
                    .map_or_else(String::new, |p| format!(" on {p}"));
                findings.push(finding(
                    Severity::Info,
                    "child-not-on-rail",
                    format!(
                        "{} ({}{on}) is on no RDMA port: it gets no RoCE GID",
                        n.name,
                        kind_name(n)
                    ),
                    None,
                ));
            }
            continue;
        };
        let rail = n.rail.as_deref().unwrap_or("?");
        let routable = n.recommended_gid_index;
        if child && routable.is_none() {
            let visible_v2 = n.addresses.iter().any(|a| a.roce_v2_gid_index.is_some());
            let reason = if n.addresses.iter().all(|a| a.tentative || a.dadfailed) {
                "it has no address past DAD"
            } else if visible_v2 {
                "only its link-local address has one"
            } else {
                "no GID of its addresses is visible from here"
            };
            findings.push(finding(
                Severity::Error,
                "no-usable-gid",
                format!(
                    "{} ({} of rail {rail}, {port_name}) has no usable routable RoCE v2 GID: \
                     {reason}",
                    n.name,
                    kind_name(n)
                ),
                Some(
                    "check the child's addresses (ip -6 addr: tentative/dadfailed) and that its \
                     master is the rail netdev; re-create the attachment"
                        .into(),
                ),
            ));
        }
        // A placeholder address whose GID sorts before the routable one: UCX takes the first
        // RoCE v2 GID it finds.
        if let Some(best) = routable {
            for a in n.addresses.iter().filter(|a| a.placeholder) {
                if let Some(index) = a.roce_v2_gid_index.filter(|&i| i < best) {
                    findings.push(finding(
                        Severity::Warning,
                        "placeholder-gid-first",
                        format!(
                            "{} on {} looks like a placeholder and its RoCE v2 GID (index \
                             {index}) sorts before the routable one (index {best}): UCX picks \
                             the placeholder by itself and fails with 'Endpoint timeout'",
                            a.address, n.name
                        ),
                        Some(format!(
                            "set UCX_IB_GID_INDEX={best} and NCCL_IB_GID_INDEX={best} (or run \
                             `roce-ipvlan env`)"
                        )),
                    ));
                }
            }
        }
        if let Some(roce) = &n.ifalias {
            let port = ports.iter().find(|p| p.name() == *port_name);
            let entry = port.and_then(|p| p.gids.iter().find(|g| g.slot.index == roce.gid_index));
            let agrees = entry.is_some_and(|g| {
                g.slot.gid == Some(roce.gid)
                    && g.class == GidClass::Usable
                    && g.slot.gid_type == Some(GidType::RoceV2)
            }) && format!("{} port {}", roce.rdma_device, roce.port) == *port_name;
            if !agrees {
                findings.push(finding(
                    Severity::Warning,
                    "ifalias-stale",
                    format!(
                        "the ifalias of {} says {} port {} GID index {} = {}, but {} shows {}",
                        n.name,
                        roce.rdma_device,
                        roce.port,
                        roce.gid_index,
                        roce.gid,
                        port_name,
                        entry.map_or_else(
                            || "no such slot".to_owned(),
                            |g| format!(
                                "{} ({})",
                                g.slot
                                    .gid
                                    .map_or_else(|| "zeros".to_owned(), |v| v.to_string()),
                                g.class
                            )
                        )
                    ),
                    Some(
                        "the address changed after ADD; a CNI CHECK reports it, and re-creating \
                         the pod fixes it"
                            .into(),
                    ),
                ));
            }
        }
    }
}

pub(super) fn gid_index_advice(netdevs: &[NetdevReport], findings: &mut Vec<Finding>) {
    let per_netdev: Vec<(String, u32)> = netdevs
        .iter()
        .filter(|n| is_child_kind(n.kind.as_deref()))
        .filter_map(|n| {
            let index = n.recommended_gid_index?;
            Some((format!("{} on {}", n.name, n.rdma_port.as_deref()?), index))
        })
        .collect();
    let indexes: BTreeSet<u32> = per_netdev.iter().map(|(_, i)| *i).collect();
    match indexes.len() {
        0 => {}
        1 => {
            let index = *indexes.first().expect("one element");
            findings.push(finding(
                Severity::Info,
                "gid-index",
                format!(
                    "GID index for UCX/NCCL should be {index} (NCCL_IB_GID_INDEX={index}, \
                     UCX_IB_GID_INDEX={index}), or run `roce-ipvlan env`"
                ),
                None,
            ));
        }
        _ => {
            let list: Vec<String> = per_netdev
                .iter()
                .map(|(what, i)| format!("{what}: {i}"))
                .collect();
            findings.push(finding(
                Severity::Info,
                "gid-index",
                format!(
                    "GID indexes for UCX/NCCL differ by rail ({}); NCCL_IB_GID_INDEX takes one \
                     value for all, so run `roce-ipvlan env` for per-rail settings",
                    list.join(", ")
                ),
                None,
            ));
        }
    }
}
