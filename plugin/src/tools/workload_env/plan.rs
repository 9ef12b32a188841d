//! Planning (pure): the NCCL/UCX settings for the rails, kept only when the library models
//! (select.rs) pick every rail's reported GID under them.

use std::net::IpAddr;

use super::select::{
    gid_address, gid_family, nccl_gid_index, ucx_gid_index, NcclEnv, NcclTypeRead, Prefix, UcxEnv,
    UcxVersion,
};
use super::{EnvError, Plan, Rail};

pub(super) fn hca(rail: &Rail) -> String {
    format!("{}:{}", rail.roce.rdma_device, rail.roce.port)
}

/// The settings for these rails, verified against the NCCL and UCX models.
pub fn plan(rails: &[Rail]) -> Result<Plan, EnvError> {
    let mut hcas: Vec<String> = Vec::new();
    for rail in rails {
        let h = hca(rail);
        if !hcas.contains(&h) {
            hcas.push(h);
        }
    }
    let hcas = hcas.join(",");
    let first = rails.first().map(|r| r.roce.gid_index);
    let same_index = rails.iter().all(|r| Some(r.roce.gid_index) == first);

    let mut plan = Plan {
        env: Vec::new(),
        unset: Vec::new(),
        notes: Vec::new(),
    };
    // `=` makes NCCL match device names exactly (mlx5_1 would otherwise also match mlx5_10).
    plan.env.push(("NCCL_IB_HCA", format!("={hcas}")));
    let (nccl, ucx) = if let (true, Some(index)) = (same_index, first) {
        plan.env.push(("NCCL_IB_GID_INDEX", index.to_string()));
        plan.env.push(("UCX_NET_DEVICES", hcas));
        plan.env.push(("UCX_IB_GID_INDEX", index.to_string()));
        plan.unset = vec![
            "NCCL_IB_ADDR_FAMILY",
            "NCCL_IB_ADDR_RANGE",
            "NCCL_IB_ROCE_VERSION_NUM",
            "UCX_IB_ROCE_SUBNETS",
        ];
        let nccl = NcclEnv {
            gid_index: Some(index),
            ..NcclEnv::default()
        };
        let ucx = UcxEnv {
            gid_index: Some(index),
            roce_subnets: Vec::new(),
        };
        (nccl, ucx)
    } else {
        let (nccl, ucx) = steer(rails)?;
        plan.env
            .push(("NCCL_IB_ADDR_FAMILY", nccl.family.name().to_string()));
        if let Some(range) = &nccl.range {
            plan.env.push(("NCCL_IB_ADDR_RANGE", range.to_string()));
        }
        plan.env
            .push(("NCCL_IB_ROCE_VERSION_NUM", nccl.roce_version.to_string()));
        plan.env.push(("UCX_NET_DEVICES", hcas));
        let subnets: Vec<String> = ucx.roce_subnets.iter().map(Prefix::to_string).collect();
        plan.env.push(("UCX_IB_ROCE_SUBNETS", subnets.join(",")));
        plan.unset = vec!["NCCL_IB_GID_INDEX", "UCX_IB_GID_INDEX"];
        if nccl.range.is_none() {
            plan.unset.push("NCCL_IB_ADDR_RANGE");
        }
        plan.notes.push(format!(
            "GID indexes differ between rails ({}): needs NCCL >= 2.21.5 (automatic GID \
             selection) and UCX >= 1.18 (UCX_IB_ROCE_SUBNETS)",
            rails
                .iter()
                .map(|r| format!("{}={}", r.ifname, r.roce.gid_index))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let strict_ok = rails
            .iter()
            .all(|r| nccl_gid_index(&r.table, &nccl, NcclTypeRead::Strict) == Ok(r.roce.gid_index));
        if !strict_ok {
            plan.notes.push(
                "NCCL 2.21-2.25 fail on this GID table (they abort on GID types unreadable from \
                 the pod); use NCCL >= 2.26"
                    .to_string(),
            );
        }
        (nccl, ucx)
    };
    verify(rails, &nccl, &ucx)?;
    Ok(plan)
}

/// Family/range for NCCL and subnets for UCX, when indexes differ between rails.
pub(super) fn steer(rails: &[Rail]) -> Result<(NcclEnv, UcxEnv), EnvError> {
    let family = gid_family(&rails[0].roce.gid);
    if let Some(other) = rails.iter().find(|r| gid_family(&r.roce.gid) != family) {
        return Err(EnvError::Unexpressible(format!(
            "rails {} and {} have GIDs of different families ({} and {}) at different \
             indexes, and NCCL_IB_ADDR_FAMILY applies to every rail; give the rails one family",
            rails[0].ifname, other.ifname, rails[0].roce.gid, other.roce.gid
        )));
    }
    let addrs: Vec<IpAddr> = rails.iter().map(|r| gid_address(&r.roce.gid)).collect();
    // NCCL takes one range for all rails: the longest prefix holding every rail's address is
    // the most selective; shorter ones are tried in case a quirk of the scan needs them.
    let longest = common_prefix_len(&addrs);
    let mut nccl = None;
    for len in (0..=longest).rev() {
        let candidate = NcclEnv {
            gid_index: None,
            family,
            range: (len > 0).then(|| Prefix::new(addrs[0], len)),
            roce_version: 2,
        };
        let all = rails.iter().all(|r| {
            nccl_gid_index(&r.table, &candidate, NcclTypeRead::Tolerant) == Ok(r.roce.gid_index)
        });
        if all {
            nccl = Some(candidate);
            break;
        }
    }
    let Some(nccl) = nccl else {
        let range = NcclEnv {
            gid_index: None,
            family,
            range: Some(Prefix::new(addrs[0], longest)),
            roce_version: 2,
        };
        let wrong: Vec<String> = rails
            .iter()
            .filter_map(
                |r| match nccl_gid_index(&r.table, &range, NcclTypeRead::Tolerant) {
                    Ok(i) if i == r.roce.gid_index => None,
                    Ok(i) => Some(format!(
                        "on {} ({}) NCCL would take index {i}, not {}",
                        r.ifname,
                        hca(r),
                        r.roce.gid_index
                    )),
                    Err(e) => Some(format!("on {}: {e}", r.ifname)),
                },
            )
            .collect();
        return Err(EnvError::Unexpressible(format!(
            "with NCCL_IB_ADDR_FAMILY={} NCCL_IB_ADDR_RANGE={} {}",
            family.name(),
            range.range.map_or_else(String::new, |r| r.to_string()),
            wrong.join("; ")
        )));
    };
    // UCX takes a list: each rail's own address, exactly.
    let mut roce_subnets: Vec<Prefix> = Vec::new();
    for addr in &addrs {
        let p = Prefix::new(*addr, if addr.is_ipv4() { 32 } else { 128 });
        if !roce_subnets.contains(&p) {
            roce_subnets.push(p);
        }
    }
    let ucx = UcxEnv {
        gid_index: None,
        roce_subnets,
    };
    Ok((nccl, ucx))
}

/// Length of the longest prefix shared by all addresses (all of one family).
pub(super) fn common_prefix_len(addrs: &[IpAddr]) -> u8 {
    let bits = |a: &IpAddr| match a {
        IpAddr::V4(v) => (u128::from(u32::from(*v)) << 96, 32u32),
        IpAddr::V6(v) => (u128::from(*v), 128u32),
    };
    let (first, width) = bits(&addrs[0]);
    let diff = addrs.iter().fold(0u128, |acc, a| acc | (bits(a).0 ^ first));
    diff.leading_zeros().min(width) as u8
}

/// Every model must land on every rail's reported GID.
pub(super) fn verify(rails: &[Rail], nccl: &NcclEnv, ucx: &UcxEnv) -> Result<(), EnvError> {
    for rail in rails {
        let want = rail.roce.gid_index;
        let n = nccl_gid_index(&rail.table, nccl, NcclTypeRead::Tolerant);
        if n != Ok(want) {
            return Err(EnvError::Unexpressible(format!(
                "on {} ({}) NCCL would use {n:?} instead of GID index {want} (two attachments on \
                 one RDMA port?)",
                rail.ifname,
                hca(rail)
            )));
        }
        for version in [UcxVersion::V1_18, UcxVersion::V1_21] {
            let u = ucx_gid_index(&rail.table, ucx, version);
            if u != Ok(want) {
                return Err(EnvError::Unexpressible(format!(
                    "on {} ({}) UCX ({version:?}) would use {u:?} instead of GID index {want}",
                    rail.ifname,
                    hca(rail)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernel::rdma::Gid;
    use crate::protocol::cni::Roce;
    use crate::tools::workload_env::select::tests::EMPTY;
    use crate::tools::workload_env::select::{self, Family};
    use crate::tools::workload_env::EnvError;

    pub(crate) fn s(gid: &str, version: u8) -> Gid {
        select::tests::s(gid, Some(version))
    }

    pub(crate) fn rail(ifname: &str, dev: &str, index: u32, gid: &str, table: Vec<Gid>) -> Rail {
        Rail {
            ifname: ifname.into(),
            roce: Roce {
                rdma_device: dev.into(),
                port: 1,
                gid_index: index,
                gid: gid.parse().unwrap(),
                gid_type: "RoCE v2".into(),
            },
            table,
        }
    }

    fn get<'a>(plan: &'a Plan, key: &str) -> Option<&'a str> {
        plan.env
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Parses the printed settings back into the models' inputs, as the libraries would.
    fn envs_from(plan: &Plan) -> (NcclEnv, UcxEnv) {
        let prefix = |s: &str| {
            let (a, l) = s.split_once('/').unwrap();
            Prefix::new(a.parse().unwrap(), l.parse().unwrap())
        };
        let nccl = NcclEnv {
            gid_index: get(plan, "NCCL_IB_GID_INDEX").map(|v| v.parse().unwrap()),
            family: match get(plan, "NCCL_IB_ADDR_FAMILY") {
                Some("AF_INET6") => Family::Inet6,
                _ => Family::Inet,
            },
            range: get(plan, "NCCL_IB_ADDR_RANGE").map(prefix),
            roce_version: get(plan, "NCCL_IB_ROCE_VERSION_NUM").map_or(2, |v| v.parse().unwrap()),
        };
        let ucx = UcxEnv {
            gid_index: get(plan, "UCX_IB_GID_INDEX").map(|v| v.parse().unwrap()),
            roce_subnets: get(plan, "UCX_IB_ROCE_SUBNETS")
                .map(|v| v.split(',').map(prefix).collect())
                .unwrap_or_default(),
        };
        (nccl, ucx)
    }

    /// The printed settings make every model pick each rail's reported GID.
    fn assert_models_pick_reported(rails: &[Rail]) -> Plan {
        let plan = plan(rails).expect("settings exist");
        let (nccl, ucx) = envs_from(&plan);
        for r in rails {
            let want = Ok(r.roce.gid_index);
            assert_eq!(
                nccl_gid_index(&r.table, &nccl, NcclTypeRead::Tolerant),
                want,
                "NCCL on {}",
                r.ifname
            );
            for v in [UcxVersion::V1_18, UcxVersion::V1_21] {
                assert_eq!(
                    ucx_gid_index(&r.table, &ucx, v),
                    want,
                    "UCX {v:?} on {}",
                    r.ifname
                );
            }
        }
        assert!(get(&plan, "NCCL_IB_HCA").unwrap().starts_with('='));
        plan
    }

    /// rxe on an upstream kernel: the host's link-local GID, then the pod's.
    pub(crate) fn upstream_v4(pod_ip: &str, extra_before: &[&str]) -> (Vec<Gid>, u32) {
        let mut t = vec![s("fe80::5054:ff:fe00:1", 2)];
        for e in extra_before {
            t.push(s(&format!("::ffff:{e}"), 2));
        }
        t.push(s(&format!("::ffff:{pod_ip}"), 2));
        let index = t.len() as u32 - 1;
        t.extend(vec![EMPTY; 3]);
        (t, index)
    }

    #[test]
    fn ipv4_rails_same_index() {
        let rails: Vec<Rail> = (0..4)
            .map(|i| {
                let ip = format!("10.9.{i}.7");
                let (t, idx) = upstream_v4(&ip, &[]);
                rail(
                    &format!("net{}", i + 1),
                    &format!("rxe{i}"),
                    idx,
                    &format!("::ffff:{ip}"),
                    t,
                )
            })
            .collect();
        let plan = assert_models_pick_reported(&rails);
        assert_eq!(
            get(&plan, "NCCL_IB_HCA"),
            Some("=rxe0:1,rxe1:1,rxe2:1,rxe3:1")
        );
        assert_eq!(
            get(&plan, "UCX_NET_DEVICES"),
            Some("rxe0:1,rxe1:1,rxe2:1,rxe3:1")
        );
        assert_eq!(get(&plan, "NCCL_IB_GID_INDEX"), Some("1"));
        assert_eq!(get(&plan, "UCX_IB_GID_INDEX"), Some("1"));
        assert!(plan.unset.contains(&"UCX_IB_ROCE_SUBNETS"));
        assert!(plan.notes.is_empty());
    }

    #[test]
    fn ipv4_rails_mixed_indexes_with_host_gids_first() {
        // On net2's rail the host's own addresses took the first slots.
        let (t1, i1) = upstream_v4("10.9.0.7", &[]);
        let (t2, i2) = upstream_v4("10.9.1.7", &["192.168.1.10", "192.168.1.11"]);
        let rails = vec![
            rail("net1", "mlx5_6", i1, "::ffff:10.9.0.7", t1),
            rail("net2", "mlx5_7", i2, "::ffff:10.9.1.7", t2),
        ];
        let plan = assert_models_pick_reported(&rails);
        assert_eq!(get(&plan, "NCCL_IB_GID_INDEX"), None);
        assert_eq!(get(&plan, "NCCL_IB_ADDR_FAMILY"), Some("AF_INET"));
        assert_eq!(get(&plan, "NCCL_IB_ADDR_RANGE"), Some("10.9.0.0/23"));
        assert_eq!(
            get(&plan, "UCX_IB_ROCE_SUBNETS"),
            Some("10.9.0.7/32,10.9.1.7/32")
        );
        assert!(plan.unset.contains(&"NCCL_IB_GID_INDEX"));
        assert!(plan.unset.contains(&"UCX_IB_GID_INDEX"));
    }

    #[test]
    fn ipv4_mixed_indexes_that_no_range_can_separate() {
        // 10.9.1.3 (another pod) sits below ours and inside every range holding both rails.
        let (t1, i1) = upstream_v4("10.9.0.7", &[]);
        let (t2, i2) = upstream_v4("10.9.1.7", &["10.9.0.8"]);
        let rails = vec![
            rail("net1", "mlx5_6", i1, "::ffff:10.9.0.7", t1),
            rail("net2", "mlx5_7", i2, "::ffff:10.9.1.7", t2),
        ];
        let err = plan(&rails).unwrap_err();
        assert!(matches!(err, EnvError::Unexpressible(_)), "{err}");
        assert!(
            err.to_string()
                .contains("on net2 (mlx5_7:1) NCCL would take index 1, not 2"),
            "{err}"
        );
    }

    /// IPv6 SLAAC rail: the placeholder fd01:0:0:100::/112 GID sits below the SLAAC global.
    fn slaac_table(placeholder: bool, global: &str, hidden_host: bool) -> (Vec<Gid>, u32) {
        let host_ll = if hidden_host {
            EMPTY
        } else {
            s("fe80::5054:ff:fe00:1", 2)
        };
        let mut t = vec![host_ll];
        if placeholder {
            t.push(s("fd01:0:0:100::2", 2));
        }
        t.push(s("fe80::5054:ff:fe00:1", 2)); // the child's link-local (same MAC)
        t.push(s(global, 2));
        let index = t.len() as u32 - 1;
        t.push(EMPTY);
        (t, index)
    }

    #[test]
    fn ipv6_with_placeholder_on_some_rails() {
        let (t1, i1) = slaac_table(true, "2001:db8:0:1:5054:ff:fe00:1", false);
        let (t2, i2) = slaac_table(false, "2001:db8:0:2:5054:ff:fe00:2", false);
        assert_ne!(i1, i2);
        let rails = vec![
            rail("net1", "mlx5_6", i1, "2001:db8:0:1:5054:ff:fe00:1", t1),
            rail("net2", "mlx5_7", i2, "2001:db8:0:2:5054:ff:fe00:2", t2),
        ];
        let plan = assert_models_pick_reported(&rails);
        assert_eq!(get(&plan, "NCCL_IB_ADDR_FAMILY"), Some("AF_INET6"));
        assert_eq!(get(&plan, "NCCL_IB_ADDR_RANGE"), Some("2001:db8::/62"));
        assert_eq!(
            get(&plan, "UCX_IB_ROCE_SUBNETS"),
            Some("2001:db8:0:1:5054:ff:fe00:1/128,2001:db8:0:2:5054:ff:fe00:2/128")
        );
    }

    #[test]
    fn ipv6_with_placeholder_on_every_rail_same_index() {
        let (t1, i1) = slaac_table(true, "2001:db8:0:1::1", false);
        let (t2, i2) = slaac_table(true, "2001:db8:0:2::2", false);
        assert_eq!(i1, i2);
        let rails = vec![
            rail("net1", "mlx5_6", i1, "2001:db8:0:1::1", t1),
            rail("net2", "mlx5_7", i2, "2001:db8:0:2::2", t2),
        ];
        let plan = assert_models_pick_reported(&rails);
        assert_eq!(get(&plan, "NCCL_IB_GID_INDEX"), Some("3"));
    }

    #[test]
    fn ipv6_without_placeholder() {
        let (t1, i1) = slaac_table(false, "2001:db8:0:1::1", false);
        let rails = vec![rail("net1", "mlx5_6", i1, "2001:db8:0:1::1", t1)];
        let plan = assert_models_pick_reported(&rails);
        assert_eq!(get(&plan, "NCCL_IB_GID_INDEX"), Some("2"));
        assert_eq!(get(&plan, "UCX_IB_GID_INDEX"), Some("2"));
    }

    #[test]
    fn ofed_view_hidden_host_gids_needs_nccl_226() {
        // DOCA-OFED: the host's GIDs read as zeros from the pod (no type either).
        let (t1, i1) = slaac_table(true, "2001:db8:0:1::1", true);
        let (t2, i2) = slaac_table(false, "2001:db8:0:2::2", true);
        let rails = vec![
            rail("net1", "mlx5_6", i1, "2001:db8:0:1::1", t1),
            rail("net2", "mlx5_7", i2, "2001:db8:0:2::2", t2),
        ];
        let plan = assert_models_pick_reported(&rails);
        assert!(
            plan.notes.iter().any(|n| n.contains("NCCL >= 2.26")),
            "{:?}",
            plan.notes
        );
    }

    #[test]
    fn ofed_view_ipv4_mixed() {
        let hidden = |pod: &str, zeros: usize| {
            let mut t = vec![EMPTY; zeros];
            t.push(s(pod, 2));
            t.push(EMPTY);
            t
        };
        let rails = vec![
            rail(
                "net1",
                "mlx5_6",
                1,
                "::ffff:10.9.0.7",
                hidden("::ffff:10.9.0.7", 1),
            ),
            rail(
                "net2",
                "mlx5_7",
                4,
                "::ffff:10.9.1.7",
                hidden("::ffff:10.9.1.7", 4),
            ),
        ];
        let plan = assert_models_pick_reported(&rails);
        assert!(
            plan.notes.iter().all(|n| !n.contains("2.26")),
            "{:?}",
            plan.notes
        );
    }

    #[test]
    fn mixed_families_with_differing_indexes_refused() {
        let (t1, i1) = upstream_v4("10.9.0.7", &[]);
        let (t2, i2) = slaac_table(true, "2001:db8:0:2::2", false);
        let rails = vec![
            rail("net1", "mlx5_6", i1, "::ffff:10.9.0.7", t1),
            rail("net2", "mlx5_7", i2, "2001:db8:0:2::2", t2),
        ];
        assert!(matches!(plan(&rails), Err(EnvError::Unexpressible(_))));
    }

    #[test]
    fn common_prefix() {
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(common_prefix_len(&[a("10.9.0.7")]), 32);
        assert_eq!(common_prefix_len(&[a("10.9.0.7"), a("10.9.1.7")]), 23);
        assert_eq!(
            common_prefix_len(&[a("2001:db8::1"), a("2001:db8::1")]),
            128
        );
    }
}
