//! What `diagnose` reads from the kernel, as plain data.
//!
//! `gather` fills a [`Snapshot`]; `analyze` turns it into findings without touching the system.
//! The snapshot serializes to JSON (it is part of `--json` output), so a snapshot taken on a
//! broken node can be replayed with `diagnose --snapshot FILE` and kept as a test fixture.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::kernel::rdma::Gid;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// The namespace looked at, as the operator named it ("this process", "netns PATH", "pid N").
    pub target: String,
    /// Whether the target is the namespace of PID 1 as this process sees it (the node's initial
    /// netns when run on the node; the pod's own netns when run inside a pod).
    pub target_is_pid1_netns: bool,
    pub ib_core: IbCoreFacts,
    /// `shared`/`exclusive` from RDMA netlink, None if it could not be read.
    pub netns_mode: Option<NetnsModeName>,
    /// RDMA devices and ports as seen from the target namespace (RDMA netlink runs in it, and
    /// the GID table is read by a thread inside it).
    pub devices: Vec<Device>,
    /// The same, read from PID 1's netns, when that is another namespace and could be entered.
    /// On DOCA-OFED it shows the GIDs of the host's netdevs that the target cannot see.
    pub host: Option<HostView>,
    /// Why there is no host view (None when there is one, or the target is PID 1's netns).
    #[serde(default)]
    pub host_unavailable: Option<String>,
    /// The netdevs of the target namespace.
    pub netdevs: Vec<Netdev>,
    /// Reads that failed without stopping the diagnosis.
    #[serde(default)]
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetnsModeName {
    Shared,
    Exclusive,
}

/// Raw facts about ib_core from `/sys/module` (not namespaced, readable from a pod that mounts
/// sysfs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IbCoreFacts {
    /// `/sys/module/ib_core` exists.
    pub present: bool,
    /// `/sys/module/ib_core/initstate` exists: a loadable module (built-in ones have none).
    pub loadable: bool,
    /// `/sys/module/ib_core/version` (MODULE_VERSION; the kernel's own ib_core declares none).
    pub version: Option<String>,
    pub srcversion: Option<String>,
    /// `/sys/module/ib_core/taint`: "O" marks an out-of-tree (e.g. DKMS-built) module.
    pub taint: Option<String>,
    /// `/sys/module/mlx_compat` exists: the compat layer every MLNX_OFED/DOCA-OFED kernel
    /// module build depends on.
    pub mlx_compat: bool,
    /// `/sys/module/ib_core/parameters/netns_mode` (the boot-time default of the mode).
    pub netns_mode_param: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub name: String,
    pub ports: Vec<Port>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    pub port: u32,
    /// `ports/<p>/link_layer`: "Ethernet" (RoCE) or "InfiniBand".
    pub link_layer: Option<String>,
    /// `ports/<p>/state`, e.g. "4: ACTIVE".
    pub state: Option<String>,
    /// The port's netdev as RDMA netlink reports it to this namespace: only when the netdev
    /// lives here.
    pub netdev: Option<String>,
    pub netdev_index: Option<u32>,
    /// The GID table as a thread inside the namespace read it (rdma's one slot type).
    pub gids: Vec<Gid>,
    /// Why the GID table could not be read, if it could not.
    #[serde(default)]
    pub gids_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostView {
    pub devices: Vec<Device>,
    /// Index -> name of the links of PID 1's netns, to name a child's parent (IFLA_LINK).
    pub links: Vec<HostLink>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostLink {
    pub index: u32,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Netdev {
    pub index: u32,
    pub name: String,
    /// IFLA_INFO_KIND: "ipvlan", "macvlan", "veth", … None for physical NICs.
    pub kind: Option<String>,
    /// IFLA_LINK: the lower device's index.
    pub parent_index: Option<u32>,
    /// IFLA_LINK_NETNSID was present: the lower device lives in another namespace (a child
    /// moved into a pod), so `parent_index` is an index of that namespace.
    #[serde(default)]
    pub parent_elsewhere: bool,
    pub alias: Option<String>,
    pub up: bool,
    pub addresses: Vec<Address>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Address {
    pub ip: IpAddr,
    pub prefix: u8,
    /// IFA_F_TENTATIVE: IPv6 DAD has not finished; the kernel adds no GID before it does.
    #[serde(default)]
    pub tentative: bool,
    #[serde(default)]
    pub dadfailed: bool,
    /// IFA_F_PERMANENT: configured (by IPAM, by hand); SLAAC addresses lack it.
    #[serde(default)]
    pub permanent: bool,
}
