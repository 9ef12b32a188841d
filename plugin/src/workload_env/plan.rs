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
