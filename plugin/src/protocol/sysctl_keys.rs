//! Which sysctls a configuration may set, and the ones it sets by default: pure rules, checked
//! while the configuration is parsed (config.rs); kernel/sysctl.rs writes them in the pod.
//!
//! Keys are confined to the child's own `conf`/`neigh` subtrees and to the pod-wide `all` and
//! `default` entries, so a network configuration can never reach outside networking or touch
//! another interface.

use std::path::PathBuf;

use crate::protocol::error::{Error, Result};

/// One validated sysctl: the dotted key as the user wrote it (IFNAME replaced) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysctl {
    pub key: String,
    /// Path components below /proc/sys.
    pub path: Vec<String>,
    pub value: String,
    /// Pod-wide (`all`/`default`): outlives the child, so a failed ADD must restore it.
    pub pod_wide: bool,
}

impl Sysctl {
    pub fn proc_path(&self) -> PathBuf {
        let mut p = PathBuf::from("/proc/sys");
        p.extend(&self.path);
        p
    }
}

/// The IPv4 settings of the old `tuning` step: answer ARP only for addresses of the interface
/// the request came in on (flat subnets put every rail in one subnet, so without these the
/// first rail answers for all), and accept traffic whose reverse path is another rail.
pub fn arp_defaults() -> Vec<(String, String)> {
    [
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.IFNAME.arp_announce", "2"),
        ("net.ipv4.conf.IFNAME.arp_filter", "1"),
        ("net.ipv4.conf.IFNAME.arp_ignore", "1"),
        ("net.ipv4.conf.IFNAME.rp_filter", "0"),
        ("net.ipv4.conf.IFNAME.accept_local", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Announcements when the child comes up, as the reference ipvlan and macvlan plugins set:
/// children share the rail's MAC, and a pod's address moves between nodes (a rescheduled pod,
/// a recycled IPAM address), so peers would keep a stale neighbour entry until it times out.
/// `arp_notify` sends a gratuitous ARP for the IPv4 addresses on link up; its IPv6 twin,
/// `ndisc_notify`, is [`NDISC_NOTIFY`], set only where the child uses IPv6.
pub fn announce_defaults() -> Vec<(String, String)> {
    vec![("net.ipv4.conf.IFNAME.arp_notify".into(), "1".into())]
}

/// An unsolicited neighbour advertisement for each IPv6 address once its DAD is done.
pub const NDISC_NOTIFY: &str = "net.ipv6.conf.IFNAME.ndisc_notify";

/// IPv6 on the child (on this link only; the pod's default may have it off).
pub const DISABLE_IPV6: &str = "net.ipv6.conf.IFNAME.disable_ipv6";

/// How ADD treats duplicate address detection of the SLAAC address (`slaac.dad`); it sets
/// the DAD sysctls below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DadMode {
    /// Return only once the address is no longer tentative (it then answers neighbour
    /// solicitations, so peers can resolve it). The kernel's own pace.
    Wait,
    /// Optimistic DAD (RFC 4429) on this interface: the address is usable, and answers
    /// neighbour solicitations, while DAD still runs and still catches a duplicate.
    Optimistic,
    /// No DAD on this interface: for fabrics that guarantee unique addresses.
    Off,
}

/// The child's IPv6 neighbour retransmit timer: the length of a DAD probe (`ipv6.retransTimeMs`).
const RETRANS_TIME_MS_KEY: &str = "net.ipv6.neigh.IFNAME.retrans_time_ms";

/// Whether `key` (IFNAME already replaced) sets the IPv6 neighbour retransmit timer of
/// `ifname`, in milliseconds or in the older USER_HZ ticks.
pub fn is_retrans_timer(key: &str, ifname: &str) -> bool {
    key.strip_prefix(&format!("net.ipv6.neigh.{ifname}."))
        .is_some_and(|leaf| RETRANS_TIMER_LEAVES.contains(&leaf))
}

/// The neighbour retransmit timer's two names: milliseconds, and the older USER_HZ ticks.
const RETRANS_TIMER_LEAVES: [&str; 2] = ["retrans_time_ms", "retrans_time"];

/// Whether a router advertisement may rewrite this sysctl of an interface that accepts them: the
/// kernel takes the RA's Cur Hop Limit, MTU option, Reachable Time and Retrans Timer
/// (`ndisc_router_discover`), as RFC 4861 6.3.4 asks. CHECK does not hold such a key to the
/// value ADD wrote on a SLAAC rail.
pub fn router_may_set(s: &Sysctl) -> bool {
    let leaf = s.path.last().map(String::as_str).unwrap_or_default();
    match (s.path[1].as_str(), s.path[2].as_str()) {
        ("ipv6", "conf") => !s.pod_wide && matches!(leaf, "hop_limit" | "mtu"),
        ("ipv6", "neigh") => {
            RETRANS_TIMER_LEAVES.contains(&leaf)
                || matches!(leaf, "base_reachable_time_ms" | "base_reachable_time")
        }
        _ => false,
    }
}

/// Per-interface IPv6 settings for SLAAC. IPv6 is enabled on this interface only, even when the
/// pod has `all`/`default.disable_ipv6=1`, and enabled last: turning it on starts link-local
/// DAD, which should already run with the DAD settings below.
///
/// DAD of an address is one neighbour solicitation (`dad_transmits`) and a wait of the
/// neighbour retransmit timer, after a random delay drawn from `router_solicitation_delay`
/// (`addrconf_dad_kick`). With both short, the link-local is usable within `retrans`; the
/// router solicitation sent from it then gets a unicast advertisement at once (ipv6.rs), and
/// the SLAAC address's DAD takes `retrans` again. A router advertisement with a Retrans Timer
/// replaces `retrans` from then on (RFC 4861 6.3.4, `ndisc_router_discover`): the router's
/// value wins for the SLAAC address.
pub fn slaac_defaults(dad: DadMode, retrans: std::time::Duration) -> Vec<(String, String)> {
    let retrans = retrans.as_millis().to_string();
    let mut v = vec![
        // 2: accept router advertisements even if the pod forwards.
        ("net.ipv6.conf.IFNAME.accept_ra", "2"),
        ("net.ipv6.conf.IFNAME.autoconf", "1"),
        ("net.ipv6.conf.IFNAME.accept_ra_pinfo", "1"),
        ("net.ipv6.conf.IFNAME.accept_ra_defrtr", "1"),
        // The rail router's default route stays in the main table as a fallback only: the pod's
        // own default route (metric 1024 when set by a CNI plugin) keeps winning, and traffic
        // from the SLAAC address uses the rail through the source rule (routing.rs).
        ("net.ipv6.conf.IFNAME.ra_defrtr_metric", "10000"),
        // No random 0-1 s delay before DAD starts (the kernel draws it from this value).
        ("net.ipv6.conf.IFNAME.router_solicitation_delay", "0"),
        (RETRANS_TIME_MS_KEY, retrans.as_str()),
    ];
    match dad {
        DadMode::Wait => {}
        DadMode::Optimistic => {
            v.push(("net.ipv6.conf.IFNAME.optimistic_dad", "1"));
            v.push(("net.ipv6.conf.IFNAME.use_optimistic", "1"));
        }
        DadMode::Off => {
            v.push(("net.ipv6.conf.IFNAME.accept_dad", "0"));
            v.push(("net.ipv6.conf.IFNAME.dad_transmits", "0"));
        }
    }
    v.push((NDISC_NOTIFY, "1"));
    v.push((DISABLE_IPV6, "0"));
    v.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Validates `key` for interface `ifname` (literal `IFNAME` replaced first).
pub fn validate(key: &str, value: &str, ifname: &str) -> Result<Sysctl> {
    let refuse = |why: String| {
        Err(Error::InvalidConfig(format!(
            "sysctl key {key:?} is refused: {why}; allowed are net.ipv4.conf.<{ifname}|all|default>.<name>, \
             net.ipv6.conf.<{ifname}|all|default>.<name>, net.ipv4.neigh.{ifname}.<name> and \
             net.ipv6.neigh.{ifname}.<name> (write the interface as IFNAME)"
        )))
    };
    if key.contains('/')
        || key.contains("..")
        || key.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return refuse("'/', '..' and whitespace are not allowed".into());
    }
    if value.is_empty() || value.len() > 256 || value.chars().any(|c| c.is_control()) {
        return Err(Error::InvalidConfig(format!(
            "sysctl {key:?} has value {value:?}: expected 1 to 256 printable characters"
        )));
    }
    let key = key.replace("IFNAME", ifname);
    let Some((family, rest)) = key
        .strip_prefix("net.ipv4.")
        .map(|r| ("ipv4", r))
        .or_else(|| key.strip_prefix("net.ipv6.").map(|r| ("ipv6", r)))
    else {
        return refuse("it is outside net.ipv4 and net.ipv6".into());
    };
    let Some((table, rest)) = rest.split_once('.') else {
        return refuse("it names no interface".into());
    };
    if table != "conf" && table != "neigh" {
        return refuse(format!(
            "net.{family}.{table} is not a per-interface subtree"
        ));
    }
    // The interface part may itself contain dots (e.g. net1.100), so match it as a prefix.
    let (dev, leaf, pod_wide) = if let Some(leaf) = rest.strip_prefix(&format!("{ifname}.")) {
        (ifname, leaf, false)
    } else if let (Some(leaf), "conf") = (rest.strip_prefix("all."), table) {
        ("all", leaf, true)
    } else if let (Some(leaf), "conf") = (rest.strip_prefix("default."), table) {
        ("default", leaf, true)
    } else {
        return refuse(format!(
            "it does not name this attachment's interface {ifname:?}"
        ));
    };
    if leaf.is_empty()
        || !leaf
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return refuse("the setting name must be one plain word".into());
    }
    Ok(Sysctl {
        path: vec![
            "net".into(),
            family.into(),
            table.into(),
            dev.into(),
            leaf.into(),
        ],
        key,
        value: value.to_string(),
        pod_wide,
    })
}

/// The most sysctl keys a configuration may set. The kernel has about 200 per-interface
/// settings (conf and neigh, both families), of which a NAD sets a handful; the cap keeps a
/// NAD of megabytes from costing every ADD, CHECK and `validate` of it more than its parse.
pub const MAX_KEYS: usize = 256;

/// The error for a map of more than [`MAX_KEYS`] keys.
pub fn too_many_keys() -> String {
    format!(
        "\"sysctl\" has more than {MAX_KEYS} keys: expected at most {MAX_KEYS} sysctl keys \
         (the per-interface settings a NAD may set number about 200); keep only those that \
         differ from the defaults"
    )
}

/// Merges the defaults and the user's map (user wins, order kept) and validates every key.
/// Two user keys that name the same sysctl (e.g. `IFNAME` and the literal name) are refused.
pub fn resolve(
    defaults: Vec<(String, String)>,
    user: &[(String, String)],
    ifname: &str,
) -> Result<Vec<Sysctl>> {
    if user.len() > MAX_KEYS {
        return Err(Error::InvalidConfig(too_many_keys()));
    }
    let mut out: Vec<Sysctl> = Vec::new();
    // Where each key is in `out`: a lookup per key, not a scan.
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (k, v) in defaults {
        let s = validate(&k, &v, ifname)?;
        at.insert(s.key.clone(), out.len());
        out.push(s);
    }
    let mut seen = std::collections::HashSet::new();
    for (k, v) in user {
        let s = validate(k, v, ifname)?;
        if !seen.insert(s.key.clone()) {
            return Err(Error::InvalidConfig(format!(
                "sysctl {:?} is given twice (as {k:?} and earlier): give each key once",
                s.key
            )));
        }
        match at.get(&s.key) {
            Some(&i) => out[i] = s,
            None => {
                at.insert(s.key.clone(), out.len());
                out.push(s);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_keys_map_to_proc_paths() {
        let s = validate("net.ipv4.conf.IFNAME.arp_ignore", "1", "net1").unwrap();
        assert_eq!(
            s.proc_path(),
            PathBuf::from("/proc/sys/net/ipv4/conf/net1/arp_ignore")
        );
        assert!(!s.pod_wide);
        let s = validate("net.ipv4.conf.all.rp_filter", "0", "net1").unwrap();
        assert!(s.pod_wide);
        let s = validate("net.ipv6.conf.net1.accept_ra", "2", "net1").unwrap();
        assert_eq!(s.path, ["net", "ipv6", "conf", "net1", "accept_ra"]);
        let s = validate(
            "net.ipv4.neigh.IFNAME.base_reachable_time_ms",
            "1000",
            "net1",
        )
        .unwrap();
        assert_eq!(s.path[2], "neigh");
        // Interface names with dots.
        let s = validate("net.ipv4.conf.IFNAME.arp_filter", "1", "r1.100").unwrap();
        assert_eq!(s.path, ["net", "ipv4", "conf", "r1.100", "arp_filter"]);
    }

    #[test]
    fn escaping_keys_are_refused() {
        for key in [
            "kernel.core_pattern",
            "net.core.somaxconn",
            "net.ipv4.ip_forward",
            "net.ipv4.conf.eth0.rp_filter",
            "net.ipv4.conf.IFNAME/../../kernel.x",
            "net/ipv4/conf/IFNAME/arp_ignore",
            "net.ipv4.conf.IFNAME..arp_ignore",
            "net.ipv4.conf.IFNAME.a.b",
            "net.ipv4.neigh.all.gc_thresh1",
            "net.ipv4.conf.IFNAME.",
            "net.ipv4.conf.IFNAME.arp ignore",
            "net.ipv4.route.flush",
        ] {
            let err = validate(key, "1", "net1").unwrap_err();
            assert_eq!(err.code(), 7, "{key}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(validate("net.ipv4.conf.IFNAME.arp_ignore", "", "net1").is_err());
        assert!(validate("net.ipv4.conf.IFNAME.arp_ignore", "1\n2", "net1").is_err());
    }

    #[test]
    fn user_overrides_defaults_and_duplicates_are_refused() {
        let user = vec![
            (
                "net.ipv4.conf.IFNAME.arp_ignore".to_string(),
                "2".to_string(),
            ),
            (
                "net.ipv4.conf.IFNAME.arp_notify".to_string(),
                "1".to_string(),
            ),
        ];
        let all = resolve(arp_defaults(), &user, "net1").unwrap();
        assert_eq!(all.len(), 7);
        let ignore = all
            .iter()
            .find(|s| s.key == "net.ipv4.conf.net1.arp_ignore")
            .unwrap();
        assert_eq!(ignore.value, "2");

        let dup = vec![
            (
                "net.ipv4.conf.IFNAME.arp_ignore".to_string(),
                "2".to_string(),
            ),
            ("net.ipv4.conf.net1.arp_ignore".to_string(), "1".to_string()),
        ];
        assert_eq!(resolve(vec![], &dup, "net1").unwrap_err().code(), 7);
    }

    /// 40,000 distinct keys (a NAD of 1.4 MB) took more than a minute of quadratic duplicate
    /// checks (issue #25, item 4): the cap refuses them at once, and a map at the cap resolves
    /// with lookups, not scans.
    #[test]
    fn a_huge_map_is_refused_and_one_at_the_cap_resolves_fast() {
        let keys = |n: usize| -> Vec<(String, String)> {
            (0..n)
                .map(|i| (format!("net.ipv4.conf.IFNAME.k{i}"), "1".to_string()))
                .collect()
        };
        let start = std::time::Instant::now();
        let err = resolve(arp_defaults(), &keys(40_000), "net1").unwrap_err();
        assert_eq!(err.code(), 7);
        assert!(err.to_string().contains("at most 256 sysctl keys"), "{err}");
        let all = resolve(arp_defaults(), &keys(MAX_KEYS), "net1").unwrap();
        assert_eq!(all.len(), arp_defaults().len() + MAX_KEYS);
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn slaac_defaults_set_a_short_dad_before_ipv6_goes_on() {
        use std::time::Duration;
        let all = resolve(
            slaac_defaults(DadMode::Wait, Duration::from_millis(100)),
            &[],
            "net1",
        )
        .unwrap();
        let at = |k: &str| all.iter().position(|s| s.key == k).unwrap();
        let retrans = at("net.ipv6.neigh.net1.retrans_time_ms");
        assert_eq!(all[retrans].value, "100");
        assert_eq!(
            all[at("net.ipv6.conf.net1.router_solicitation_delay")].value,
            "0"
        );
        // Both must be in place before IPv6 goes on and link-local DAD starts.
        assert!(retrans < at("net.ipv6.conf.net1.disable_ipv6"));
        assert_eq!(all.last().unwrap().key, "net.ipv6.conf.net1.disable_ipv6");
        assert!(all.iter().all(|s| !s.pod_wide));
    }

    #[test]
    fn keys_a_router_advertisement_rewrites() {
        let v = |k: &str| validate(k, "1", "net1").unwrap();
        assert!(router_may_set(&v("net.ipv6.neigh.IFNAME.retrans_time_ms")));
        assert!(router_may_set(&v(
            "net.ipv6.neigh.IFNAME.base_reachable_time_ms"
        )));
        assert!(router_may_set(&v("net.ipv6.conf.IFNAME.hop_limit")));
        assert!(!router_may_set(&v("net.ipv6.conf.all.hop_limit")));
        assert!(!router_may_set(&v("net.ipv6.conf.IFNAME.accept_ra")));
        assert!(!router_may_set(&v("net.ipv4.neigh.IFNAME.retrans_time_ms")));
        assert!(is_retrans_timer(
            "net.ipv6.neigh.net1.retrans_time_ms",
            "net1"
        ));
        assert!(is_retrans_timer("net.ipv6.neigh.net1.retrans_time", "net1"));
        assert!(!is_retrans_timer(
            "net.ipv6.neigh.net1.retrans_time_msx",
            "net1"
        ));
        assert!(!is_retrans_timer(
            "net.ipv4.neigh.net1.retrans_time_ms",
            "net1"
        ));
    }

    #[test]
    fn defaults_are_the_tuning_chain_settings() {
        let all = resolve(arp_defaults(), &[], "net1").unwrap();
        let get = |k: &str| all.iter().find(|s| s.key == k).map(|s| s.value.as_str());
        assert_eq!(get("net.ipv4.conf.net1.arp_announce"), Some("2"));
        assert_eq!(get("net.ipv4.conf.net1.arp_filter"), Some("1"));
        assert_eq!(get("net.ipv4.conf.net1.arp_ignore"), Some("1"));
        assert_eq!(get("net.ipv4.conf.net1.rp_filter"), Some("0"));
        assert_eq!(get("net.ipv4.conf.net1.accept_local"), Some("1"));
        assert_eq!(get("net.ipv4.conf.all.rp_filter"), Some("0"));
    }
}
