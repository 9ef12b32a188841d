//! How NCCL and UCX pick a RoCE GID index, as pure functions of a GID table and their settings.
//!
//! Written from the libraries' source (see docs/workload-env.md for the versions):
//! - NCCL: `ncclIbGetGidIndex` / `ncclUpdateGidIndex` / `matchGidAddrPrefix` / `validGid` in
//!   `src/transport/net_ib.cc` (2.21.5 … 2.28) and `src/transport/net_ib/connect.cc` (2.29 …).
//!   Automatic selection exists since 2.21.5, when `NCCL_IB_GID_INDEX` (default -1) is unset.
//! - UCX: `uct_ib_device_select_gid` / `uct_ib_device_query_gid_info` in
//!   `src/uct/ib/base/ib_device.c`, `UCX_IB_ROCE_SUBNETS` in `ib_iface.c` (since 1.18.0).
//!
//! `roce-ipvlan env` runs these models on the pod's own view of each rail's GID table and
//! prints only settings under which every model lands on the rail's reported GID.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::kernel::rdma::Gid;

/// What `ibv_query_gid` returns for a slot: all zeros for an empty slot, and on
/// DOCA-OFED/MLNX_OFED for a GID whose netdev lives in another namespace.
fn value(slot: &Gid) -> Ipv6Addr {
    slot.gid.unwrap_or(Ipv6Addr::UNSPECIFIED)
}

/// An address family as both libraries derive it from a GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Inet,
    Inet6,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "AF_INET",
            Family::Inet6 => "AF_INET6",
        }
    }
}

/// IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-mapped multicast (`ff0e::ffff:a.b.c.d`) GIDs are
/// AF_INET, everything else (including all zeros) AF_INET6: NCCL's `getGidAddrFamily` and
/// UCX's `uct_ib_device_get_addr_family` agree.
pub fn gid_family(gid: &Ipv6Addr) -> Family {
    let w = words(gid);
    let mapped = w[0] == 0 && w[1] == 0 && w[2] == 0xffff;
    let mapped_mcast = w[0] == 0xff0e_0000 && w[1] == 0 && w[2] == 0xffff;
    if mapped || mapped_mcast {
        Family::Inet
    } else {
        Family::Inet6
    }
}

fn words(gid: &Ipv6Addr) -> [u32; 4] {
    let b = gid.octets();
    std::array::from_fn(|i| {
        u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    })
}

/// An address prefix, `addr/len`, as NCCL_IB_ADDR_RANGE and UCX_IB_ROCE_SUBNETS spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    /// The prefix of length `len` containing `addr`, host bits cleared.
    pub fn new(addr: IpAddr, len: u8) -> Prefix {
        let addr = match addr {
            IpAddr::V4(a) => {
                let len = len.min(32);
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let len = len.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        Prefix { addr, len }
    }

    pub fn family(&self) -> Family {
        match self.addr {
            IpAddr::V4(_) => Family::Inet,
            IpAddr::V6(_) => Family::Inet6,
        }
    }

    fn contains_bits(&self, value: u128, width: u32) -> bool {
        let len = u32::from(self.len).min(width);
        let base = match self.addr {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        if len == 0 {
            return true;
        }
        let shift = width - len;
        (base >> shift) == (value >> shift)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The address a GID stands for in its family: the last 32 bits for AF_INET.
pub fn gid_address(gid: &Ipv6Addr) -> IpAddr {
    match gid_family(gid) {
        Family::Inet => IpAddr::V4(words(gid)[3].into()),
        Family::Inet6 => IpAddr::V6(*gid),
    }
}

// ---------------------------------------------------------------------------------------------
// NCCL

/// The NCCL settings that steer its GID choice on RoCE ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclEnv {
    /// NCCL_IB_GID_INDEX; None is the default -1 (automatic).
    pub gid_index: Option<u32>,
    /// NCCL_IB_ADDR_FAMILY (default AF_INET).
    pub family: Family,
    /// NCCL_IB_ADDR_RANGE (default: none).
    pub range: Option<Prefix>,
    /// NCCL_IB_ROCE_VERSION_NUM (default 2).
    pub roce_version: u8,
}

impl Default for NcclEnv {
    fn default() -> Self {
        NcclEnv {
            gid_index: None,
            family: Family::Inet,
            range: None,
            roce_version: 2,
        }
    }
}

/// Which NCCL behaviour to model for a GID type that cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcclTypeRead {
    /// 2.21.5 … 2.25: `ncclIbRoceGetVersionNum` fails the whole init (ncclSystemError).
    Strict,
    /// 2.26 and later: EINVAL leaves the version unknown and the scan goes on.
    Tolerant,
}

/// NCCL's `validGid`: configured (not all zeros, not a bare `fe80::`) and not link-local.
fn nccl_valid(gid: &Ipv6Addr) -> bool {
    let w = words(gid);
    let trailer = w[1] | w[2] | w[3];
    let configured = !((w[0] | trailer) == 0 || (w[0] == 0xfe80_0000 && trailer == 0));
    let link_local = w[0] == 0xfe80_0000 && w[1] == 0;
    configured && !link_local
}

/// NCCL's `matchGidAddrPrefix` with the range `envIbAddrRange` would parse for `family`.
fn nccl_in_range(family: Family, range: Option<&Prefix>, gid: &Ipv6Addr) -> bool {
    // envIbAddrRange parses the range with inet_pton(family): a range of the other family
    // is "invalid" and dropped, which means no filter.
    let Some(range) = range.filter(|r| r.family() == family) else {
        return true;
    };
    match family {
        // AF_INET compares the GID's last 32 bits only.
        Family::Inet => range.contains_bits(u128::from(words(gid)[3]), 32),
        Family::Inet6 => range.contains_bits(u128::from(*gid), 128),
    }
}

/// The GID index NCCL uses on a RoCE port with this table (slot `i` at position `i`, as
/// `env::check_rail` builds it), or why it fails.
pub fn nccl_gid_index(table: &[Gid], env: &NcclEnv, types: NcclTypeRead) -> Result<u32, String> {
    if let Some(index) = env.gid_index {
        return Ok(index);
    }
    let gid = |i: usize| table.get(i).map_or(Ipv6Addr::UNSPECIFIED, value);
    let version = |i: usize| -> Result<Option<u8>, String> {
        match (table.get(i).and_then(Gid::roce_version), types) {
            (None, NcclTypeRead::Strict) => Err(format!(
                "NCCL 2.21-2.25 fails reading gid_attrs/types/{i} (unreadable from this netns)"
            )),
            (v, _) => Ok(v),
        }
    };
    let mut current = 0usize;
    for candidate in 1..table.len() {
        let (gid, cand) = (gid(current), gid(candidate));
        let cand_family = gid_family(&cand);
        let in_range = nccl_in_range(env.family, env.range.as_ref(), &cand);
        if cand_family != gid_family(&gid) && cand_family == env.family && in_range {
            current = candidate;
            continue;
        }
        if cand_family != env.family || !nccl_valid(&cand) || !in_range {
            continue;
        }
        let (v_cur, v_cand) = (version(current)?, version(candidate)?);
        if (v_cur != v_cand || !nccl_valid(&gid)) && v_cand == Some(env.roce_version) {
            current = candidate;
        }
    }
    Ok(current as u32)
}

// ---------------------------------------------------------------------------------------------
// UCX

/// The UCX settings that steer its GID choice on RoCE ports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UcxEnv {
    /// UCX_IB_GID_INDEX; None is the default "auto".
    pub gid_index: Option<u32>,
    /// UCX_IB_ROCE_SUBNETS as an allow list; empty is the default "all".
    pub roce_subnets: Vec<Prefix>,
}

/// Which `uct_ib_device_select_gid` to model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UcxVersion {
    /// 1.18 … 1.20: v2/IPv4, v2/IPv6 (link-local included), v1/IPv4, v1/IPv6.
    V1_18,
    /// 1.21 and later: link-local IPv6 after global IPv6 of the same version; GIDs with a
    /// zero interface id are skipped.
    V1_21,
}

/// The GID index UCX uses on a RoCE port with this table (slot `i` at position `i`), or why it
/// fails.
pub fn ucx_gid_index(table: &[Gid], env: &UcxEnv, version: UcxVersion) -> Result<u32, String> {
    if env.gid_index.is_some() && !env.roce_subnets.is_empty() {
        return Err(
            "UCX refuses UCX_IB_GID_INDEX together with UCX_IB_ROCE_SUBNETS (\"both GID_INDEX \
             and ROCE_SUBNET_LIST are specified\")"
                .into(),
        );
    }
    if let Some(index) = env.gid_index {
        return Ok(index);
    }
    // (RoCE version, family, link-local allowed)
    let order: &[(u8, Family, bool)] = match version {
        UcxVersion::V1_18 => &[
            (2, Family::Inet, true),
            (2, Family::Inet6, true),
            (1, Family::Inet, true),
            (1, Family::Inet6, true),
        ],
        UcxVersion::V1_21 => &[
            (2, Family::Inet, true),
            (2, Family::Inet6, false),
            (2, Family::Inet6, true),
            (1, Family::Inet, true),
            (1, Family::Inet6, false),
            (1, Family::Inet6, true),
        ],
    };
    for &(ver, family, allow_ll) in order {
        for (index, slot) in table.iter().enumerate() {
            let gid = value(slot);
            let interface_id = u128::from(gid) as u64;
            if version == UcxVersion::V1_21 && interface_id == 0 {
                continue; // uct_ib_device_is_gid_valid: UCS_ERR_INVALID_ADDR, skipped
            }
            // An unreadable type counts as RoCE v1 (uct_ib_device_query_gid_info).
            let slot_ver = slot.roce_version().unwrap_or(1);
            let link_local = gid.segments()[0] & 0xffc0 == 0xfe80;
            // uct_ib_device_test_roce_gid_index: ibv_create_ah with an empty source GID fails.
            let ah_ok = !gid.is_unspecified();
            let subnet_ok = env.roce_subnets.is_empty()
                || env.roce_subnets.iter().any(|s| ucx_in_subnet(s, &gid));
            if slot_ver == ver
                && gid_family(&gid) == family
                && (allow_ll || !link_local)
                && ah_ok
                && subnet_ok
            {
                return Ok(index as u32);
            }
        }
    }
    if env.roce_subnets.is_empty() {
        Ok(0) // UCT_IB_DEVICE_DEFAULT_GID_INDEX
    } else {
        Err("UCX finds no GID in UCX_IB_ROCE_SUBNETS and fails the device".into())
    }
}

/// `uct_ib_device_match_roce_subnet`: the GID as a sockaddr of its own family, compared with
/// `ucs_sockaddr_is_same_subnet` (families must match; the length is capped at the width).
fn ucx_in_subnet(subnet: &Prefix, gid: &Ipv6Addr) -> bool {
    match (gid_address(gid), subnet.family()) {
        (IpAddr::V4(a), Family::Inet) => subnet.contains_bits(u128::from(u32::from(a)), 32),
        (IpAddr::V6(a), Family::Inet6) => subnet.contains_bits(u128::from(a), 128),
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::kernel::rdma::GidType;

    /// A slot; the models go by position, so the index is left 0.
    pub(crate) fn s(gid: &str, version: Option<u8>) -> Gid {
        let gid: Ipv6Addr = gid.parse().unwrap();
        Gid {
            index: 0,
            gid: (!gid.is_unspecified()).then_some(gid),
            gid_type: version.map(|v| match v {
                1 => GidType::RoceV1,
                2 => GidType::RoceV2,
                _ => GidType::Other(format!("v{v}")),
            }),
            ndev: None,
        }
    }

    /// A slot that reads all zeros.
    pub(crate) const EMPTY: Gid = Gid::zero(0);

    /// A ConnectX port as the host sees it: v1/v2 pairs for link-local, IPv4, IPv6 global.
    fn mlx_host_table() -> Vec<Gid> {
        vec![
            s("fe80::a288:c2ff:fe3b:506a", Some(1)),
            s("fe80::a288:c2ff:fe3b:506a", Some(2)),
            s("::ffff:10.200.1.10", Some(1)),
            s("::ffff:10.200.1.10", Some(2)),
            s("2010:200:0:2:a288:c2ff:fe3b:506a", Some(1)),
            s("2010:200:0:2:a288:c2ff:fe3b:506a", Some(2)),
            EMPTY,
        ]
    }

    #[test]
    fn families() {
        assert_eq!(
            gid_family(&"::ffff:10.0.0.1".parse().unwrap()),
            Family::Inet
        );
        assert_eq!(
            gid_family(&"ff0e::ffff:239.1.1.1".parse().unwrap()),
            Family::Inet
        );
        assert_eq!(gid_family(&Ipv6Addr::UNSPECIFIED), Family::Inet6);
        assert_eq!(gid_family(&"fe80::1".parse().unwrap()), Family::Inet6);
    }

    #[test]
    fn nccl_defaults_pick_first_ipv4_rocev2() {
        let t = mlx_host_table();
        let env = NcclEnv::default();
        assert_eq!(nccl_gid_index(&t, &env, NcclTypeRead::Strict), Ok(3));
        let v6 = NcclEnv {
            family: Family::Inet6,
            ..NcclEnv::default()
        };
        assert_eq!(nccl_gid_index(&t, &v6, NcclTypeRead::Tolerant), Ok(5));
        let v1 = NcclEnv {
            roce_version: 1,
            ..NcclEnv::default()
        };
        assert_eq!(nccl_gid_index(&t, &v1, NcclTypeRead::Tolerant), Ok(2));
        let fixed = NcclEnv {
            gid_index: Some(6),
            ..NcclEnv::default()
        };
        assert_eq!(nccl_gid_index(&t, &fixed, NcclTypeRead::Strict), Ok(6));
    }

    #[test]
    fn nccl_range_skips_earlier_gids() {
        let t = vec![
            s("fe80::1", Some(2)),
            s("::ffff:10.0.0.5", Some(2)),
            s("::ffff:10.9.0.7", Some(2)),
        ];
        let env = NcclEnv {
            range: Some(Prefix::new("10.9.0.0".parse().unwrap(), 16)),
            ..NcclEnv::default()
        };
        assert_eq!(nccl_gid_index(&t, &env, NcclTypeRead::Strict), Ok(2));
        assert_eq!(
            nccl_gid_index(&t, &NcclEnv::default(), NcclTypeRead::Strict),
            Ok(1)
        );
        // A range of the other family is dropped by NCCL: no filter.
        let wrong = NcclEnv {
            range: Some(Prefix::new("fd00::".parse().unwrap(), 8)),
            ..NcclEnv::default()
        };
        assert_eq!(nccl_gid_index(&t, &wrong, NcclTypeRead::Strict), Ok(1));
    }

    #[test]
    fn nccl_strict_type_read_fails_on_hidden_current_slot() {
        // OFED view from a pod: index 0 (the host's link-local GID) reads as zeros.
        let t = vec![EMPTY, EMPTY, s("2001:db8::5", Some(2))];
        let env = NcclEnv {
            family: Family::Inet6,
            ..NcclEnv::default()
        };
        assert!(nccl_gid_index(&t, &env, NcclTypeRead::Strict).is_err());
        assert_eq!(nccl_gid_index(&t, &env, NcclTypeRead::Tolerant), Ok(2));
        // IPv4 reaches the pod's GID through the family switch, which reads no type.
        let t4 = vec![EMPTY, EMPTY, s("::ffff:10.9.0.7", Some(2))];
        assert_eq!(
            nccl_gid_index(&t4, &NcclEnv::default(), NcclTypeRead::Strict),
            Ok(2)
        );
    }

    #[test]
    fn nccl_falls_back_to_zero() {
        let t = vec![s("fe80::1", Some(2)), s("fe80::2", Some(2))];
        assert_eq!(
            nccl_gid_index(&t, &NcclEnv::default(), NcclTypeRead::Strict),
            Ok(0)
        );
    }

    #[test]
    fn ucx_priorities() {
        let t = mlx_host_table();
        for v in [UcxVersion::V1_18, UcxVersion::V1_21] {
            assert_eq!(ucx_gid_index(&t, &UcxEnv::default(), v), Ok(3));
        }
        // No IPv4: 1.18 takes the lowest v2 IPv6 (link-local), 1.21 prefers global.
        let t6: Vec<Gid> = mlx_host_table()
            .into_iter()
            .filter(|x| gid_family(&value(x)) == Family::Inet6)
            .collect();
        assert_eq!(
            ucx_gid_index(&t6, &UcxEnv::default(), UcxVersion::V1_18),
            Ok(1)
        );
        assert_eq!(
            ucx_gid_index(&t6, &UcxEnv::default(), UcxVersion::V1_21),
            Ok(3)
        );
    }

    #[test]
    fn ucx_subnets_filter_and_conflict() {
        let t = mlx_host_table();
        let env = UcxEnv {
            gid_index: None,
            roce_subnets: vec![Prefix::new("2010:200:0:2::".parse().unwrap(), 64)],
        };
        assert_eq!(ucx_gid_index(&t, &env, UcxVersion::V1_18), Ok(5));
        let none = UcxEnv {
            gid_index: None,
            roce_subnets: vec![Prefix::new("192.168.0.0".parse().unwrap(), 16)],
        };
        assert!(ucx_gid_index(&t, &none, UcxVersion::V1_21).is_err());
        let both = UcxEnv {
            gid_index: Some(3),
            ..env
        };
        assert!(ucx_gid_index(&t, &both, UcxVersion::V1_21).is_err());
    }

    #[test]
    fn prefix_masks_and_prints() {
        let p = Prefix::new("10.9.3.7".parse().unwrap(), 16);
        assert_eq!(p.to_string(), "10.9.0.0/16");
        let p = Prefix::new("2001:db8:1:2::5".parse().unwrap(), 48);
        assert_eq!(p.to_string(), "2001:db8:1::/48");
        assert_eq!(
            Prefix::new("10.0.0.1".parse().unwrap(), 0).to_string(),
            "0.0.0.0/0"
        );
    }
}
