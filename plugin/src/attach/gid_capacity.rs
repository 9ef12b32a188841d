//! Room in a rail's GID table for one more child, checked before ADD creates it.
//!
//! Each address of a child becomes entries of its rail's GID table, one per RoCE version the
//! port supports (v1 and v2 on ConnectX; v2 only on Soft-RoCE since Linux 5.x): on ConnectX 2
//! for an IPv4 child (IPv6 off, ipv6.rs), 4 with its IPv6 link-local (`ipv6.linkLocal`), 4 to
//! 6 on a routed IPv6 rail (link-local, SLAAC, a placeholder). The table is small (ConnectX: 255 or 256 slots per port; Soft-RoCE:
//! 1024), and when it is full the kernel adds nothing (`ib_cache_gid_add` fails with ENOSPC, one
//! line in the kernel log): without this check ADD would wait its whole GID timeout for a GID
//! that can never appear, then report 104.
//!
//! Counted from the node's network namespace: a slot that reads non-zero is used (the node's
//! own addresses on the rail, and pods' children on kernels that show them). DOCA-OFED's
//! namespace check makes the GIDs of children in pods read as zeros from there, so those are
//! counted from the attachment records (pod_record.rs: each child's slot count), for records of
//! this port whose GID the node does not see and whose network namespace still exists. What
//! neither shows (children of another plugin in pods on an OFED kernel, or of roce-ipvlan under
//! a runtime that leaves no record: plain libcni, podman) is not counted; there the check can
//! pass and ADD still time out, and ADD then checks again (`is_full`) to say why.

use std::io;
use std::path::Path;

use crate::attach::pod_record::Record;
use crate::kernel::rdma::{RdmaPort, Sysfs};
use crate::protocol::config::NetConf;
use crate::protocol::error::{Error, Result};

/// One port's table, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub port: RdmaPort,
    /// The table's length.
    pub slots: usize,
    /// Slots that read non-zero from the node's namespace.
    pub visible: usize,
    /// Slots the node does not see, taken by the children of `hidden_children` records.
    pub hidden: usize,
    pub hidden_children: usize,
    /// Entries per address: how many slots hold the value of the first visible entry (1 or 2;
    /// 2, RoCE v1 and v2, when nothing is visible).
    pub types: usize,
}

impl Usage {
    pub fn used(&self) -> usize {
        (self.visible + self.hidden).min(self.slots)
    }

    pub fn free(&self) -> usize {
        self.slots - self.used()
    }

    /// `1000 of 1024 slots used: 988 seen from the node, 12 of 3 pods' children the node cannot
    /// see (their attachment records)`.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{} of {} slots used: {} seen from the node's network namespace",
            self.used(),
            self.slots,
            self.visible
        );
        if self.hidden_children > 0 {
            text.push_str(&format!(
                ", {} taken by {} pods' children the node cannot see (DOCA-OFED's namespace \
                 check; counted from their attachment records)",
                self.hidden, self.hidden_children
            ));
        }
        text
    }
}

/// Counts `port`'s table as this thread's namespace sees it (the node's: ADD's main thread,
/// `ready`), adding the hidden slots of `records`.
pub fn measure(sysfs: &Sysfs, port: &RdmaPort, records: &[Record]) -> io::Result<Usage> {
    let values = sysfs.gid_values(port)?;
    let visible = values.iter().flatten().count();
    let types = values
        .iter()
        .flatten()
        .next()
        .map_or(2, |first| {
            values.iter().flatten().filter(|v| *v == first).count()
        })
        .clamp(1, 2);
    let (mut hidden, mut hidden_children) = (0, 0);
    for record in records {
        if let Some(ns) = &record.netns {
            if !Path::new(ns).exists() {
                continue;
            }
        }
        for child in &record.rails {
            if child.device != port.device || child.port != port.port {
                continue;
            }
            let seen = child
                .gid
                .parse::<std::net::Ipv6Addr>()
                .ok()
                .zip(values.get(child.gid_index as usize).copied().flatten())
                .is_some_and(|(gid, value)| gid == value);
            if seen {
                continue;
            }
            hidden_children += 1;
            hidden += child
                .gid_slots
                .map_or(types * (child.addresses.len() + 1), |n| n as usize);
        }
    }
    Ok(Usage {
        port: port.clone(),
        slots: values.len(),
        visible,
        hidden,
        hidden_children,
        types,
    })
}

/// The addresses a child of `conf` has at least, before IPAM answers: the IPAM address (one,
/// or the SLAAC rail's placeholder), the link-local one when IPv6 stays on, and the SLAAC one.
pub fn addresses_needed(conf: &NetConf) -> usize {
    let ipam = usize::from(conf.ipam.is_some() || conf.slaac.is_none());
    let slaac = usize::from(conf.slaac.is_some());
    ipam + slaac + usize::from(conf.ipv6_link_local)
}

/// The slots a finished child takes: `addresses` of its own (IPAM's and SLAAC's), and the
/// link-local one when IPv6 is on.
pub fn slots_taken(usage_types: usize, addresses: usize, ipv6_on: bool) -> usize {
    usage_types * (addresses + usize::from(ipv6_on))
}

/// Fails with 110 when the table has no room for `need` more entries.
pub fn check(rail: &str, usage: &Usage, need: usize) -> Result<()> {
    if usage.free() >= need {
        return Ok(());
    }
    Err(full(rail, usage, need))
}

/// The error of a full table: which rail, what takes it, what to do.
pub fn full(rail: &str, usage: &Usage, need: usize) -> Error {
    Error::GidTableFull(format!(
        "the GID table of rail {rail} ({}) has room for {} more entries, expected at least {need} \
         for this child ({} per address, one per RoCE version the port supports): {}. The \
         kernel adds no GID to a full table, so the pod could not get one. Free slots: delete \
         pods that no longer need this rail, keep IPv6 off on IPv4 rails (leave \
         \"ipv6.linkLocal\" out: {} entries less per child), remove addresses of {rail} on the \
         node, or cap the pods per rail (the device plugin's resource count); `roce-ipvlan \
         diagnose` lists the table",
        usage.port,
        usage.free(),
        usage.types,
        usage.describe(),
        usage.types,
    ))
}

/// Reads the records ADD and `ready` count (none when there are none or they cannot be read:
/// the check then counts what the node sees).
pub fn records() -> Vec<Record> {
    let dir = Path::new(crate::attach::pod_record::DIR);
    match crate::attach::pod_record::read_all(dir) {
        Ok(entries) => entries.into_iter().filter_map(|(_, r)| r.ok()).collect(),
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "cannot read the attachment records: the GID capacity check counts only what the node sees");
            Vec::new()
        }
    }
}

/// Whether `port`'s table has no room for one more address (after a GID wait timed out).
pub fn is_full(port: &RdmaPort) -> Option<Usage> {
    let usage = measure(&Sysfs::system(), port, &records()).ok()?;
    (usage.free() < usage.types).then_some(usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::pod_record::{PodRef, Rail, VERSION};
    use std::fs;
    use tempfile::TempDir;

    fn rxe0() -> RdmaPort {
        RdmaPort {
            device: "rxe0".into(),
            port: 1,
        }
    }

    /// A port of `slots` with `used` slots taken, two per value (v1 and v2).
    fn table(root: &Path, slots: u32, used: u32) {
        let dir = root.join("class/infiniband/rxe0/ports/1/gids");
        fs::create_dir_all(&dir).unwrap();
        for i in 0..slots {
            let text = if i < used {
                format!("0000:0000:0000:0000:0000:ffff:0a00:{:04x}", i / 2 + 1)
            } else {
                "0000:0000:0000:0000:0000:0000:0000:0000".into()
            };
            fs::write(dir.join(i.to_string()), text + "\n").unwrap();
        }
    }

    fn record(netns: Option<String>, gid_index: u32, gid_slots: Option<u32>) -> Record {
        Record {
            version: VERSION,
            network: "rails".into(),
            container_id: "c1".into(),
            ifname: "net1".into(),
            pod: PodRef {
                namespace: "ml".into(),
                name: "p".into(),
                uid: "u".into(),
            },
            rails: vec![Rail {
                interface: "net1".into(),
                rail: "rdma0".into(),
                device: "rxe0".into(),
                port: 1,
                gid_index,
                gid: "0000:0000:0000:0000:0000:ffff:0a09:0002".into(),
                addresses: vec!["10.9.0.2/16".parse().unwrap()],
                gid_slots,
            }],
            netns,
        }
    }

    #[test]
    fn counts_what_the_node_sees_and_the_records_it_cannot() {
        let tmp = TempDir::new().unwrap();
        table(tmp.path(), 16, 10);
        let sysfs = Sysfs::new(tmp.path());
        let alive = Some(tmp.path().display().to_string());
        let gone = Some(tmp.path().join("gone").display().to_string());
        let u = measure(&sysfs, &rxe0(), &[]).unwrap();
        assert_eq!((u.slots, u.visible, u.hidden, u.types), (16, 10, 0, 2));
        assert_eq!(u.free(), 6);
        // A child the node cannot see counts its recorded slots; one of a record of 0.1 counts
        // two types per address and link-local; a gone namespace, or another port, nothing.
        let mut other = record(None, 12, Some(2));
        other.rails[0].device = "rxe1".into();
        let u = measure(
            &sysfs,
            &rxe0(),
            &[
                record(alive, 12, Some(2)),
                record(None, 13, None),
                record(gone, 14, Some(2)),
                other,
            ],
        )
        .unwrap();
        assert_eq!((u.hidden, u.hidden_children), (6, 2));
        assert_eq!(u.free(), 0);
        assert!(
            u.describe().contains("16 of 16 slots used"),
            "{}",
            u.describe()
        );
        assert_eq!(check("rdma0", &u, 2).unwrap_err().code(), 110);
    }

    #[test]
    fn a_child_the_node_sees_is_not_counted_twice() {
        let tmp = TempDir::new().unwrap();
        table(tmp.path(), 16, 2);
        let dir = tmp.path().join("class/infiniband/rxe0/ports/1/gids");
        fs::write(dir.join("4"), "0000:0000:0000:0000:0000:ffff:0a09:0002\n").unwrap();
        let u = measure(
            &Sysfs::new(tmp.path()),
            &rxe0(),
            &[record(None, 4, Some(2))],
        )
        .unwrap();
        assert_eq!((u.visible, u.hidden), (3, 0));
    }

    #[test]
    fn the_message_says_which_rail_what_is_used_and_what_to_do() {
        let tmp = TempDir::new().unwrap();
        table(tmp.path(), 8, 7);
        let u = measure(&Sysfs::new(tmp.path()), &rxe0(), &[]).unwrap();
        assert!(check("rdma0", &u, 1).is_ok());
        let msg = check("rdma0", &u, 2).unwrap_err().to_string();
        for part in [
            "rail rdma0 (rxe0 port 1)",
            "room for 1 more entries, expected at least 2",
            "7 of 8 slots used",
            "ipv6.linkLocal",
            "diagnose",
        ] {
            assert!(msg.contains(part), "{part:?} in {msg}");
        }
    }

    #[test]
    fn addresses_a_child_needs_at_least() {
        let parse = |extra: &str| {
            let text = format!(
                r#"{{"cniVersion":"1.0.0","name":"n","type":"roce-ipvlan","master":"rdma0"{extra}}}"#
            );
            NetConf::parse(text.as_bytes(), "net1").unwrap()
        };
        let ipam = r#","ipam":{"type":"host-local","subnet":"10.9.0.0/16"}"#;
        assert_eq!(addresses_needed(&parse(ipam)), 1);
        assert_eq!(
            addresses_needed(&parse(&format!(r#"{ipam},"ipv6":{{"linkLocal":true}}"#))),
            2
        );
        assert_eq!(addresses_needed(&parse(r#","ipv6":{"slaac":true}"#)), 2);
        assert_eq!(
            addresses_needed(&parse(&format!(r#"{ipam},"ipv6":{{"slaac":true}}"#))),
            3
        );
        assert_eq!(slots_taken(2, 1, false), 2);
        assert_eq!(slots_taken(2, 1, true), 4);
    }
}
