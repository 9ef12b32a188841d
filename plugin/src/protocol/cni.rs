//! The CNI protocol: environment, versions, and the result document in each supported version.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::protocol::error::{Error, Result};

/// Versions accepted in `cniVersion`, oldest first. 0.3.x is what the NVIDIA Network Operator
/// renders into its NADs; 0.4.0 is the oldest with CHECK. 0.1.0 and 0.2.0 results have another
/// shape (`ip4`, `ip6`) and no interfaces, and are not spoken.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

pub fn check_version(version: &str) -> Result<()> {
    if SUPPORTED_VERSIONS.contains(&version) {
        Ok(())
    } else {
        Err(Error::IncompatibleVersion {
            found: version.to_string(),
            supported: SUPPORTED_VERSIONS.join(", "),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
    /// CNI 1.1: is the plugin ready for ADD? Needs only CNI_PATH.
    Status,
    /// CNI 1.1: drop the state of attachments not in `cni.dev/valid-attachments`. Needs only
    /// CNI_PATH.
    Gc,
}

/// The first version with CHECK (and with `prevResult` at DEL: before it, DEL gets none).
pub const CHECK_VERSION: &str = "0.4.0";

/// The first version with STATUS and GC.
pub const STATUS_GC_VERSION: &str = "1.1.0";

/// The first version that has `command` (as CNI_COMMAND spells it).
fn first_version_with(command: &str) -> &'static str {
    match command {
        "CHECK" => CHECK_VERSION,
        "STATUS" | "GC" => STATUS_GC_VERSION,
        _ => SUPPORTED_VERSIONS[0],
    }
}

/// Whether `version`, one of ours, has `command`; an unknown version has none.
pub(crate) fn has_command(version: &str, command: &str) -> bool {
    let index = |v: &str| SUPPORTED_VERSIONS.iter().position(|s| *s == v);
    index(version).is_some_and(|i| Some(i) >= index(first_version_with(command)))
}

/// A command newer than the configuration's cniVersion (CHECK before 0.4.0, STATUS and GC
/// before 1.1.0): the spec's libraries answer "incompatible version" (code 1), and so does this
/// plugin.
pub(crate) fn require_command(version: &str, command: &str) -> Result<()> {
    if has_command(version, command) {
        return Ok(());
    }
    Err(Error::IncompatibleVersion {
        found: version.to_string(),
        supported: format!(
            "{command} only with cniVersion {} or later",
            first_version_with(command)
        ),
    })
}

/// The CNI_* environment, checked for what each command needs.
#[derive(Debug, Clone)]
pub struct Env {
    pub command: Command,
    pub container_id: String,
    /// Absent for DEL when the runtime has already removed the namespace.
    pub netns: Option<PathBuf>,
    pub ifname: String,
    pub path: Vec<PathBuf>,
}

impl Env {
    pub fn from_process() -> Result<Env> {
        Env::parse(|k| std::env::var(k).ok())
    }

    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Env> {
        let var = |k: &str| get(k).filter(|v| !v.is_empty());
        let command = match var("CNI_COMMAND").as_deref() {
            Some("ADD") => Command::Add,
            Some("DEL") => Command::Del,
            Some("CHECK") => Command::Check,
            Some("VERSION") => Command::Version,
            Some("STATUS") => Command::Status,
            Some("GC") => Command::Gc,
            Some(other) => {
                return Err(Error::InvalidEnv(format!(
                    "CNI_COMMAND={other:?} is not supported: expected ADD, DEL, CHECK, VERSION, \
                     STATUS or GC"
                )))
            }
            None => {
                return Err(Error::InvalidEnv(
                    "CNI_COMMAND is not set: this program is a CNI plugin, run by a container \
                     runtime (see `roce-ipvlan --help`)"
                        .into(),
                ))
            }
        };
        if command == Command::Version {
            return Ok(Env {
                command,
                container_id: String::new(),
                netns: None,
                ifname: String::new(),
                path: Vec::new(),
            });
        }
        let required = |k: &str| {
            var(k).ok_or_else(|| {
                Error::InvalidEnv(format!(
                    "{k} is not set: the runtime must pass it for {command:?}"
                ))
            })
        };
        let path: Vec<PathBuf> = required("CNI_PATH")?
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        if matches!(command, Command::Status | Command::Gc) {
            // The spec passes only CNI_COMMAND and CNI_PATH: these commands concern the
            // network, not one attachment.
            return Ok(Env {
                command,
                container_id: String::new(),
                netns: None,
                ifname: String::new(),
                path,
            });
        }
        let container_id = required("CNI_CONTAINERID")?;
        // As for the interface name, DEL takes any id: it only passes it on to IPAM DEL, and
        // logs it escaped.
        if command != Command::Del && !is_valid_name(&container_id) {
            return Err(Error::InvalidEnv(format!(
                "CNI_CONTAINERID={container_id:?} is not a valid container id: expected a letter \
                 or digit, then letters, digits, '_', '.' or '-' (the CNI spec's rule)"
            )));
        }
        let ifname = required("CNI_IFNAME")?;
        // DEL takes any name: an attachment added by an older release under a name refused now
        // must still get its IPAM DEL (del.rs checks the name before touching the pod).
        if command != Command::Del {
            validate_ifname(&ifname)?;
        }
        let netns = match command {
            Command::Del => var("CNI_NETNS").map(PathBuf::from),
            _ => Some(PathBuf::from(required("CNI_NETNS")?)),
        };
        // Nothing reads CNI_ARGS (the rail comes from the configuration's "args"), but a
        // malformed one is refused as the reference plugins' LoadArgs refuses it; except at
        // DEL, which must not strand the attachment over it (the reference plugins do not read
        // it there; IPAM DEL gets only its well-formed entries, ipam.rs).
        if command != Command::Del {
            check_cni_args(&var("CNI_ARGS").unwrap_or_default())?;
        }
        Ok(Env {
            command,
            container_id,
            netns,
            ifname,
            path,
        })
    }
}

/// The CNI spec's rule for a network name and a container id: an ASCII letter or digit, then
/// letters, digits, `_`, `.` or `-` (libcni: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`).
pub fn is_valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Linux interface names: 1..=15 bytes, no '/', no whitespace or ':', not "." or ".." (the
/// kernel's dev_valid_name), and no '%': the kernel takes a name with '%' as a pattern
/// (dev_get_valid_name: "net%d" becomes the first free "net<N>"), so the child would not be
/// found under the name ADD asked for and would leak.
pub fn validate_ifname(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidEnv(format!(
            "CNI_IFNAME={name:?} is not a valid interface name: {why}"
        )))
    };
    if name.is_empty() || name.len() > 15 {
        return bad("expected 1 to 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("\".\" and \"..\" are reserved");
    }
    if name == "all" || name == "default" {
        // /proc/sys/net/ipv{4,6}/conf/{all,default} are the pod-wide entries: a child of that
        // name would turn its per-interface sysctls into pod-wide ones.
        return bad("\"all\" and \"default\" name the pod-wide sysctl entries");
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c == '%' || c.is_whitespace() || c.is_control())
    {
        return bad("it must not contain '/', ':', '%', whitespace or control characters");
    }
    Ok(())
}

/// CNI_ARGS is `KEY=VALUE` pairs separated by `;`.
fn check_cni_args(raw: &str) -> Result<()> {
    for kv in raw.split(';').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some((k, _)) if !k.is_empty() => {}
            _ => {
                return Err(Error::InvalidEnv(format!(
                    "CNI_ARGS entry {kv:?} is not KEY=VALUE"
                )))
            }
        }
    }
    Ok(())
}

/// The `KEY=VALUE` entries of CNI_ARGS, without the malformed ones: what DEL passes on to
/// IPAM DEL, whose own parser (host-local's LoadArgs) would refuse the whole list over one bad
/// entry and leave the address allocated.
pub fn well_formed_cni_args(raw: &str) -> String {
    raw.split(';')
        .filter(|kv| kv.split_once('=').is_some_and(|(k, _)| !k.is_empty()))
        .collect::<Vec<_>>()
        .join(";")
}

/// A version-neutral result: what IPAM returned plus what the plugin adds.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CniResult {
    #[serde(default)]
    pub interfaces: Vec<Interface>,
    #[serde(default)]
    pub ips: Vec<IpConfig>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub dns: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct IpConfig {
    pub address: IpNetwork,
    #[serde(default)]
    pub gateway: Option<IpAddr>,
    #[serde(default)]
    pub interface: Option<usize>,
}

/// A route; fields other than dst/gw (1.1.0 adds mtu, advmss, priority, table, scope) are kept
/// as they came so that they reach a 1.1.0 result unchanged (older results drop them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// The `roce` result extension: where the attachment's RoCE v2 GID is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Roce {
    pub rdma_device: String,
    pub port: u32,
    pub gid_index: u32,
    pub gid: std::net::Ipv6Addr,
    pub gid_type: String,
}

impl Roce {
    /// The interface alias written on the child; the pod reads it at /sys/class/net/<if>/ifalias.
    pub fn ifalias(&self) -> String {
        format!(
            "rdma_dev={} port={} gid_index={} gid={}",
            self.rdma_device, self.port, self.gid_index, self.gid
        )
    }

    pub fn from_ifalias(alias: &str) -> Option<Roce> {
        let mut fields = BTreeMap::new();
        for kv in alias.split_whitespace() {
            let (k, v) = kv.split_once('=')?;
            fields.insert(k, v);
        }
        Some(Roce {
            rdma_device: fields.get("rdma_dev")?.to_string(),
            port: fields.get("port")?.parse().ok()?,
            gid_index: fields.get("gid_index")?.parse().ok()?,
            gid: fields.get("gid")?.parse().ok()?,
            gid_type: "RoCE v2".to_string(),
        })
    }
}

impl CniResult {
    /// Parses a result in any supported version (0.3.x and 0.4.0 ips carry a "version" field,
    /// ignored here).
    pub fn parse(value: &Value) -> Result<CniResult, String> {
        serde_json::from_value(value.clone()).map_err(|e| e.to_string())
    }

    /// The part of a multi-rail result that concerns interface `name`: that interface alone,
    /// its addresses (pointing at it), the routes and DNS; what the child's IPAM call sees as
    /// prevResult.
    pub fn for_interface(&self, name: &str) -> CniResult {
        let at = self.interfaces.iter().position(|i| i.name == name);
        CniResult {
            interfaces: at.map(|i| self.interfaces[i].clone()).into_iter().collect(),
            ips: self
                .ips
                .iter()
                .filter(|ip| at.is_some() && ip.interface == at)
                .map(|ip| IpConfig {
                    interface: Some(0),
                    ..ip.clone()
                })
                .collect(),
            routes: self.routes.clone(),
            dns: self.dns.clone(),
        }
    }

    /// The result document in `version`, with the `roce` extension when given.
    pub fn to_json(&self, version: &str, roce: Option<&Roce>) -> Value {
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut o = Map::new();
                if ips_carry_version(version) {
                    let v = if ip.address.is_ipv4() { "4" } else { "6" };
                    o.insert("version".into(), v.into());
                }
                o.insert("address".into(), ip.address.to_string().into());
                if let Some(gw) = ip.gateway {
                    o.insert("gateway".into(), gw.to_string().into());
                }
                if let Some(i) = ip.interface {
                    o.insert("interface".into(), i.into());
                }
                Value::Object(o)
            })
            .collect();
        // `mtu` on interfaces exists from 1.1.0 on.
        let interfaces = fields_of_version(&self.interfaces, version, |i| i.mtu = None);
        let mut doc = Map::new();
        doc.insert("cniVersion".into(), version.into());
        doc.insert("interfaces".into(), interfaces.into());
        doc.insert("ips".into(), ips.into());
        if !self.routes.is_empty() {
            // mtu, advmss, priority, table and scope exist from 1.1.0 on: an IPAM that sent
            // them in an older result does not make ours say them.
            let routes = fields_of_version(&self.routes, version, |r| r.extra.clear());
            doc.insert("routes".into(), routes.into());
        }
        let dns = if self.dns.is_null() {
            Value::Object(Map::new())
        } else {
            self.dns.clone()
        };
        doc.insert("dns".into(), dns);
        if let Some(roce) = roce {
            doc.insert(
                "roce".into(),
                serde_json::to_value(roce).expect("Roce always serializes"),
            );
        }
        Value::Object(doc)
    }
}

impl CniResult {
    /// The result of a multi-rail attachment: as [`CniResult::to_json`], with `roce` a list of
    /// each child's `roce` data in interface order, each with the `interface` index it
    /// concerns.
    pub fn to_json_rails(&self, version: &str, roces: &[Roce]) -> Value {
        let mut doc = self.to_json(version, None);
        let list: Vec<Value> = roces
            .iter()
            .enumerate()
            .map(|(i, roce)| {
                let mut v = serde_json::to_value(roce).expect("Roce always serializes");
                v["interface"] = i.into();
                v
            })
            .collect();
        doc["roce"] = list.into();
        doc
    }
}

/// Each item as JSON; in a result older than 1.1.0, after `drop_1_1_0` took away the fields
/// that version added.
fn fields_of_version<T: Clone + Serialize>(
    items: &[T],
    version: &str,
    drop_1_1_0: impl Fn(&mut T),
) -> Vec<Value> {
    items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            if version != "1.1.0" {
                drop_1_1_0(&mut item);
            }
            serde_json::to_value(item).expect("a result field always serializes")
        })
        .collect()
}

/// Before 1.0.0 (0.3.0, 0.3.1, 0.4.0: one result shape, the Go library's types040) each ip
/// says whether it is IPv4 or IPv6 in `"version": "4"|"6"`; 1.0.0 dropped it.
fn ips_carry_version(version: &str) -> bool {
    matches!(version, "0.3.0" | "0.3.1" | "0.4.0")
}

/// The VERSION answer: the requested version when it is one of ours, else our newest, and the
/// list. Never an error.
pub fn version_reply(requested: Option<&str>) -> Value {
    let newest = SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1];
    let version = requested
        .filter(|v| SUPPORTED_VERSIONS.contains(v))
        .unwrap_or(newest);
    serde_json::json!({
        "cniVersion": version,
        "supportedVersions": SUPPORTED_VERSIONS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_and_gc_only_from_1_1_0() {
        for v in ["0.4.0", "1.0.0"] {
            let err = require_command(v, "STATUS").unwrap_err();
            assert_eq!(err.code(), 1, "{err}");
            assert!(err.to_string().contains("1.1.0"), "{err}");
        }
        require_command("1.1.0", "GC").unwrap();
        assert!(
            !has_command("2.0.0", "GC"),
            "an unknown version has no command"
        );
    }

    /// CHECK came with 0.4.0: a 0.3.x configuration gets what libcni's skel answers, code 1.
    #[test]
    fn check_only_from_0_4_0() {
        for v in ["0.3.0", "0.3.1"] {
            let err = require_command(v, "CHECK").unwrap_err();
            assert_eq!(err.code(), 1, "{err}");
            assert!(
                err.to_string()
                    .contains("CHECK only with cniVersion 0.4.0 or later"),
                "{err}"
            );
            require_command(v, "ADD").unwrap();
            require_command(v, "DEL").unwrap();
        }
        for v in ["0.4.0", "1.0.0", "1.1.0"] {
            require_command(v, "CHECK").unwrap();
        }
    }

    fn env(vars: &[(&str, &str)]) -> Result<Env> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env::parse(|k| vars.get(k).cloned())
    }

    const ADD: &[(&str, &str)] = &[
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/p"),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
    ];

    #[test]
    fn env_for_add_is_complete() {
        let e = env(ADD).unwrap();
        assert_eq!(e.command, Command::Add);
        assert_eq!(e.path.len(), 2);
        assert_eq!(
            e.netns.as_deref(),
            Some(std::path::Path::new("/run/netns/p"))
        );
    }

    #[test]
    fn env_missing_variables_are_code_4() {
        for missing in [
            "CNI_COMMAND",
            "CNI_CONTAINERID",
            "CNI_NETNS",
            "CNI_IFNAME",
            "CNI_PATH",
        ] {
            let vars: Vec<_> = ADD.iter().copied().filter(|(k, _)| *k != missing).collect();
            let err = env(&vars).unwrap_err();
            assert_eq!(err.code(), 4, "{missing}: {err}");
            assert!(err.to_string().contains(missing), "{err}");
        }
    }

    #[test]
    fn del_does_not_need_a_netns() {
        let vars: Vec<_> = ADD
            .iter()
            .map(|&(k, v)| {
                if k == "CNI_COMMAND" {
                    (k, "DEL")
                } else {
                    (k, v)
                }
            })
            .filter(|(k, _)| *k != "CNI_NETNS")
            .collect();
        let e = env(&vars).unwrap();
        assert_eq!(e.command, Command::Del);
        assert!(e.netns.is_none());
    }

    #[test]
    fn container_ids_follow_the_spec_except_for_del() {
        let with_id = |cmd: &'static str, id: &'static str| -> Vec<(&str, &str)> {
            ADD.iter()
                .map(|&(k, v)| match k {
                    "CNI_COMMAND" => (k, cmd),
                    "CNI_CONTAINERID" => (k, id),
                    _ => (k, v),
                })
                .collect()
        };
        for id in ["x\nforged", "-a", "a b", "a/b", "a;b"] {
            for cmd in ["ADD", "CHECK"] {
                let err = env(&with_id(cmd, id)).unwrap_err();
                assert_eq!(err.code(), 4, "{cmd} {id:?}");
                assert!(err.to_string().contains("CNI_CONTAINERID"), "{err}");
            }
            env(&with_id("DEL", id)).unwrap();
        }
        for id in ["c1", "0f3a9c", "pod_1.x-y"] {
            env(&with_id("ADD", id)).unwrap();
        }
        assert!(!is_valid_name(""));
    }

    /// A malformed CNI_ARGS is refused (4) where the reference plugins refuse it, but never at
    /// DEL, which would otherwise leave the child and the address (issue #25, item 3).
    #[test]
    fn malformed_cni_args_refused_except_at_del() {
        for cmd in ["ADD", "CHECK", "DEL"] {
            let vars: Vec<_> = ADD
                .iter()
                .map(|&(k, v)| if k == "CNI_COMMAND" { (k, cmd) } else { (k, v) })
                .chain([("CNI_ARGS", "IgnoreUnknown=1;garbage")])
                .collect();
            match (cmd, env(&vars)) {
                ("DEL", got) => assert_eq!(got.unwrap().command, Command::Del),
                (_, got) => {
                    let err = got.unwrap_err();
                    assert_eq!(err.code(), 4, "{cmd}: {err}");
                    assert!(err.to_string().contains("\"garbage\""), "{err}");
                }
            }
        }
        assert_eq!(
            well_formed_cni_args("IgnoreUnknown=1;garbage;=x;;K8S_POD_NAME=a=b"),
            "IgnoreUnknown=1;K8S_POD_NAME=a=b"
        );
        assert_eq!(well_formed_cni_args("garbage"), "");
    }

    #[test]
    fn del_takes_any_interface_name() {
        let vars: Vec<_> = ADD
            .iter()
            .map(|&(k, v)| match k {
                "CNI_COMMAND" => (k, "DEL"),
                "CNI_IFNAME" => (k, "net%d"),
                _ => (k, v),
            })
            .collect();
        assert_eq!(env(&vars).unwrap().ifname, "net%d");
    }

    #[test]
    fn status_and_gc_need_only_cni_path() {
        for (cmd, want) in [("STATUS", Command::Status), ("GC", Command::Gc)] {
            let e = env(&[("CNI_COMMAND", cmd), ("CNI_PATH", "/opt/cni/bin")]).unwrap();
            assert_eq!(e.command, want);
            assert_eq!(e.path, vec![PathBuf::from("/opt/cni/bin")]);
            assert!(e.netns.is_none() && e.ifname.is_empty());
            let err = env(&[("CNI_COMMAND", cmd)]).unwrap_err();
            assert_eq!(err.code(), 4);
            assert!(err.to_string().contains("CNI_PATH"), "{err}");
        }
    }

    #[test]
    fn bad_interface_names_are_refused() {
        for name in [
            "",
            "a/b",
            "..",
            ".",
            "has space",
            "tab\there",
            "sixteen-chars-xx",
            "a:1",
            "all",
            "default",
            "net%d",
            "%d",
            "a%",
        ] {
            assert!(validate_ifname(name).is_err(), "{name:?} should be refused");
        }
        for name in ["net1", "rdma15", "eth0.100", "fifteen-chars-x"] {
            validate_ifname(name).unwrap();
        }
    }

    #[test]
    fn unknown_version_is_code_1() {
        for v in ["0.1.0", "0.2.0", "0.3.2", "2.0.0"] {
            assert_eq!(check_version(v).unwrap_err().code(), 1, "{v}");
        }
        for v in SUPPORTED_VERSIONS {
            check_version(v).unwrap();
        }
    }

    fn sample() -> (CniResult, Roce) {
        let ipam = json!({
            "cniVersion": "0.4.0",
            "ips": [{"version": "4", "address": "10.9.0.7/16", "gateway": "10.9.0.1"}],
            "routes": [{"dst": "10.10.0.0/16", "gw": "10.9.0.1"}],
            "dns": {}
        });
        let mut r = CniResult::parse(&ipam).unwrap();
        r.interfaces.push(Interface {
            name: "net1".into(),
            mac: "52:54:00:00:00:01".into(),
            mtu: Some(9000),
            sandbox: "/run/netns/p".into(),
        });
        r.ips[0].interface = Some(0);
        let roce = Roce {
            rdma_device: "rxe0".into(),
            port: 1,
            gid_index: 3,
            gid: "::ffff:10.9.0.7".parse().unwrap(),
            gid_type: "RoCE v2".into(),
        };
        (r, roce)
    }

    #[test]
    fn results_before_1_0_0_have_ip_versions() {
        let (mut r, roce) = sample();
        r.ips.push(IpConfig {
            address: "fd00::7/64".parse().unwrap(),
            gateway: None,
            interface: Some(0),
        });
        for v in ["0.3.0", "0.3.1", "0.4.0"] {
            let doc = r.to_json(v, Some(&roce));
            assert_eq!(doc["cniVersion"], v);
            assert_eq!(doc["ips"][0]["version"], "4", "{v}");
            assert_eq!(doc["ips"][1]["version"], "6", "{v}");
            assert_eq!(doc["ips"][0]["interface"], 0, "{v}");
            assert!(doc["interfaces"][0].get("mtu").is_none(), "{v}");
            assert_eq!(doc["roce"]["gidIndex"], 3);
            assert_eq!(doc["roce"]["gid"], "::ffff:10.9.0.7");
            // 0.3.0, 0.3.1 and 0.4.0 results differ in their cniVersion only.
            let mut as_040 = r.to_json("0.4.0", Some(&roce));
            as_040["cniVersion"] = v.into();
            assert_eq!(doc, as_040);
        }
    }

    /// What host-local, whereabouts or nv-ipam print when asked in 0.3.1.
    #[test]
    fn a_0_3_1_ipam_result_parses() {
        let r = CniResult::parse(&json!({
            "cniVersion": "0.3.1",
            "ips": [{"version": "4", "address": "10.9.0.7/16", "gateway": "10.9.0.1"},
                    {"version": "6", "address": "fd00::7/64"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.9.0.1"}],
            "dns": {}
        }))
        .unwrap();
        assert_eq!(r.ips.len(), 2);
        assert_eq!(r.ips[1].address.to_string(), "fd00::7/64");
        assert_eq!(r.ips[0].gateway, Some("10.9.0.1".parse().unwrap()));
        assert_eq!(r.routes[0].gw, Some("10.9.0.1".parse().unwrap()));
    }

    #[test]
    fn result_1_0_0_has_no_ip_versions() {
        let (r, roce) = sample();
        let doc = r.to_json("1.0.0", Some(&roce));
        assert!(doc["ips"][0].get("version").is_none());
        assert_eq!(doc["ips"][0]["address"], "10.9.0.7/16");
        assert_eq!(doc["ips"][0]["gateway"], "10.9.0.1");
        assert_eq!(doc["interfaces"][0]["sandbox"], "/run/netns/p");
        assert!(doc["interfaces"][0].get("mtu").is_none());
        assert_eq!(doc["routes"][0]["dst"], "10.10.0.0/16");
        assert_eq!(doc["roce"]["rdmaDevice"], "rxe0");
        assert_eq!(doc["roce"]["gidType"], "RoCE v2");
    }

    #[test]
    fn result_1_1_0_keeps_interface_mtu_and_route_extras() {
        let (mut r, _) = sample();
        r.routes[0].extra.insert("mtu".into(), json!(1400));
        let doc = r.to_json("1.1.0", None);
        assert_eq!(doc["interfaces"][0]["mtu"], 9000);
        assert_eq!(doc["routes"][0]["mtu"], 1400);
        assert!(doc.get("roce").is_none());
    }

    /// The 1.1.0 route fields are not said in an older result, even when the IPAM sent them.
    #[test]
    fn results_before_1_1_0_drop_route_extras() {
        let (mut r, _) = sample();
        r.routes[0].extra.insert("table".into(), json!(100));
        r.routes[0].extra.insert("scope".into(), json!(253));
        for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
            let doc = r.to_json(v, None);
            assert_eq!(
                doc["routes"][0],
                json!({"dst": "10.10.0.0/16", "gw": "10.9.0.1"}),
                "{v}"
            );
        }
        assert_eq!(r.to_json("1.1.0", None)["routes"][0]["table"], 100);
    }

    #[test]
    fn ifalias_round_trips() {
        let (_, roce) = sample();
        let alias = roce.ifalias();
        assert_eq!(
            alias,
            "rdma_dev=rxe0 port=1 gid_index=3 gid=::ffff:10.9.0.7"
        );
        assert_eq!(Roce::from_ifalias(&alias), Some(roce));
        assert_eq!(Roce::from_ifalias("something else"), None);
    }

    #[test]
    fn version_reply_lists_all() {
        let v = version_reply(Some("1.0.0"));
        assert_eq!(v["cniVersion"], "1.0.0");
        let all = json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]);
        assert_eq!(v["supportedVersions"], all);
        assert_eq!(version_reply(Some("0.3.1"))["cniVersion"], "0.3.1");
        for unknown in [Some("1.2.0"), Some("0.2.0"), Some("x"), None] {
            let v = version_reply(unknown);
            assert_eq!(v["cniVersion"], "1.1.0", "{unknown:?}");
            assert_eq!(v["supportedVersions"], all);
        }
    }

    #[test]
    fn a_multi_rail_result_lists_every_child_and_its_roce_data() {
        let roce = |dev: &str, index: u32| Roce {
            rdma_device: dev.into(),
            port: 1,
            gid_index: index,
            gid: "::ffff:10.0.0.1".parse().unwrap(),
            gid_type: "RoCE v2".into(),
        };
        let result = CniResult::parse(&json!({
            "interfaces": [{"name": "net1r0", "sandbox": "/run/netns/p"},
                           {"name": "net1r1", "sandbox": "/run/netns/p"}],
            "ips": [{"address": "10.0.0.1/24", "interface": 0},
                    {"address": "10.0.1.1/24", "interface": 1}],
            "routes": [{"dst": "10.1.0.0/16"}]
        }))
        .unwrap();
        let doc = result.to_json_rails("1.1.0", &[roce("rxe0", 3), roce("rxe1", 4)]);
        assert_eq!(doc["roce"][1]["rdmaDevice"], "rxe1");
        assert_eq!(doc["roce"][1]["interface"], 1);
        assert_eq!(doc["roce"][0]["gidIndex"], 3);
        assert_eq!(doc["interfaces"].as_array().unwrap().len(), 2);
        // What one child's IPAM call sees as prevResult: its interface and addresses only.
        let own = result.for_interface("net1r1");
        assert_eq!(own.interfaces.len(), 1);
        assert_eq!(own.interfaces[0].name, "net1r1");
        assert_eq!(own.ips.len(), 1);
        assert_eq!(own.ips[0].address.to_string(), "10.0.1.1/24");
        assert_eq!(own.ips[0].interface, Some(0));
        assert_eq!(own.routes, result.routes);
        let none = result.for_interface("net1r7");
        assert!(none.interfaces.is_empty() && none.ips.is_empty());
    }
}
