//! The network configuration: parsed from stdin and checked once, into a typed `NetConf`.
//! Nothing after this module looks at raw JSON except to hand the IPAM section on.

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::protocol::cni;
use crate::protocol::error::{Error, Result};
use crate::protocol::logging::LogConf;
use crate::protocol::rail_inputs;
use crate::protocol::sysctl_keys::{self, DadMode, Sysctl};

pub const DEFAULT_GID_TIMEOUT: Duration = Duration::from_millis(10_000);
/// Longest GID wait accepted: kubelet's CNI call itself times out after a few minutes.
const MAX_GID_TIMEOUT_MS: u64 = 120_000;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConf {
    cni_version: String,
    name: String,
    #[serde(rename = "type")]
    kind: String,
    master: Option<String>,
    /// Injected by Multus from the device plugin's allocation (see rail.rs).
    #[serde(rename = "deviceID")]
    device_id: Option<String>,
    runtime_config: Option<Value>,
    /// CNI `args`; `args.cni` carries Multus cni-args (see rail.rs).
    args: Option<Value>,
    /// The rails cni-args may choose (see rail.rs).
    allowed_rails: Option<Value>,
    /// Every rail of a multi-rail attachment (see rail.rs).
    rails: Option<Value>,
    mode: Option<String>,
    mtu: Option<u32>,
    ipam: Option<Value>,
    arp_sysctls: Option<bool>,
    #[serde(default, deserialize_with = "ordered_pairs")]
    sysctl: Vec<(String, String)>,
    source_routing: Option<bool>,
    rdma: Option<RawRdma>,
    ipv6: Option<RawIpv6>,
    log_file: Option<PathBuf>,
    log_level: Option<String>,
    prev_result: Option<Value>,
    timeouts: Option<RawTimeouts>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawTimeouts {
    total_ms: Option<u64>,
    ipam_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawRdma {
    device: Option<String>,
    port: Option<u32>,
    gid_timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawIpv6 {
    slaac: Option<bool>,
    link_local: Option<bool>,
    prefix: Option<String>,
    dad: Option<String>,
    ra_timeout_ms: Option<u64>,
    retrans_time_ms: Option<u64>,
}

/// A configuration that passed every check.
#[derive(Debug, Clone)]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    /// What names the rail (master, deviceID, rdma.device, cni-args); resolved on the node by
    /// `rail::resolve` before ADD or CHECK changes anything.
    pub rail: rail_inputs::Inputs,
    pub mtu: Option<u32>,
    /// The IPAM section, handed unchanged to the IPAM plugin.
    pub ipam: Option<Ipam>,
    /// The sysctls for the child named CNI_IFNAME (empty for STATUS and GC).
    pub sysctls: Vec<Sysctl>,
    /// What `sysctls` was resolved from (defaults, then the user's map), to resolve it again
    /// for each child of a multi-rail attachment ([`NetConf::sysctls_for`]).
    sysctl_spec: (SysctlPairs, SysctlPairs),
    pub source_routing: bool,
    /// `ipv6.linkLocal`: a child without an IPv6 address keeps IPv6 on, so its link-local
    /// address and that address's GIDs (ipv6.rs); always true with SLAAC.
    pub ipv6_link_local: bool,
    pub rdma: RdmaConf,
    /// IPv6 SLAAC on routed rails; `None` when off.
    pub slaac: Option<SlaacConf>,
    pub log: LogConf,
    pub prev_result: Option<Value>,
    /// The configuration exactly as received: IPAM plugins get it on their stdin.
    pub raw: Value,
    /// Where Multus wants the device-info document (`runtimeConfig.CNIDeviceInfoFile`).
    pub device_info_file: Option<PathBuf>,
    pub timeouts: Timeouts,
}

/// Sysctl keys and values as written, before they are resolved for a child's name.
type SysctlPairs = Vec<(String, String)>;

/// Limits of one invocation's waiting (budget.rs; docs/configuration.md, "Time limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Everything one ADD may wait for: the attachment lock, IPAM, the RA and the GID.
    pub total: Duration,
    /// One IPAM call (with its VERSION retry); within ADD also cut to what `total` leaves.
    pub ipam: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            total: DEFAULT_TOTAL_TIMEOUT,
            ipam: DEFAULT_IPAM_TIMEOUT,
        }
    }
}

/// Default `timeouts.totalMs`: room for the default IPAM, RA and GID waits of a healthy node
/// many times over, and an 8-rail pod whose every rail fails (each in at most totalMs plus
/// ipamMs for the IPAM release) still gets its errors within the kubelet's 4-minute
/// RunPodSandbox deadline (budget.rs).
pub const DEFAULT_TOTAL_TIMEOUT: Duration = Duration::from_millis(20_000);
pub const DEFAULT_IPAM_TIMEOUT: Duration = Duration::from_millis(10_000);

#[derive(Debug, Clone)]
pub struct Ipam {
    /// The IPAM plugin's binary name, looked up in CNI_PATH.
    pub kind: String,
}

#[derive(Debug, Clone)]
pub struct RdmaConf {
    pub device: Option<String>,
    pub port: Option<u32>,
    pub gid_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlaacConf {
    /// Only a SLAAC address inside this prefix counts (a rail router may announce several).
    pub prefix: Option<ipnetwork::Ipv6Network>,
    pub dad: DadMode,
    pub ra_timeout: Duration,
    /// The child's neighbour retransmit timer until a router announces its own: the length of
    /// each DAD probe (sysctl_keys::slaac_defaults).
    pub retrans_time: Duration,
}

pub const DEFAULT_RA_TIMEOUT: Duration = Duration::from_millis(10_000);

/// Default `ipv6.retransTimeMs`. RFC 4861's 1 s RetransTimer is sized for any link; a rail's L2
/// segment (the NIC, its switch port, the other pods' children) answers a neighbour
/// solicitation in microseconds, so 100 ms leaves a margin of orders of magnitude for a
/// duplicate to answer DAD while making each DAD a tenth as long.
pub const DEFAULT_RETRANS_TIME: Duration = Duration::from_millis(100);
/// The kernel waits at least 10 ms (HZ/100) per DAD probe whatever the timer says.
const RETRANS_TIME_MS_RANGE: std::ops::RangeInclusive<u64> = 10..=60_000;

/// Reads just `cniVersion`, so that even a configuration refused later gets its error in the
/// version the runtime asked for.
pub fn peek_version(stdin: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct V {
        #[serde(rename = "cniVersion")]
        v: String,
    }
    serde_json::from_slice::<V>(stdin).ok().map(|v| v.v)
}

impl NetConf {
    pub fn parse(stdin: &[u8], ifname: &str) -> Result<NetConf> {
        // The typed read first: it stops at the first refused field (such as a sysctl map
        // over its cap) before the whole document is built as a Value, so a NAD of megabytes
        // costs one partial scan, not a tree of its every key. Not JSON is 6, a refused field 7.
        // Read from the bytes, not from a Value: a Value has already collapsed duplicate keys.
        let conf: RawConf = serde_json::from_slice(stdin).map_err(|e| {
            if e.is_syntax() || e.is_eof() {
                Error::Decode(e.to_string())
            } else {
                Error::InvalidConfig(e.to_string())
            }
        })?;
        let raw: Value = serde_json::from_slice(stdin).map_err(|e| Error::Decode(e.to_string()))?;
        cni::check_version(&conf.cni_version)?;
        let bad = |msg: String| Err(Error::InvalidConfig(msg));

        if conf.name.is_empty() {
            return bad("\"name\" is empty: every network needs a name".into());
        }
        if !cni::is_valid_name(&conf.name) {
            // Quoted with escapes: the name is exactly what must not reach a log raw.
            return bad(format!(
                "\"name\" {:?} is not a valid network name: expected a letter or digit, then \
                 letters, digits, '_', '.' or '-' (the CNI spec's rule)",
                conf.name
            ));
        }
        if conf.kind != "roce-ipvlan" {
            return bad(format!(
                "\"type\" is {:?}: this plugin is roce-ipvlan; the runtime ran the wrong binary",
                conf.kind
            ));
        }
        match conf.mode.as_deref() {
            None | Some("l2") => {}
            Some(m @ ("l3" | "l3s")) => {
                return bad(format!(
                    "\"mode\": {m:?} is not supported: RoCE needs the child on the rail's L2 segment, \
                     so that the NIC and the peers resolve its address by ARP/ND; use \"l2\" (the default)"
                ))
            }
            Some(m) => return bad(format!("\"mode\": {m:?} is unknown: use \"l2\" (the default)")),
        }
        if let Some(mtu) = conf.mtu {
            if !(68..=65535).contains(&mtu) {
                return bad(format!("\"mtu\": {mtu} is out of range 68..65535"));
            }
        }
        let retrans_given = conf
            .ipv6
            .as_ref()
            .is_some_and(|v6| v6.retrans_time_ms.is_some());
        let link_local = conf.ipv6.as_ref().and_then(|v6| v6.link_local);
        let slaac = match conf.ipv6 {
            Some(v6) if v6.slaac.unwrap_or(false) => {
                if link_local == Some(false) {
                    return bad(
                        "\"ipv6.linkLocal\": false with \"slaac\": true: SLAAC needs the \
                         child's IPv6 link-local address (router solicitations and DAD are sent \
                         from it); leave \"linkLocal\" out"
                            .into(),
                    );
                }
                Some(slaac_conf(v6)?)
            }
            Some(v6)
                if v6.prefix.is_some()
                    || v6.dad.is_some()
                    || v6.ra_timeout_ms.is_some()
                    || v6.retrans_time_ms.is_some() =>
            {
                return bad(
                    "\"ipv6\" sets prefix/dad/raTimeoutMs/retransTimeMs but not \"slaac\": \
                     true; they only apply to SLAAC"
                        .into(),
                )
            }
            _ => None,
        };
        let ipam = match conf.ipam {
            None if slaac.is_some() => None,
            None => {
                return bad(
                    "\"ipam\" is missing: the child needs an address for its RoCE v2 GID; \
                 add e.g. {\"type\": \"host-local\", ...} or {\"type\": \"nv-ipam\", ...}, \
                 or use \"ipv6\": {\"slaac\": true} on routed IPv6 rails"
                        .into(),
                )
            }
            Some(v) => {
                let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
                if kind.is_empty() {
                    return bad(
                        "\"ipam.type\" is missing: name the IPAM plugin, e.g. \"host-local\""
                            .into(),
                    );
                }
                if !ipam_type_is_a_name(kind) {
                    return bad(format!(
                        "\"ipam.type\" {kind:?} must be a plugin name found in CNI_PATH, not a path"
                    ));
                }
                Some(Ipam {
                    kind: kind.to_string(),
                })
            }
        };
        let mut defaults = if conf.arp_sysctls.unwrap_or(true) {
            sysctl_keys::arp_defaults()
        } else {
            Vec::new()
        };
        defaults.extend(sysctl_keys::announce_defaults());
        if let Some(slaac) = &slaac {
            defaults.extend(sysctl_keys::slaac_defaults(slaac.dad, slaac.retrans_time));
            if retrans_given {
                if let Some((key, _)) = conf.sysctl.iter().find(|(k, _)| {
                    sysctl_keys::is_retrans_timer(&k.replace("IFNAME", ifname), ifname)
                }) {
                    return bad(format!(
                        "\"ipv6.retransTimeMs\" and the sysctl {key:?} both set the child's \
                         neighbour retransmit timer: give only one of them"
                    ));
                }
            }
        }
        // STATUS and GC carry no CNI_IFNAME: per-interface keys cannot be resolved then, and
        // neither command touches sysctls.
        let sysctls = if ifname.is_empty() {
            Vec::new()
        } else {
            sysctl_keys::resolve(defaults.clone(), &conf.sysctl, ifname)?
        };
        let rdma = match conf.rdma {
            None => RdmaConf {
                device: None,
                port: None,
                gid_timeout: DEFAULT_GID_TIMEOUT,
            },
            Some(r) => {
                if let Some(d) = &r.device {
                    if !rail_inputs::valid_rdma_device_name(d) {
                        return bad(format!("\"rdma.device\" {d:?} is not an RDMA device name"));
                    }
                }
                if r.port == Some(0) {
                    return bad("\"rdma.port\" is 0: RDMA ports count from 1".into());
                }
                RdmaConf {
                    gid_timeout: millis(
                        "rdma.gidTimeoutMs",
                        r.gid_timeout_ms,
                        DEFAULT_GID_TIMEOUT,
                    )?,
                    device: r.device,
                    port: r.port,
                }
            }
        };
        let timeouts = timeouts(conf.timeouts)?;
        if let Some(level) = &conf.log_level {
            if !LOG_LEVELS.contains(&level.as_str()) {
                return bad(format!(
                    "\"logLevel\" {level:?} is unknown: use error, warn, info, debug or trace"
                ));
            }
        }
        if let Some(file) = &conf.log_file {
            if let Err(e) = crate::protocol::logging::check_path(file) {
                return bad(format!("\"logFile\" {file:?} is refused: {e}"));
            }
        }
        let rail = rail_inputs::Inputs::new(
            conf.master,
            rdma.device.clone(),
            conf.device_id,
            conf.runtime_config
                .as_ref()
                .and_then(|r| r.get("deviceID"))
                .and_then(Value::as_str)
                .map(String::from),
            conf.args.as_ref(),
            rail_inputs::AllowedRails::parse(conf.allowed_rails.as_ref())?,
        )?
        .with_rails(rail_inputs::Rails::parse(conf.rails.as_ref())?)?;
        Ok(NetConf {
            cni_version: conf.cni_version,
            name: conf.name,
            rail,
            mtu: conf.mtu,
            ipam,
            sysctls,
            sysctl_spec: (defaults, conf.sysctl),
            source_routing: conf.source_routing.unwrap_or(true),
            ipv6_link_local: slaac.is_some() || link_local.unwrap_or(false),
            rdma,
            slaac,
            log: LogConf {
                file: conf.log_file,
                level: conf.log_level,
            },
            prev_result: conf.prev_result,
            raw,
            device_info_file: device_info_file(conf.runtime_config.as_ref())?,
            timeouts,
        })
    }
}

impl NetConf {
    /// The sysctls for a child named `ifname` (IFNAME in a key is that name): `sysctls` again,
    /// for each child of a multi-rail attachment.
    pub fn sysctls_for(&self, ifname: &str) -> Result<Vec<Sysctl>> {
        let (defaults, user) = &self.sysctl_spec;
        sysctl_keys::resolve(defaults.clone(), user, ifname)
    }

    /// Whether the attachment has a child per rail of `rails`.
    pub fn multi_rail(&self) -> bool {
        self.rail.rails.is_some()
    }
}

/// What DEL and GC read of a configuration ([`NetConf::parse_teardown`]), and what they had to
/// leave out.
#[derive(Debug, Clone)]
pub struct Teardown {
    pub conf: NetConf,
    /// Fields that were invalid and ignored, one line each; logged once logging is set up.
    pub ignored: Vec<String>,
}

impl NetConf {
    /// Reads a configuration for DEL or GC. These must work on whatever configuration the
    /// attachment was added with: one from an older release (which accepted what this one
    /// refuses, e.g. `"mode": "l3"` or a counter `deviceID`), a newer one (with fields or values
    /// this release does not know), or a NAD edited since. A DEL refused on such a field would
    /// never run IPAM DEL, and the runtime does not retry it: the pod's address would leak and,
    /// under kubelet, the pod would hang in Terminating.
    ///
    /// So only what teardown uses is read, and each of those fields is taken if usable and
    /// otherwise ignored (and logged): `cniVersion`, `name`, `ipam` (with `ipam.type` still a
    /// plain name: a path is never executed), `prevResult`, `runtimeConfig.CNIDeviceInfoFile`
    /// (still confined to Multus's directory: DEL removes that file as root), `logFile`,
    /// `logLevel`, `rails` (a multi-rail attachment has a child and an IPAM allocation per rail).
    /// The rail is not needed otherwise (DEL finds the child by CNI_IFNAME in the pod) and
    /// is left empty, as are sysctls and the other ADD-only settings. Only stdin that is not a
    /// JSON object is an error (6).
    pub fn parse_teardown(stdin: &[u8]) -> Result<Teardown> {
        let raw: Value = serde_json::from_slice(stdin).map_err(|e| Error::Decode(e.to_string()))?;
        let Some(obj) = raw.as_object() else {
            return Err(Error::Decode(format!(
                "expected a JSON object, found {}",
                match &raw {
                    Value::Array(_) => "an array",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    Value::Bool(_) => "a boolean",
                    _ => "null",
                }
            )));
        };
        let mut ignored = Vec::new();
        let text = |key: &str, ignored: &mut Vec<String>| match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                ignored.push(format!("\"{key}\" is {other}, not a string"));
                None
            }
        };
        let cni_version = match text("cniVersion", &mut ignored) {
            Some(v) => {
                if cni::check_version(&v).is_err() {
                    ignored.push(format!(
                        "\"cniVersion\" {v:?} is not one this release supports ({}); \
                         tearing down anyway, the IPAM plugin is asked in that version first",
                        cni::SUPPORTED_VERSIONS.join(", ")
                    ));
                }
                v
            }
            None => {
                let newest = cni::SUPPORTED_VERSIONS[cni::SUPPORTED_VERSIONS.len() - 1];
                ignored.push(format!("\"cniVersion\" is missing; using {newest}"));
                newest.to_string()
            }
        };
        let name = text("name", &mut ignored).unwrap_or_default();
        let ipam = match obj.get("ipam") {
            None | Some(Value::Null) => None,
            Some(v) => match v.get("type").and_then(Value::as_str) {
                Some(kind) if ipam_type_is_a_name(kind) => Some(Ipam {
                    kind: kind.to_string(),
                }),
                _ => {
                    ignored.push(format!(
                        "\"ipam.type\" is {}: expected a plugin name (no path); no IPAM \
                         plugin is called",
                        v.get("type")
                            .map_or("missing".to_string(), Value::to_string)
                    ));
                    None
                }
            },
        };
        let device_info_file = match device_info_file(obj.get("runtimeConfig")) {
            Ok(path) => path,
            Err(e) => {
                ignored.push(format!("{e}; the file is left alone"));
                None
            }
        };
        let file = text("logFile", &mut ignored)
            .map(PathBuf::from)
            .and_then(|p| match crate::protocol::logging::check_path(&p) {
                Ok(()) => Some(p),
                Err(e) => {
                    ignored.push(format!("\"logFile\" {p:?}: {e}"));
                    None
                }
            });
        let level = text("logLevel", &mut ignored).and_then(|l| {
            if LOG_LEVELS.contains(&l.as_str()) {
                Some(l)
            } else {
                ignored.push(format!("\"logLevel\" {l:?} is unknown"));
                None
            }
        });
        // DEL waits for an orphaned ADD and gives IPAM its limit: the NAD's, if readable.
        let timeouts = match obj.get("timeouts") {
            None | Some(Value::Null) => Timeouts::default(),
            Some(v) => match serde_json::from_value::<RawTimeouts>(v.clone())
                .map_err(|e| Error::InvalidConfig(e.to_string()))
                .and_then(|raw| timeouts(Some(raw)))
            {
                Ok(t) => t,
                Err(e) => {
                    ignored.push(format!("\"timeouts\" {v}: {e}; using the defaults"));
                    Timeouts::default()
                }
            },
        };
        // A multi-rail attachment has a child and an IPAM allocation per rail (del.rs): even a
        // `rails` this release cannot read marks the attachment as one.
        let rails = match rail_inputs::Rails::parse(obj.get("rails")) {
            Ok(rails) => rails,
            Err(e) => {
                ignored.push(format!(
                    "{e}; tearing down the children found in the pod and in prevResult"
                ));
                Some(rail_inputs::Rails::default())
            }
        };
        let conf = NetConf {
            cni_version,
            name,
            timeouts,
            rail: rail_inputs::Inputs {
                rails,
                ..rail_inputs::Inputs::default()
            },
            mtu: None,
            ipam,
            sysctls: Vec::new(),
            sysctl_spec: (Vec::new(), Vec::new()),
            source_routing: true,
            ipv6_link_local: false,
            rdma: RdmaConf {
                device: None,
                port: None,
                gid_timeout: DEFAULT_GID_TIMEOUT,
            },
            slaac: None,
            log: LogConf { file, level },
            prev_result: obj.get("prevResult").cloned(),
            raw: raw.clone(),
            device_info_file,
        };
        Ok(Teardown { conf, ignored })
    }
}

const LOG_LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace"];

/// `ipam.type` names a binary looked up in CNI_PATH; a path would let a NAD run any program.
fn ipam_type_is_a_name(kind: &str) -> bool {
    !kind.is_empty() && !kind.contains('/') && kind != "." && kind != ".."
}

fn timeouts(raw: Option<RawTimeouts>) -> Result<Timeouts> {
    let Some(raw) = raw else {
        return Ok(Timeouts::default());
    };
    Ok(Timeouts {
        total: millis("timeouts.totalMs", raw.total_ms, DEFAULT_TOTAL_TIMEOUT)?,
        ipam: millis("timeouts.ipamMs", raw.ipam_ms, DEFAULT_IPAM_TIMEOUT)?,
    })
}

/// A time limit in milliseconds, `default` when absent: 1 ms to MAX_GID_TIMEOUT_MS.
fn millis(key: &str, value: Option<u64>, default: Duration) -> Result<Duration> {
    millis_in(key, value, default, 1..=MAX_GID_TIMEOUT_MS, "milliseconds")
}

/// A duration in milliseconds, `default` when absent, refused outside `range` with `why`.
fn millis_in(
    key: &str,
    value: Option<u64>,
    default: Duration,
    range: std::ops::RangeInclusive<u64>,
    why: &str,
) -> Result<Duration> {
    let ms = value.unwrap_or(default.as_millis() as u64);
    if !range.contains(&ms) {
        return Err(Error::InvalidConfig(format!(
            "\"{key}\" is {ms}: expected {}..={} ({why})",
            range.start(),
            range.end()
        )));
    }
    Ok(Duration::from_millis(ms))
}

fn slaac_conf(v6: RawIpv6) -> Result<SlaacConf> {
    let bad = |msg: String| Err(Error::InvalidConfig(msg));
    let prefix = match v6.prefix {
        None => None,
        Some(p) => match p.parse::<ipnetwork::Ipv6Network>() {
            Ok(net) if net.network() == net.ip() => Some(net),
            Ok(net) => {
                return bad(format!(
                    "\"ipv6.prefix\" {p:?} has host bits set: did you mean {}/{}?",
                    net.network(),
                    net.prefix()
                ))
            }
            Err(e) => return bad(format!("\"ipv6.prefix\" {p:?} is not an IPv6 prefix: {e}")),
        },
    };
    let dad = match v6.dad.as_deref() {
        None | Some("wait") => DadMode::Wait,
        Some("optimistic") => DadMode::Optimistic,
        Some("off") => DadMode::Off,
        Some(other) => {
            return bad(format!(
            "\"ipv6.dad\" {other:?} is unknown: use \"wait\" (default), \"optimistic\" or \"off\""
        ))
        }
    };
    Ok(SlaacConf {
        prefix,
        dad,
        ra_timeout: millis("ipv6.raTimeoutMs", v6.ra_timeout_ms, DEFAULT_RA_TIMEOUT)?,
        retrans_time: millis_in(
            "ipv6.retransTimeMs",
            v6.retrans_time_ms,
            DEFAULT_RETRANS_TIME,
            RETRANS_TIME_MS_RANGE,
            "the kernel waits at least 10 ms per DAD probe",
        )?,
    })
}

/// A JSON object read as ordered pairs, so that duplicate keys (which serde_json would silently
/// collapse) can be refused. Values may be strings, numbers or booleans.
fn ordered_pairs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    struct Pairs;
    impl<'de> Visitor<'de> for Pairs {
        type Value = Vec<(String, String)>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object of sysctl keys to values")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out: Vec<(String, String)> = Vec::new();
            let mut seen = std::collections::HashSet::new();
            while let Some((k, v)) = map.next_entry::<String, Value>()? {
                let v = match v {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => u8::from(b).to_string(),
                    other => {
                        return Err(serde::de::Error::custom(format!(
                            "sysctl {k:?} has value {other}: expected a string or a number"
                        )))
                    }
                };
                if out.len() == sysctl_keys::MAX_KEYS {
                    // Stops reading the map: its other keys cost nothing more.
                    return Err(serde::de::Error::custom(sysctl_keys::too_many_keys()));
                }
                if !seen.insert(k.clone()) {
                    return Err(serde::de::Error::custom(format!(
                        "sysctl {k:?} is given twice: give each key once"
                    )));
                }
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_map(Pairs)
}

/// Where Multus keeps the device-info files it names per attachment: `cni/` of the
/// device-info directory (device-info-spec; `/var/run` is `/run` on current distributions).
/// Its sibling `dp/` holds the device plugins' files, under names anyone can predict
/// (`<resource>-<pci>-device.json`): never ours to write or remove.
const CNI_DEVINFO_DIRS: &[&str] = &[
    "/var/run/k8s.cni.cncf.io/devinfo/cni",
    "/run/k8s.cni.cncf.io/devinfo/cni",
];

/// The Multus device-info file (attach/device_info.rs) of `runtimeConfig.CNIDeviceInfoFile`,
/// checked: absolute, no `..`, a file directly in Multus's per-attachment directory
/// ([`CNI_DEVINFO_DIRS`]). Whether it is this attachment's file is
/// `device_info::check_attachment`'s to say (the configuration does not know the container).
fn device_info_file(runtime_config: Option<&Value>) -> Result<Option<PathBuf>> {
    let Some(value) = runtime_config.and_then(|r| r.get("CNIDeviceInfoFile")) else {
        return Ok(None);
    };
    let bad = |why: &str| {
        Err(Error::InvalidConfig(format!(
            "\"runtimeConfig.CNIDeviceInfoFile\" {value}: {why}; expected the file Multus names \
             for this attachment, /var/run/k8s.cni.cncf.io/devinfo/cni/<network>-<container \
             id>_<interface>: leave it to Multus (the NAD's CNIDeviceInfoFile capability)"
        )))
    };
    let Some(text) = value.as_str() else {
        return bad("not a string");
    };
    if text.is_empty() {
        return Ok(None);
    }
    let path = PathBuf::from(text);
    if !path.is_absolute() {
        return bad("not absolute");
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return bad("contains '..'");
    }
    if path.file_name().is_none() || text.ends_with('/') {
        return bad("names no file");
    }
    // ADD writes and DEL removes this file as root, and a NAD can carry its own
    // `runtimeConfig` (Multus replaces it only when the NAD declares the capability): confined
    // to Multus's per-attachment directory, a NAD cannot make DEL delete /etc/shadow or a
    // device plugin's file in dp/.
    if !CNI_DEVINFO_DIRS
        .iter()
        .any(|d| path.parent() == Some(Path::new(d)))
    {
        return bad(
            "not a file in Multus's per-attachment directory /var/run/k8s.cni.cncf.io/devinfo/cni/",
        );
    }
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "cniVersion": "1.0.0",
            "name": "rail3",
            "type": "roce-ipvlan",
            "master": "rdma3",
            "ipam": {"type": "host-local", "subnet": "10.9.0.0/16"}
        })
    }

    fn parse(v: &Value) -> Result<NetConf> {
        NetConf::parse(v.to_string().as_bytes(), "net1")
    }

    fn with(key: &str, value: Value) -> Value {
        let mut v = base();
        v[key] = value;
        v
    }

    fn refused(v: Value, code: u32, needle: &str) {
        let err = parse(&v).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(
            err.to_string().contains(needle),
            "{err:?} should mention {needle:?}"
        );
    }

    #[test]
    fn minimal_config_gets_the_defaults() {
        let c = parse(&base()).unwrap();
        assert_eq!(c.rail.master.as_deref(), Some("rdma3"));
        assert_eq!(c.ipam.unwrap().kind, "host-local");
        assert!(c.source_routing);
        assert_eq!(c.sysctls.len(), 7);
        assert!(c
            .sysctls
            .iter()
            .any(|s| s.key == "net.ipv4.conf.net1.arp_notify" && s.value == "1"));
        assert_eq!(c.rdma.gid_timeout, DEFAULT_GID_TIMEOUT);
        assert_eq!(c.timeouts, Timeouts::default());
        assert!(c.rdma.device.is_none());
    }

    #[test]
    fn every_supported_version_parses() {
        for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            assert_eq!(parse(&with("cniVersion", json!(v))).unwrap().cni_version, v);
        }
        refused(with("cniVersion", json!("0.2.0")), 1, "0.2.0");
        refused(with("cniVersion", json!("0.1.0")), 1, "0.1.0");
    }

    #[test]
    fn not_json_is_code_6() {
        let err = NetConf::parse(b"{not json", "net1").unwrap_err();
        assert_eq!(err.code(), 6);
    }

    #[test]
    fn refusals_are_code_7_and_say_why() {
        refused(with("mode", json!("l3")), 7, "L2 segment");
        refused(with("mode", json!("l3s")), 7, "L2 segment");
        refused(with("mode", json!("bridge")), 7, "unknown");
        refused(with("master", json!("a/b")), 7, "master");
        refused(with("type", json!("ipvlan")), 7, "wrong binary");
        refused(with("mtu", json!(10)), 7, "mtu");
        refused(
            with("ipam", json!({"type": "../../bin/sh"})),
            7,
            "not a path",
        );
        refused(
            with("ipam", json!({"type": "x/host-local"})),
            7,
            "not a path",
        );
        refused(with("ipam", json!({})), 7, "ipam.type");
        refused(with("rdma", json!({"port": 0})), 7, "count from 1");
        refused(with("rdma", json!({"gidTimeoutMs": 0})), 7, "gidTimeoutMs");
        refused(with("rdma", json!({"devcie": "mlx5_0"})), 7, "devcie");
        refused(
            with("timeouts", json!({"totalMs": 0})),
            7,
            "timeouts.totalMs",
        );
        refused(
            with("timeouts", json!({"ipamMs": 120_001})),
            7,
            "timeouts.ipamMs",
        );
        refused(with("timeouts", json!({"gidMs": 5})), 7, "gidMs");
        refused(with("rdma", json!({"device": "../x"})), 7, "rdma.device");
        refused(with("logLevel", json!("loud")), 7, "logLevel");
        refused(with("logFile", json!("rel.log")), 7, "logFile");
        refused(
            with("logFile", json!("/var/log/audit/audit.log")),
            7,
            "/var/log/roce-ipvlan/",
        );
        refused(
            with("logFile", json!("/var/log/roce-ipvlan/../pods/x.log")),
            7,
            "'..'",
        );
        for name in [
            "x\n2026-01-01 INFO forged",
            "-x",
            ".x",
            "a b",
            "a/b",
            "é",
            "x\u{1b}[2J",
        ] {
            let err = parse(&with("name", json!(name))).unwrap_err();
            assert_eq!(err.code(), 7, "{name:?}");
            assert!(err.to_string().contains("network name"), "{err}");
            assert!(!err.to_string().contains('\n'), "{err}");
        }
        for name in ["rail3", "a", "Rail_3.v1-x", "0"] {
            parse(&with("name", json!(name))).unwrap();
        }
        refused(with("sysctl", json!({"kernel.panic": "1"})), 7, "outside");
        refused(
            with("sysctl", json!({"net.ipv4.conf.IFNAME.x": {"a": 1}})),
            7,
            "expected a string",
        );
        let mut no_ipam = base();
        no_ipam.as_object_mut().unwrap().remove("ipam");
        refused(no_ipam, 7, "ipam");
        refused(with("deviceID", json!("3")), 7, "counter");
        refused(
            with("args", json!({"cni": {"master": 3}})),
            7,
            "args.cni.master",
        );
    }

    #[test]
    fn duplicate_sysctl_keys_in_json_are_refused() {
        let mut text = base().to_string();
        text.pop();
        text.push_str(
            r#","sysctl":{"net.ipv4.conf.IFNAME.arp_ignore":"1","net.ipv4.conf.IFNAME.arp_ignore":"2"}}"#,
        );
        let err = NetConf::parse(text.as_bytes(), "net1").unwrap_err();
        assert_eq!(err.code(), 7);
        assert!(err.to_string().contains("twice"), "{err}");
    }

    /// A NAD of 1.4 MB with 40,000 sysctl keys (under the API server's object limit) kept
    /// ADD and CHECK busy for more than a minute (issue #25, item 4): refused at the cap, in
    /// about the time the JSON takes to read.
    #[test]
    fn forty_thousand_sysctl_keys_are_refused_fast() {
        let mut v = base();
        v["sysctl"] = (0..40_000)
            .map(|i| (format!("net.ipv4.conf.IFNAME.k{i}"), json!("1")))
            .collect::<serde_json::Map<_, _>>()
            .into();
        let text = v.to_string();
        assert!(text.len() > 1_300_000, "{} bytes", text.len());
        let start = std::time::Instant::now();
        let err = NetConf::parse(text.as_bytes(), "net1").unwrap_err();
        let took = start.elapsed();
        assert_eq!(err.code(), 7);
        assert!(err.to_string().contains("at most 256 sysctl keys"), "{err}");
        assert!(took < Duration::from_secs(2), "took {took:?}");
        // At the cap, accepted.
        v["sysctl"] = (0..sysctl_keys::MAX_KEYS)
            .map(|i| (format!("net.ipv4.conf.IFNAME.k{i}"), json!("1")))
            .collect::<serde_json::Map<_, _>>()
            .into();
        parse(&v).unwrap();
    }

    #[test]
    fn timeouts_default_and_override() {
        let c = parse(&with("timeouts", json!({"totalMs": 5000}))).unwrap();
        assert_eq!(c.timeouts.total, Duration::from_millis(5000));
        assert_eq!(c.timeouts.ipam, DEFAULT_IPAM_TIMEOUT);
        let c = parse(&with("timeouts", json!({"ipamMs": 700}))).unwrap();
        assert_eq!(c.timeouts.total, DEFAULT_TOTAL_TIMEOUT);
        assert_eq!(c.timeouts.ipam, Duration::from_millis(700));
    }

    #[test]
    fn options_turn_things_off_and_override() {
        let mut v = base();
        v["arpSysctls"] = json!(false);
        v["sourceRouting"] = json!(false);
        v["sysctl"] = json!({"net.ipv4.conf.IFNAME.arp_ignore": 2});
        v["rdma"] = json!({"device": "mlx5_6", "port": 1, "gidTimeoutMs": 1500});
        let c = parse(&v).unwrap();
        assert!(!c.source_routing);
        assert_eq!(c.sysctls.len(), 2);
        assert_eq!(c.sysctls[0].key, "net.ipv4.conf.net1.arp_notify");
        assert_eq!(c.sysctls[1].value, "2");
        assert_eq!(c.rdma.device.as_deref(), Some("mlx5_6"));
        assert_eq!(c.rdma.gid_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn slaac_makes_ipam_optional_and_adds_its_sysctls() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("ipam");
        v["ipv6"] = json!({"slaac": true, "prefix": "2001:db8:1:2::/64", "dad": "optimistic", "raTimeoutMs": 5000});
        let c = parse(&v).unwrap();
        assert!(c.ipam.is_none());
        let s = c.slaac.unwrap();
        assert_eq!(s.prefix.unwrap().to_string(), "2001:db8:1:2::/64");
        assert_eq!(s.dad, DadMode::Optimistic);
        assert_eq!(s.ra_timeout, Duration::from_millis(5000));
        let keys: Vec<_> = c.sysctls.iter().map(|s| s.key.as_str()).collect();
        assert!(
            keys.contains(&"net.ipv6.conf.net1.optimistic_dad"),
            "{keys:?}"
        );
        // IPv6 is switched on last, once the interface is configured for SLAAC.
        assert_eq!(keys.last(), Some(&"net.ipv6.conf.net1.disable_ipv6"));
        assert!(
            c.sysctls.iter().all(|s| !s.pod_wide || s.path[1] == "ipv4"),
            "IPv6 stays off elsewhere"
        );
    }

    #[test]
    fn slaac_refusals() {
        refused(
            with("ipv6", json!({"slaac": true, "linkLocal": false})),
            7,
            "SLAAC needs the child's IPv6 link-local",
        );
        let kept = NetConf::parse(
            with("ipv6", json!({"linkLocal": true}))
                .to_string()
                .as_bytes(),
            "net1",
        )
        .unwrap();
        assert!(kept.ipv6_link_local && kept.slaac.is_none());
        refused(
            with("ipv6", json!({"slaac": true, "dad": "maybe"})),
            7,
            "ipv6.dad",
        );
        refused(
            with("ipv6", json!({"slaac": true, "prefix": "10.0.0.0/8"})),
            7,
            "ipv6.prefix",
        );
        refused(
            with("ipv6", json!({"slaac": true, "prefix": "2001:db8::1/64"})),
            7,
            "host bits",
        );
        refused(
            with("ipv6", json!({"slaac": true, "raTimeoutMs": 0})),
            7,
            "raTimeoutMs",
        );
        refused(with("ipv6", json!({"prefix": "2001:db8::/64"})), 7, "slaac");
        refused(
            with("ipv6", json!({"slaac": true, "prfix": "x"})),
            7,
            "prfix",
        );
        let c = parse(&with("ipv6", json!({"slaac": false}))).unwrap();
        assert!(c.slaac.is_none());
    }

    #[test]
    fn retrans_time_sets_the_childs_neighbour_timer() {
        let retrans = |c: &NetConf| {
            c.sysctls
                .iter()
                .find(|s| s.key == "net.ipv6.neigh.net1.retrans_time_ms")
                .map(|s| s.value.clone())
        };
        let c = parse(&with("ipv6", json!({"slaac": true}))).unwrap();
        assert_eq!(c.slaac.as_ref().unwrap().retrans_time, DEFAULT_RETRANS_TIME);
        assert_eq!(retrans(&c).as_deref(), Some("100"));
        let c = parse(&with("ipv6", json!({"slaac": true, "retransTimeMs": 250}))).unwrap();
        assert_eq!(retrans(&c).as_deref(), Some("250"));
        // The sysctl alone overrides the default, as any default.
        let mut v = with("ipv6", json!({"slaac": true}));
        v["sysctl"] = json!({"net.ipv6.neigh.IFNAME.retrans_time_ms": "1000"});
        assert_eq!(retrans(&parse(&v).unwrap()).as_deref(), Some("1000"));
        // Both: which one was meant is unclear.
        v["ipv6"]["retransTimeMs"] = json!(200);
        refused(v.clone(), 7, "give only one");
        v["sysctl"] = json!({"net.ipv6.neigh.net1.retrans_time": "1"});
        refused(v, 7, "give only one");
        for bad in [0, 9, 60_001] {
            refused(
                with("ipv6", json!({"slaac": true, "retransTimeMs": bad})),
                7,
                "retransTimeMs",
            );
        }
        refused(with("ipv6", json!({"retransTimeMs": 100})), 7, "slaac");
        // Without SLAAC the kernel's timer stays.
        assert_eq!(retrans(&parse(&base()).unwrap()), None);
    }

    #[test]
    fn teardown_reads_what_it_needs_and_ignores_the_rest() {
        let mut v = base();
        v["mode"] = json!("l3");
        v["deviceID"] = json!("0");
        v["rdma"] = json!({"newKey": 1});
        v["logLevel"] = json!("loud");
        v["prevResult"] = json!({"ips": []});
        v["runtimeConfig"] =
            json!({"CNIDeviceInfoFile": "/var/run/k8s.cni.cncf.io/devinfo/cni/p-net1"});
        let t = NetConf::parse_teardown(v.to_string().as_bytes()).unwrap();
        assert_eq!(t.conf.name, "rail3");
        assert_eq!(t.conf.ipam.as_ref().unwrap().kind, "host-local");
        assert!(t.conf.prev_result.is_some());
        assert!(t.conf.device_info_file.is_some());
        assert!(t.conf.log.level.is_none());
        assert_eq!(t.ignored.len(), 1, "{:?}", t.ignored);
        assert!(t.ignored[0].contains("logLevel"), "{:?}", t.ignored);

        let mut v = base();
        v["ipam"] = json!({"type": "../../bin/sh"});
        v["runtimeConfig"] = json!({"CNIDeviceInfoFile": "/etc/shadow"});
        v.as_object_mut().unwrap().remove("cniVersion");
        let t = NetConf::parse_teardown(v.to_string().as_bytes()).unwrap();
        assert!(t.conf.ipam.is_none(), "a path is never executed");
        assert!(t.conf.device_info_file.is_none(), "nor removed");
        assert_eq!(t.conf.cni_version, "1.1.0");
        assert_eq!(t.ignored.len(), 3, "{:?}", t.ignored);

        // 0.3.x: DEL gets no prevResult (it came with 0.4.0) and needs none.
        let v = with("cniVersion", json!("0.3.1"));
        let t = NetConf::parse_teardown(v.to_string().as_bytes()).unwrap();
        assert_eq!(t.conf.cni_version, "0.3.1");
        assert!(t.conf.prev_result.is_none());
        assert!(t.ignored.is_empty(), "{:?}", t.ignored);

        assert_eq!(NetConf::parse_teardown(b"[1]").unwrap_err().code(), 6);
        assert_eq!(NetConf::parse_teardown(b"{").unwrap_err().code(), 6);
    }

    #[test]
    fn peek_version_reads_only_the_version() {
        assert_eq!(
            peek_version(br#"{"cniVersion":"0.4.0","x":1}"#).as_deref(),
            Some("0.4.0")
        );
        assert_eq!(peek_version(b"garbage"), None);
    }

    #[test]
    fn device_info_path_from_runtime_config() {
        let rc =
            json!({"CNIDeviceInfoFile": "/var/run/k8s.cni.cncf.io/devinfo/cni/ns-rail-abc_net1"});
        assert_eq!(
            device_info_file(Some(&rc)).unwrap(),
            Some(PathBuf::from(
                "/var/run/k8s.cni.cncf.io/devinfo/cni/ns-rail-abc_net1"
            ))
        );
        assert_eq!(device_info_file(None).unwrap(), None);
        assert_eq!(device_info_file(Some(&json!({"mac": "x"}))).unwrap(), None);
        assert_eq!(
            device_info_file(Some(&json!({"CNIDeviceInfoFile": ""}))).unwrap(),
            None
        );
        for bad in [
            json!("relative/x"),
            json!("/a/../b"),
            json!("/a/"),
            json!("/etc/shadow"),
            json!("/var/run/k8s.cni.cncf.io/devinfo"),
            json!("/var/run/k8s.cni.cncf.io/devinfo/x"),
            // The device plugins' folder: names anyone can predict.
            json!("/var/run/k8s.cni.cncf.io/devinfo/dp/nvidia.com-rdma-0000:3b:00.2-device.json"),
            json!("/var/run/k8s.cni.cncf.io/devinfo/cni/sub/x"),
            json!(7),
        ] {
            let rc = json!({ "CNIDeviceInfoFile": bad });
            let err = device_info_file(Some(&rc)).unwrap_err();
            assert_eq!(err.code(), 7, "{err}");
        }
    }
}
