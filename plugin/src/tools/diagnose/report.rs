//! What `diagnose` reports: the verdict on each port, GID and netdev, and the findings, as
//! plain data (`--json` prints it; render.rs prints it for people).

use std::fmt;
use std::net::Ipv6Addr;

use serde::Serialize;

use super::snapshot::NetnsModeName;
use crate::kernel::rdma::Gid;
use crate::protocol::cni::Roce;

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

    pub(super) fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }

    pub(super) fn is_active(&self) -> bool {
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

pub(super) fn finding(
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
