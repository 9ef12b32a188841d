//! RDMA side: which RDMA port sits on a netdev, and the GID table as this thread's netns sees it.
//!
//! Two kernel interfaces are used:
//! - sysfs (`/sys/class/infiniband/<dev>/ports/<port>/{gids,gid_attrs}`) for the GID table, see
//!   [`Sysfs`];
//! - RDMA netlink (`NETLINK_RDMA`, client `RDMA_NL_NLDEV`) for the port -> netdev binding and
//!   the RDMA subsystem's netns mode, see [`netlink_ports`] and [`netns_mode`].
//!
//! Nothing here enters a namespace: callers that need the pod's view of the GID table run these
//! functions on a thread that the `netns` module has already moved into the pod's netns.

mod nldev;
mod sysfs;

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[cfg(feature = "fuzzing")]
pub use nldev::fuzzing as nldev_fuzzing;
pub use nldev::{device_ports, netlink_ports, netns_mode, NetnsMode};
pub use sysfs::Sysfs;

/// Whether a port state as sysfs prints it (`<number>: <NAME>`, e.g. `4: ACTIVE`;
/// [`Sysfs::port_state`]) is ACTIVE. STATUS and `ready` both judge a rail's port by it.
pub(crate) fn port_active(state: &str) -> bool {
    state
        .split_once(':')
        .map_or(state, |(_, name)| name)
        .trim()
        .eq_ignore_ascii_case("ACTIVE")
}

/// An RDMA port: device name (e.g. "mlx5_6", "rxe0") and 1-based port number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    pub device: String,
    pub port: u32,
}

impl fmt::Display for RdmaPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} port {}", self.device, self.port)
    }
}

/// The type of a GID table entry, as `gid_attrs/types/<i>` spells it (and as `diagnose`'s
/// snapshot stores it: the kernel's text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum GidType {
    RoceV1,
    RoceV2,
    Other(String),
}

impl GidType {
    /// Parses the text of a `gid_attrs/types/<i>` file (surrounding whitespace ignored).
    pub fn parse(text: &str) -> GidType {
        match text.trim() {
            "RoCE v2" => GidType::RoceV2,
            // The kernel names v1 after IB because both share the same GID format.
            "IB/RoCE v1" => GidType::RoceV1,
            other => GidType::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::RoceV1 => f.write_str("IB/RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Other(text) => f.write_str(text),
        }
    }
}

impl From<String> for GidType {
    fn from(text: String) -> GidType {
        GidType::parse(&text)
    }
}

impl From<GidType> for String {
    fn from(t: GidType) -> String {
        t.to_string()
    }
}

/// One slot of a GID table as the reading thread's netns sees it: the crate's one GID-slot
/// type (the GID wait, CHECK, `ready`, `env`'s NCCL/UCX models, and `diagnose`, whose snapshot
/// JSON is this struct's serde form: `{"index", "gid", "gidType", "ndev"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gid {
    pub index: u32,
    /// None: the slot reads all zeros: an empty slot, or a GID hidden by the DOCA-OFED /
    /// MLNX_OFED per-netns check (the two cannot be told apart from sysfs).
    pub gid: Option<Ipv6Addr>,
    /// None: `gid_attrs/types/<i>` answered EINVAL (a zero slot, or an entry that went away
    /// between reading the value and its attributes).
    pub gid_type: Option<GidType>,
    /// None: `gid_attrs/ndevs/<i>` answered EINVAL (always so for InfiniBand).
    pub ndev: Option<String>,
}

impl Gid {
    /// A slot that reads all zeros.
    pub const fn zero(index: u32) -> Gid {
        Gid {
            index,
            gid: None,
            gid_type: None,
            ndev: None,
        }
    }

    /// The RoCE version of the entry's type: 1, 2, or None (unreadable, or another type).
    pub fn roce_version(&self) -> Option<u8> {
        match self.gid_type {
            Some(GidType::RoceV1) => Some(1),
            Some(GidType::RoceV2) => Some(2),
            _ => None,
        }
    }
}

/// `3=::ffff:10.9.0.7 (RoCE v2, net1)`, `4=all zeros`; kernel text clipped, for messages.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(gid) = self.gid else {
            return write!(f, "{}=all zeros", self.index);
        };
        let gid_type = self
            .gid_type
            .as_ref()
            .map_or_else(|| "type ?".to_owned(), |t| t.to_string());
        write!(
            f,
            "{}={gid} ({}, {})",
            self.index,
            clip(&gid_type),
            clip(self.ndev.as_deref().unwrap_or("ndev ?"))
        )
    }
}

/// A snapshot of one port's GID table as the reading thread's netns sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidTable {
    pub port: RdmaPort,
    /// Every slot of `gids/`, sorted by index.
    pub slots: Vec<Gid>,
}

/// How many visible entries [`GidTable::summary`] lists before eliding the rest.
const SUMMARY_MAX_ENTRIES: usize = 16;
/// Longest `Other` type text or netdev name [`GidTable::summary`] prints.
const SUMMARY_MAX_FIELD: usize = 32;

impl GidTable {
    /// The lowest index holding `gid` with type `gid_type`. The same value usually sits in two
    /// slots (RoCE v1 and v2), so the type matters. (Tests read tables with it; the plugin
    /// waits for a GID with `Sysfs::wait_for_gid`.)
    #[cfg(test)]
    pub fn find(&self, gid: Ipv6Addr, gid_type: &GidType) -> Option<u32> {
        self.visible()
            .find(|slot| slot.gid == Some(gid) && slot.gid_type.as_ref() == Some(gid_type))
            .map(|slot| slot.index)
    }

    /// The non-zero entries.
    pub fn visible(&self) -> impl Iterator<Item = &Gid> + '_ {
        self.slots.iter().filter(|slot| slot.gid.is_some())
    }

    /// Short text for error messages, e.g.
    /// `rxe0 port 1: 0=fe80::5054:ff:fe12:3456 (RoCE v2, rdma0), 1=… , 4 slots all zeros`.
    /// Lists at most 16 entries, then `… N more`.
    pub fn summary(&self) -> String {
        let visible: Vec<&Gid> = self.visible().collect();
        let zeros = self.slots.len() - visible.len();
        let mut parts: Vec<String> = visible
            .iter()
            .take(SUMMARY_MAX_ENTRIES)
            .map(|slot| slot.to_string())
            .collect();
        if visible.len() > SUMMARY_MAX_ENTRIES {
            parts.push(format!("… {} more", visible.len() - SUMMARY_MAX_ENTRIES));
        }
        if visible.is_empty() {
            parts.push("no visible GID".to_owned());
        }
        parts.push(format!("{zeros} slots all zeros"));
        format!("{}: {}", self.port, parts.join(", "))
    }
}

/// Cuts text read from the kernel so one odd value cannot blow up an error message.
fn clip(text: &str) -> String {
    if text.chars().count() <= SUMMARY_MAX_FIELD {
        text.to_owned()
    } else {
        let mut clipped: String = text.chars().take(SUMMARY_MAX_FIELD).collect();
        clipped.push('…');
        clipped
    }
}

/// The RoCE GID value of an address: IPv4 -> `::ffff:a.b.c.d`; IPv6 -> itself.
pub fn roce_gid(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Why [`wait_for_gid`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The GID did not appear in time; `last` is the table read at the deadline (None if that
    /// read failed too).
    #[error("the RoCE v2 GID did not appear in time; GID table seen from this netns: {}",
        .last.as_ref().map_or_else(|| "unreadable".to_owned(), GidTable::summary))]
    Timeout { last: Option<GidTable> },
    #[error("reading the GID table: {0}")]
    Io(#[from] io::Error),
}

/// First and longest pause between two polls of [`wait_for_gid`]: the kernel adds the GID
/// from a netdev notifier work item, usually within a few milliseconds of the address.
const POLL_FIRST: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(50);

/// Waits until `gid` of type RoCE v2 appears on `port` and returns its index.
///
/// Polls (synchronously, with a 1 ms pause doubling up to 50 ms), so run it on a thread that
/// has entered the pod's netns: on DOCA-OFED/MLNX_OFED kernels the pod's GIDs are visible only
/// from there. The index is whatever slot the kernel picked; it is never assumed.
pub fn wait_for_gid(
    sysfs: &Sysfs,
    port: &RdmaPort,
    gid: Ipv6Addr,
    timeout: Duration,
) -> Result<u32, WaitError> {
    let deadline = Instant::now() + timeout;
    let mut pause = POLL_FIRST;
    loop {
        if let Some(index) = sysfs.find_gid(port, gid, &GidType::RoceV2)? {
            return Ok(index);
        }
        let now = Instant::now();
        if now >= deadline {
            let last = match sysfs.read_gid_table(port) {
                Ok(table) => Some(table),
                Err(err) => {
                    tracing::debug!(%port, error = %err, "could not read the GID table after timeout");
                    None
                }
            };
            return Err(WaitError::Timeout { last });
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(POLL_MAX);
    }
}

/// The RDMA port bound to the netdev `ifindex`/`ifname`, or None if the netdev has none.
///
/// Asks RDMA netlink first (exact match on the netdev index), starting with the devices sysfs
/// ties to the netdev; when netlink is unavailable (ib_core not loaded, old kernel) or finds
/// nothing, falls back to [`Sysfs::port_of_netdev`]. Must run in the netns where the netdev
/// lives: the kernel reports a port's netdev only to sockets of that netns.
pub fn port_of_netdev(ifindex: u32, ifname: &str) -> io::Result<Option<RdmaPort>> {
    let sysfs = Sysfs::system();
    match nldev::port_of_ifindex(ifindex, &sysfs.devices_near_netdev(ifname)) {
        Ok(Some(found)) => {
            if found.ndev_name.as_deref() != Some(ifname) {
                tracing::debug!(
                    ifindex,
                    ifname,
                    netlink_name = ?found.ndev_name,
                    "RDMA netlink names the netdev differently (renamed?)"
                );
            }
            return Ok(Some(found.port));
        }
        Ok(None) => tracing::debug!(ifindex, ifname, "no RDMA port in netlink; trying sysfs"),
        Err(err) => {
            tracing::debug!(ifindex, ifname, error = %err, "RDMA netlink failed; trying sysfs")
        }
    }
    sysfs.port_of_netdev(ifname)
}

/// The RDMA ports bound to several netdevs of this thread's netns (the rails of one multi-rail
/// ADD), in their order: one RDMA netlink walk over every port for all of them, where
/// [`port_of_netdev`] per netdev would open a socket and dump the devices each time. A netdev
/// that netlink does not place (or all of them, when netlink is unavailable) is looked up in
/// sysfs as [`port_of_netdev`] does.
pub fn ports_of_netdevs(netdevs: &[(u32, &str)]) -> io::Result<Vec<Option<RdmaPort>>> {
    let ports = nldev::netlink_ports().unwrap_or_else(|err| {
        tracing::debug!(error = %err, "RDMA netlink failed; trying sysfs");
        Vec::new()
    });
    let sysfs = Sysfs::system();
    netdevs
        .iter()
        .map(
            |&(ifindex, ifname)| match ports.iter().find(|p| p.ndev_index == Some(ifindex)) {
                Some(found) => Ok(Some(found.port.clone())),
                None => sysfs.port_of_netdev(ifname),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn port_states() {
        assert!(port_active("4: ACTIVE"));
        assert!(port_active("ACTIVE"));
        assert!(!port_active("1: DOWN"));
        assert!(!port_active("2: INIT"));
        assert!(!port_active("5: ACTIVE_DEFER"));
    }

    fn port() -> RdmaPort {
        RdmaPort {
            device: "rxe0".into(),
            port: 1,
        }
    }

    fn entry(index: u32, gid: &str, gid_type: GidType, ndev: &str) -> Gid {
        Gid {
            index,
            gid: Some(gid.parse().unwrap()),
            gid_type: Some(gid_type),
            ndev: Some(ndev.into()),
        }
    }

    fn untyped(index: u32, gid: &str) -> Gid {
        Gid {
            gid: Some(gid.parse().unwrap()),
            ..Gid::zero(index)
        }
    }

    #[test]
    fn gid_serializes_as_the_snapshot_format() {
        let slot = entry(3, "::ffff:10.9.0.7", GidType::RoceV2, "net1");
        let json = serde_json::to_value(&slot).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"index": 3, "gid": "::ffff:10.9.0.7", "gidType": "RoCE v2",
                "ndev": "net1"})
        );
        assert_eq!(serde_json::from_value::<Gid>(json).unwrap(), slot);
        let zero = serde_json::json!({"index": 4, "gid": null, "gidType": null, "ndev": null});
        assert_eq!(serde_json::from_value::<Gid>(zero).unwrap(), Gid::zero(4));
        let v1: Gid = serde_json::from_value(serde_json::json!(
            {"index": 1, "gid": "fe80::1", "gidType": "IB/RoCE v1", "ndev": null}))
        .unwrap();
        assert_eq!(v1.roce_version(), Some(1));
    }

    #[test]
    fn a_slot_names_itself_for_messages() {
        let slot = entry(3, "::ffff:10.9.0.8", GidType::RoceV2, "net1");
        assert_eq!(slot.to_string(), "3=::ffff:10.9.0.8 (RoCE v2, net1)");
        assert_eq!(
            untyped(5, "fe80::1").to_string(),
            "5=fe80::1 (type ?, ndev ?)"
        );
        assert_eq!(Gid::zero(4).to_string(), "4=all zeros");
    }

    #[test]
    fn roce_gid_of_ipv4_is_v4_mapped() {
        let gid = roce_gid(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 7)));
        assert_eq!(gid, "::ffff:10.9.0.7".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            gid.octets(),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 7]
        );
    }

    #[test]
    fn roce_gid_of_ipv6_is_itself() {
        let addr: Ipv6Addr = "fd00:10::7".parse().unwrap();
        assert_eq!(roce_gid(IpAddr::V6(addr)), addr);
    }

    #[test]
    fn gid_type_parses_and_displays_kernel_text() {
        assert_eq!(GidType::parse("RoCE v2\n"), GidType::RoceV2);
        assert_eq!(GidType::parse("IB/RoCE v1\n"), GidType::RoceV1);
        assert_eq!(GidType::parse("iWARP\n"), GidType::Other("iWARP".into()));
        for t in [
            GidType::RoceV1,
            GidType::RoceV2,
            GidType::Other("x y".into()),
        ] {
            assert_eq!(GidType::parse(&t.to_string()), t);
        }
    }

    #[test]
    fn find_needs_value_and_type_and_takes_lowest_index() {
        let table = GidTable {
            port: port(),
            slots: vec![
                Gid::zero(0),
                entry(2, "::ffff:10.9.0.7", GidType::RoceV1, "a"),
                entry(3, "::ffff:10.9.0.7", GidType::RoceV2, "a"),
                entry(4, "::ffff:10.9.0.7", GidType::RoceV2, "b"),
                untyped(5, "::ffff:10.9.0.8"),
            ],
        };
        let gid: Ipv6Addr = "::ffff:10.9.0.7".parse().unwrap();
        assert_eq!(table.find(gid, &GidType::RoceV2), Some(3));
        assert_eq!(table.find(gid, &GidType::RoceV1), Some(2));
        // An entry whose type could not be read never matches.
        let untyped: Ipv6Addr = "::ffff:10.9.0.8".parse().unwrap();
        assert_eq!(table.find(untyped, &GidType::RoceV2), None);
        assert_eq!(table.visible().count(), 4);
    }

    #[test]
    fn summary_lists_entries_and_counts_zeros() {
        let table = GidTable {
            port: port(),
            slots: vec![
                entry(0, "fe80::5054:ff:fe12:3456", GidType::RoceV2, "rdma0"),
                Gid::zero(1),
                untyped(2, "::ffff:10.9.0.7"),
                Gid::zero(3),
            ],
        };
        assert_eq!(
            table.summary(),
            "rxe0 port 1: 0=fe80::5054:ff:fe12:3456 (RoCE v2, rdma0), \
             2=::ffff:10.9.0.7 (type ?, ndev ?), 2 slots all zeros"
        );
        let empty = GidTable {
            port: port(),
            slots: vec![Gid::zero(0)],
        };
        assert_eq!(
            empty.summary(),
            "rxe0 port 1: no visible GID, 1 slots all zeros"
        );
    }

    #[test]
    fn summary_is_bounded() {
        let long_type = GidType::Other("x".repeat(10_000));
        let slots = (0..1024u32)
            .map(|i| Gid {
                index: i,
                gid: Some(Ipv6Addr::new(
                    0xfe80, 0, 0, 0, 0xffff, 0xffff, 0xffff, i as u16,
                )),
                gid_type: Some(long_type.clone()),
                ndev: Some("y".repeat(10_000)),
            })
            .collect();
        let table = GidTable {
            port: port(),
            slots,
        };
        let summary = table.summary();
        assert!(summary.len() < 2048, "summary too long: {}", summary.len());
        assert!(summary.contains("15=fe80::ffff:ffff:ffff:f ("), "{summary}");
        assert!(!summary.contains("16=fe80"), "{summary}");
        assert!(summary.contains("… 1008 more"), "{summary}");
    }

    #[test]
    fn timeout_error_message_carries_the_table() {
        let err = WaitError::Timeout {
            last: Some(GidTable {
                port: port(),
                slots: vec![Gid::zero(0)],
            }),
        };
        assert!(
            err.to_string().contains("rxe0 port 1: no visible GID"),
            "{err}"
        );
        let err = WaitError::Timeout { last: None };
        assert!(err.to_string().ends_with("unreadable"), "{err}");
    }
}
