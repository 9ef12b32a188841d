//! The diagnosis proper: a pure function from a [`Snapshot`] to a [`Report`].
//!
//! Nothing here reads the system, so every verdict is unit-tested on recorded snapshots
//! (`fixtures/*.json`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use serde::Serialize;

use super::snapshot::{Address, Device, IbCoreFacts, Netdev, NetnsModeName, Port, Snapshot};
use crate::cni::Roce;
use crate::rdma::{roce_gid, Gid, GidType};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub target: String,
    pub ib_core: IbCore,
    pub netns_mode: Option<NetnsModeName>,
    pub ports: Vec<PortReport>,
    pub netdevs: Vec<NetdevReport>,
    pub findings: Vec<Finding>,
    /// No finding of severity warning or error.
    pub healthy: bool,
}

/// Which ib_core the kernel runs, and the evidence.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IbCore {
    pub flavor: Flavor,
    /// How it was detected, one reason per piece of evidence.
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavor {
    /// The kernel's own ib_core: no per-namespace GID check.
    Upstream,
    /// An MLNX_OFED/DOCA-OFED build: GIDs of netdevs in other namespaces are hidden.
    Ofed,
    NotLoaded,
    Unknown,
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavor::Upstream => "the kernel's own (upstream) build",
            Flavor::Ofed => "an MLNX_OFED/DOCA-OFED build",
            Flavor::NotLoaded => "not loaded",
            Flavor::Unknown => "unknown",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortReport {
    pub device: String,
    pub port: u32,
    pub link_layer: Option<String>,
    pub state: Option<String>,
    /// The port's own netdev (the rail), from this namespace or from the host view.
    pub rail: Option<String>,
    /// Netdevs of this namespace on this port: the rail itself, or children of it.
    pub netdevs_here: Vec<String>,
    pub gids: Vec<GidReport>,
    pub gids_error: Option<String>,
}

impl PortReport {
    pub fn name(&self) -> String {
        format!("{} port {}", self.device, self.port)
    }

    /// "rail rdma0 (rxe0 port 1)" or "rxe0 port 1".
    pub fn rail_name(&self) -> String {
        match &self.rail {
            Some(rail) => format!("rail {rail} ({})", self.name()),
            None => self.name(),
        }
    }

    fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }

    fn is_active(&self) -> bool {
        self.state.as_deref().is_some_and(|s| s.contains("ACTIVE"))
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GidReport {
    /// The slot as the namespace read it.
    #[serde(flatten)]
    pub slot: Gid,
    pub class: GidClass,
    /// For a hidden GID: what the host view shows at this index.
    pub host_gid: Option<Ipv6Addr>,
    pub host_ndev: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GidClass {
    /// Visible, and owned by a netdev of this namespace (or an InfiniBand GID, which has none).
    Usable,
    /// Visible, but owned by a netdev of another namespace: only kernels without the OFED check
    /// show it, and traffic to its address reaches that other namespace.
    Foreign,
    /// Reads zero here while the slot is in use: a GID of a netdev in another namespace,
    /// hidden by the OFED check.
    Hidden,
    /// An unused slot.
    Empty,
    /// Reads zero and nothing tells an unused slot from a hidden one (see docs/troubleshooting.md).
    EmptyOrHidden,
}

impl fmt::Display for GidClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GidClass::Usable => "usable here",
            GidClass::Foreign => "another namespace's",
            GidClass::Hidden => "hidden",
            GidClass::Empty => "empty",
            GidClass::EmptyOrHidden => "empty or hidden",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetdevReport {
    pub name: String,
    pub kind: Option<String>,
    /// The lower device's name, when known.
    pub parent: Option<String>,
    /// "rxe0 port 1", when the netdev sits on an RDMA port.
    pub rdma_port: Option<String>,
    pub rail: Option<String>,
    pub addresses: Vec<AddressReport>,
    /// The index UCX/NCCL should use for this netdev.
    pub recommended_gid_index: Option<u32>,
    /// The plugin's ifalias, parsed.
    pub ifalias: Option<Roce>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressReport {
    pub address: String,
    pub tentative: bool,
    pub dadfailed: bool,
    /// A SLAAC (autoconfigured, non-permanent) global IPv6 address.
    pub slaac: bool,
    /// Looks like a non-routable placeholder (ULA or a configured IPv6 address next to a SLAAC
    /// one).
    pub placeholder: bool,
    /// Index of its RoCE v2 GID on the netdev's port, as seen from this namespace.
    pub roce_v2_gid_index: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "WARNING",
            Severity::Error => "ERROR",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub severity: Severity,
    /// A stable identifier for automation, e.g. "no-rail-netdev".
    pub code: &'static str,
    pub message: String,
    pub fix: Option<String>,
}

fn finding(
    severity: Severity,
    code: &'static str,
    message: String,
    fix: Option<String>,
) -> Finding {
    Finding {
        severity,
        code,
        message,
        fix,
    }
}

const ATTACH_FIX: &str = "attach a roce-ipvlan network for this rail (one \
    NetworkAttachmentDefinition per rail, master = the rail netdev; see docs/configuration.md)";

/// Runs the diagnosis.
pub fn analyze(snap: &Snapshot) -> Report {
    let ib_core = classify_ib_core(&snap.ib_core, !snap.devices.is_empty());
    let mut findings = vec![finding(
        Severity::Info,
        "ib-core",
        format!(
            "ib_core is {} ({})",
            ib_core.flavor,
            ib_core.evidence.join("; ")
        ),
        None,
    )];
    match snap.netns_mode {
        Some(mode) => findings.push(finding(
            Severity::Info,
            "netns-mode",
            format!("RDMA subsystem netns mode: {}", mode_name(mode)),
            None,
        )),
        None => findings.push(finding(
            Severity::Info,
            "netns-mode",
            "RDMA subsystem netns mode: unknown (RDMA netlink did not answer)".into(),
            None,
        )),
    }

    let mut ports: Vec<PortReport> = Vec::new();
    for device in &snap.devices {
        for port in &device.ports {
            ports.push(port_report(snap, ib_core.flavor, device, port));
        }
    }
    let netdevs = netdev_reports(snap, &mut ports);

    device_findings(snap, &ib_core, &ports, &netdevs, &mut findings);
    for port in ports.iter().filter(|p| !p.netdevs_here.is_empty()) {
        if !port.is_active() {
            findings.push(finding(
                Severity::Warning,
                "port-not-active",
                format!(
                    "{} is {}, not ACTIVE",
                    port.rail_name(),
                    port.state.as_deref().unwrap_or("in an unknown state")
                ),
                Some(
                    "check the link of the rail netdev (ip link, ethtool) and the switch port"
                        .into(),
                ),
            ));
        }
        if let Some(err) = &port.gids_error {
            findings.push(finding(
                Severity::Warning,
                "gid-table-unreadable",
                format!("cannot read the GID table of {}: {err}", port.name()),
                None,
            ));
        }
    }
    netdev_findings(&ports, &netdevs, &mut findings);
    gid_index_advice(&netdevs, &mut findings);
    for err in &snap.errors {
        // A problem of diagnose, not of the namespace: what it affects is reported anyway.
        findings.push(finding(
            Severity::Info,
            "incomplete",
            format!("diagnose could not read everything: {err}"),
            None,
        ));
    }

    let healthy = findings.iter().all(|f| f.severity == Severity::Info);
    Report {
        target: snap.target.clone(),
        ib_core,
        netns_mode: snap.netns_mode,
        ports,
        netdevs,
        findings,
        healthy,
    }
}

fn mode_name(mode: NetnsModeName) -> &'static str {
    match mode {
        NetnsModeName::Shared => "shared",
        NetnsModeName::Exclusive => "exclusive",
    }
}

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

fn host_port<'a>(snap: &'a Snapshot, device: &str, port: u32) -> Option<&'a Port> {
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
fn address_gids(netdev: &Netdev) -> BTreeSet<Ipv6Addr> {
    netdev
        .addresses
        .iter()
        .filter(|a| !a.tentative && !a.dadfailed)
        .map(|a| roce_gid(a.ip))
        .collect()
}

fn is_link_local(gid: &Ipv6Addr) -> bool {
    gid.segments()[0] & 0xffc0 == 0xfe80
}

fn port_report(snap: &Snapshot, flavor: Flavor, device: &Device, port: &Port) -> PortReport {
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

fn classify_gid(
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

fn is_child_kind(kind: Option<&str>) -> bool {
    matches!(kind, Some("ipvlan" | "macvlan" | "macvtap"))
}

fn is_ula(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xfe00 == 0xfc00)
}

fn is_slaac_global(a: &Address) -> bool {
    matches!(a.ip, IpAddr::V6(v6) if !a.permanent && !is_link_local(&v6) && !is_ula(&a.ip))
}

/// The port index in `ports` a netdev sits on, and how that was found.
fn port_of(snap: &Snapshot, ports: &[PortReport], netdev: &Netdev) -> Option<usize> {
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

fn parent_name(snap: &Snapshot, netdev: &Netdev) -> Option<String> {
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

fn netdev_reports(snap: &Snapshot, ports: &mut [PortReport]) -> Vec<NetdevReport> {
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
fn recommend(reports: &[AddressReport], addrs: &[Address]) -> Option<u32> {
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

fn device_findings(
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

fn kind_name(n: &NetdevReport) -> &str {
    n.kind.as_deref().unwrap_or("device")
}

fn netdev_findings(ports: &[PortReport], netdevs: &[NetdevReport], findings: &mut Vec<Finding>) {
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

fn gid_index_advice(netdevs: &[NetdevReport], findings: &mut Vec<Finding>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Snapshot {
        let text = match name {
            "healthy-pod" => include_str!("fixtures/healthy-pod.json"),
            "ofed-pod-no-rail-netdev" => include_str!("fixtures/ofed-pod-no-rail-netdev.json"),
            "ofed-vm-pod-no-attachment" => include_str!("fixtures/ofed-vm-pod-no-attachment.json"),
            "exclusive-no-device" => include_str!("fixtures/exclusive-no-device.json"),
            "ipv6-placeholder" => include_str!("fixtures/ipv6-placeholder.json"),
            "tentative-address" => include_str!("fixtures/tentative-address.json"),
            other => panic!("no fixture {other}"),
        };
        serde_json::from_str(text).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
    }

    fn codes(report: &Report, severity: Severity) -> Vec<&'static str> {
        report
            .findings
            .iter()
            .filter(|f| f.severity == severity)
            .map(|f| f.code)
            .collect()
    }

    fn message<'a>(report: &'a Report, code: &str) -> &'a Finding {
        report
            .findings
            .iter()
            .find(|f| f.code == code)
            .unwrap_or_else(|| panic!("no finding {code}: {:#?}", report.findings))
    }

    #[test]
    fn healthy_pod_is_healthy_and_names_the_gid_index() {
        let report = analyze(&fixture("healthy-pod"));
        assert!(report.healthy, "{:#?}", report.findings);
        assert_eq!(report.ib_core.flavor, Flavor::Upstream);
        let net1 = report.netdevs.iter().find(|n| n.name == "net1").unwrap();
        assert_eq!(net1.rail.as_deref(), Some("rdma0"));
        assert_eq!(net1.rdma_port.as_deref(), Some("rxe0 port 1"));
        assert_eq!(net1.recommended_gid_index, Some(1));
        assert_eq!(net1.ifalias.as_ref().map(|r| r.gid_index), Some(1));
        let rxe0 = &report.ports[0];
        assert_eq!(rxe0.netdevs_here, ["net1"]);
        // The host rail's link-local GID is visible on upstream but not ours.
        assert_eq!(rxe0.gids[0].class, GidClass::Foreign);
        assert_eq!(rxe0.gids[1].class, GidClass::Usable);
        assert_eq!(rxe0.gids[2].class, GidClass::Empty);
        // The other rail is merely not attached: info, not a problem.
        let other = message(&report, "no-rail-netdev");
        assert_eq!(other.severity, Severity::Info);
        assert!(
            other.message.contains("rail rdma1 (rxe1 port 1)"),
            "{other:?}"
        );
        assert!(message(&report, "gid-index")
            .message
            .starts_with("GID index for UCX/NCCL should be 1"));
    }

    #[test]
    fn ofed_pod_without_rail_netdev_sees_hidden_gids() {
        let report = analyze(&fixture("ofed-pod-no-rail-netdev"));
        assert!(!report.healthy);
        assert_eq!(report.ib_core.flavor, Flavor::Ofed);
        assert!(
            report
                .ib_core
                .evidence
                .iter()
                .any(|e| e.contains("mlx_compat")),
            "{:?}",
            report.ib_core.evidence
        );
        let port = &report.ports[0];
        // Host view: slots 0..3 are the rail's, so zeros there are hidden, with their owner.
        assert_eq!(port.gids[3].class, GidClass::Hidden);
        assert_eq!(port.gids[3].host_ndev.as_deref(), Some("rdma6"));
        assert_eq!(
            port.gids[3].host_gid,
            Some("::ffff:10.224.12.143".parse().unwrap())
        );
        // Zero from both views: unused, or a third namespace's; nothing tells them apart.
        assert_eq!(port.gids[4].class, GidClass::EmptyOrHidden);
        let f = report
            .findings
            .iter()
            .find(|f| f.code == "no-rail-netdev")
            .unwrap();
        assert_eq!(f.severity, Severity::Error);
        assert!(
            f.message.starts_with(
                "RDMA devices present but no netdev on rail rdma6 (mlx5_6 port 1) in this \
                 namespace: its GIDs are hidden by the OFED GID check"
            ),
            "{}",
            f.message
        );
        assert!(f
            .fix
            .as_deref()
            .unwrap()
            .contains("attach a roce-ipvlan network"));
        assert!(codes(&report, Severity::Error).contains(&"no-netdev-on-any-rail"));
    }

    /// A live snapshot, not a hand-made one: `roce-ipvlan diagnose --netns <pod> --json` (its
    /// "snapshot") in the test VM on the OFED view (VM_RDMA=ofed, Debian 6.1 with
    /// tests/vm/ofed/ib_core-gid-netns-check.patch), from a netns with no netdev on any rail,
    /// the rail rdma0 holding 10.30.0.1. Trimmed to rxe0 and rxe1 and their first 4 GID slots
    /// of 1024 (the rest read zero from both views).
    #[test]
    fn ofed_vm_pod_without_attachment_from_live_snapshot() {
        let report = analyze(&fixture("ofed-vm-pod-no-attachment"));
        assert!(!report.healthy);
        // No mlx_compat or version here: the out-of-tree taint alone tells the OFED build.
        assert_eq!(report.ib_core.flavor, Flavor::Ofed);
        let port = &report.ports[0];
        assert_eq!(port.rail.as_deref(), Some("rdma0"));
        assert_eq!(port.gids[0].class, GidClass::Hidden);
        assert_eq!(port.gids[1].class, GidClass::Hidden);
        assert_eq!(port.gids[1].host_ndev.as_deref(), Some("rdma0"));
        assert_eq!(
            port.gids[1].host_gid,
            Some("::ffff:10.30.0.1".parse().unwrap())
        );
        assert_eq!(port.gids[2].class, GidClass::EmptyOrHidden);
        let f = message(&report, "no-rail-netdev");
        assert_eq!(f.severity, Severity::Error);
        assert!(
            f.message.starts_with(
                "RDMA devices present but no netdev on rail rdma0 (rxe0 port 1) in this \
                 namespace: its GIDs are hidden by the OFED GID check (2 slots read zero here"
            ),
            "{}",
            f.message
        );
        assert!(codes(&report, Severity::Error).contains(&"no-netdev-on-any-rail"));
    }

    #[test]
    fn ofed_pod_without_host_view_infers_hidden_default_gid() {
        let mut snap = fixture("ofed-pod-no-rail-netdev");
        snap.host = None;
        snap.host_unavailable = Some("inside a pod".into());
        let report = analyze(&snap);
        let port = &report.ports[0];
        assert_eq!(port.rail, None);
        assert_eq!(port.gids[0].class, GidClass::Hidden);
        assert_eq!(port.gids[3].class, GidClass::EmptyOrHidden);
        let f = message(&report, "no-rail-netdev");
        assert!(
            f.message.contains("no netdev on mlx5_6 port 1 in"),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("hidden by the OFED GID check"),
            "{}",
            f.message
        );
    }

    #[test]
    fn exclusive_mode_without_device() {
        let report = analyze(&fixture("exclusive-no-device"));
        assert!(!report.healthy);
        let f = message(&report, "exclusive-no-device");
        assert_eq!(f.severity, Severity::Error);
        assert!(
            f.message.starts_with(
                "exclusive mode and no RDMA device in this namespace (the node has 2)"
            ),
            "{}",
            f.message
        );
        assert!(f.fix.as_deref().unwrap().contains("netns_mode=1"));
        assert_eq!(codes(&report, Severity::Error), ["exclusive-no-device"]);
    }

    #[test]
    fn ipv6_placeholder_before_slaac_gid_is_flagged() {
        let report = analyze(&fixture("ipv6-placeholder"));
        assert!(!report.healthy);
        let net1 = report.netdevs.iter().find(|n| n.name == "net1").unwrap();
        // fd01:0:0:100::5/112 got GID 5, the SLAAC address GID 9.
        assert_eq!(net1.recommended_gid_index, Some(9));
        let placeholder = net1
            .addresses
            .iter()
            .find(|a| a.address == "fd01:0:0:100::5/112")
            .unwrap();
        assert!(placeholder.placeholder);
        assert_eq!(placeholder.roce_v2_gid_index, Some(5));
        let f = message(&report, "placeholder-gid-first");
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.message.contains("index 5"), "{}", f.message);
        assert!(f.fix.as_deref().unwrap().contains("UCX_IB_GID_INDEX=9"));
        assert!(message(&report, "gid-index")
            .message
            .contains("should be 9"));
        assert_eq!(codes(&report, Severity::Error), Vec::<&str>::new());
    }

    #[test]
    fn tentative_address_has_no_gid_yet() {
        let report = analyze(&fixture("tentative-address"));
        assert!(!report.healthy);
        let f = message(&report, "tentative-address");
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.message.contains("2001:db8:6::10/64 on net1"),
            "{}",
            f.message
        );
        // Its only routable address has no GID yet.
        assert_eq!(
            message(&report, "no-usable-gid").message,
            "net1 (ipvlan of rail rdma0, rxe0 port 1) has no usable routable RoCE v2 GID: it \
             has no address past DAD"
        );
    }

    #[test]
    fn ib_core_detection() {
        let upstream = IbCoreFacts {
            present: true,
            loadable: true,
            srcversion: Some("ABC".into()),
            taint: Some(String::new()),
            ..IbCoreFacts::default()
        };
        assert_eq!(classify_ib_core(&upstream, true).flavor, Flavor::Upstream);
        let builtin = IbCoreFacts {
            present: true,
            ..IbCoreFacts::default()
        };
        let c = classify_ib_core(&builtin, true);
        assert_eq!(c.flavor, Flavor::Upstream);
        assert!(c.evidence[0].contains("built into"));
        let dkms = IbCoreFacts {
            taint: Some("OE".into()),
            ..upstream.clone()
        };
        assert_eq!(classify_ib_core(&dkms, true).flavor, Flavor::Ofed);
        let versioned = IbCoreFacts {
            version: Some("25.07-0.9.7".into()),
            ..upstream
        };
        assert_eq!(classify_ib_core(&versioned, true).flavor, Flavor::Ofed);
        let absent = IbCoreFacts::default();
        assert_eq!(classify_ib_core(&absent, false).flavor, Flavor::NotLoaded);
        assert_eq!(classify_ib_core(&absent, true).flavor, Flavor::Unknown);
    }

    #[test]
    fn node_view_is_healthy_without_children() {
        // The healthy pod's host view, seen as the target itself.
        let pod = fixture("healthy-pod");
        let host = pod.host.clone().unwrap();
        let snap = Snapshot {
            target: "this process".into(),
            target_is_pid1_netns: true,
            devices: host.devices,
            host: None,
            host_unavailable: None,
            netdevs: vec![
                Netdev {
                    index: 2,
                    name: "rdma0".into(),
                    kind: None,
                    parent_index: None,
                    parent_elsewhere: false,
                    alias: None,
                    up: true,
                    addresses: vec![],
                },
                Netdev {
                    index: 3,
                    name: "rdma1".into(),
                    kind: None,
                    parent_index: None,
                    parent_elsewhere: false,
                    alias: None,
                    up: true,
                    addresses: vec![],
                },
            ],
            ..pod
        };
        let report = analyze(&snap);
        assert!(report.healthy, "{:#?}", report.findings);
        assert_eq!(report.ports[0].netdevs_here, ["rdma0"]);
        assert_eq!(report.ports[1].rail.as_deref(), Some("rdma1"));
        assert!(report.findings.iter().all(|f| f.code != "gid-index"));
    }
}
