//! Discovery: this namespace's roce-ipvlan rails (the interface aliases ADD writes), each
//! checked against its port's GID table as this namespace sees it.

use std::fs;
use std::path::Path;

use super::{EnvError, Rail};
use crate::kernel::rdma::{Gid, GidTable, GidType, RdmaPort, Sysfs};
use crate::protocol::cni::Roce;

/// Finds this netns's roce-ipvlan rails under `<sys>/class/net`, in ifindex order, each
/// checked against its port's GID table under `<sys>/class/infiniband`.
pub fn discover(sys: &Path) -> Result<Vec<Rail>, EnvError> {
    let dir = sys.join("class/net");
    let io_err = |what: String| move |source| EnvError::Io { what, source };
    let entries = fs::read_dir(&dir).map_err(io_err(dir.display().to_string()))?;
    let mut found = Vec::new();
    let mut scanned = 0;
    for entry in entries {
        let entry = entry.map_err(io_err(dir.display().to_string()))?;
        let ifname = entry.file_name().to_string_lossy().into_owned();
        scanned += 1;
        // Interfaces without an alias file (or unreadable ones) are simply not rails.
        let Ok(alias) = fs::read_to_string(entry.path().join("ifalias")) else {
            continue;
        };
        let Some(roce) = Roce::from_ifalias(alias.trim()) else {
            continue;
        };
        let ifindex = fs::read_to_string(entry.path().join("ifindex"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(u32::MAX);
        found.push((ifindex, ifname, roce));
    }
    if found.is_empty() {
        return Err(EnvError::NoRails {
            scanned,
            dir: dir.display().to_string(),
        });
    }
    found.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let sysfs = Sysfs::new(sys);
    found
        .into_iter()
        .map(|(_, ifname, roce)| {
            let port = RdmaPort {
                device: roce.rdma_device.clone(),
                port: roce.port,
            };
            let table = sysfs.read_gid_table(&port).map_err(|source| EnvError::Io {
                what: format!("the GID table of {port} (rail {ifname})"),
                source,
            })?;
            check_rail(ifname, roce, &table)
        })
        .collect()
}

/// Checks that the table holds the alias's GID at its index with type RoCE v2, and converts
/// the table into the libraries' view.
pub fn check_rail(ifname: String, roce: Roce, table: &GidTable) -> Result<Rail, EnvError> {
    let at = table.slots.iter().find(|slot| slot.index == roce.gid_index);
    let found = match at {
        None => Some(format!(
            "the port has no slot {} ({} slots)",
            roce.gid_index,
            table.slots.len()
        )),
        Some(Gid { gid: None, .. }) => Some("that slot is empty as seen from here".to_string()),
        Some(Gid {
            gid: Some(gid),
            gid_type,
            ..
        }) => {
            if *gid != roce.gid {
                Some(format!("that slot holds {gid}"))
            } else if gid_type.as_ref() != Some(&GidType::RoceV2) {
                Some(format!(
                    "that slot's type is {}",
                    gid_type
                        .as_ref()
                        .map_or_else(|| "unreadable".to_string(), |t| t.to_string())
                ))
            } else {
                None
            }
        }
    };
    if let Some(found) = found {
        return Err(EnvError::StaleGid {
            port: table.port.clone(),
            ifname,
            gid: roce.gid,
            index: roce.gid_index,
            found,
        });
    }
    // The models go by position: slot i at position i, a gap read as zeros.
    let len = table
        .slots
        .iter()
        .map(|slot| slot.index as usize + 1)
        .max()
        .unwrap_or(0);
    let mut slots: Vec<Gid> = (0..len as u32).map(Gid::zero).collect();
    for slot in &table.slots {
        slots[slot.index as usize] = slot.clone();
    }
    Ok(Rail {
        ifname,
        roce,
        table: slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::workload_env::plan::tests::rail;

    fn table(slots: Vec<Gid>) -> GidTable {
        GidTable {
            port: RdmaPort {
                device: "rxe0".into(),
                port: 1,
            },
            slots,
        }
    }

    fn entry(index: u32, gid: &str, t: GidType) -> Gid {
        Gid {
            index,
            gid: Some(gid.parse().unwrap()),
            gid_type: Some(t),
            ndev: Some("net1".into()),
        }
    }

    #[test]
    fn stale_gid_is_an_error_naming_the_rail() {
        let roce = rail("net1", "rxe0", 1, "::ffff:10.9.0.7", vec![]).roce;
        let gone = table(vec![entry(0, "fe80::1", GidType::RoceV2), Gid::zero(1)]);
        let err = check_rail("net1".into(), roce.clone(), &gone).unwrap_err();
        assert!(
            err.to_string().starts_with("rail net1 (rxe0 port 1)"),
            "{err}"
        );
        assert!(err.to_string().contains("empty"), "{err}");
        let moved = table(vec![entry(1, "::ffff:10.9.0.8", GidType::RoceV2)]);
        assert!(check_rail("net1".into(), roce.clone(), &moved)
            .unwrap_err()
            .to_string()
            .contains("holds ::ffff:10.9.0.8"));
        let v1 = table(vec![entry(1, "::ffff:10.9.0.7", GidType::RoceV1)]);
        assert!(check_rail("net1".into(), roce.clone(), &v1).is_err());
        let short = table(vec![Gid::zero(0)]);
        assert!(check_rail("net1".into(), roce.clone(), &short).is_err());
        let ok = table(vec![
            Gid::zero(0),
            entry(1, "::ffff:10.9.0.7", GidType::RoceV2),
        ]);
        let r = check_rail("net1".into(), roce.clone(), &ok).unwrap();
        assert_eq!(r.table, ok.slots);
        // A gap in the slots (not seen from sysfs) reads as zeros at its position.
        let gap = table(vec![entry(1, "::ffff:10.9.0.7", GidType::RoceV2)]);
        let r = check_rail("net1".into(), roce, &gap).unwrap();
        assert_eq!(r.table, ok.slots);
    }
}
