//! The rail-selecting inputs of an attachment, as the configuration gives them: their syntax and
//! the NAD's `allowedRails`, checked while the configuration is parsed (config.rs). Their
//! precedence, and who may choose with which, is attach/rail.rs's documentation; `rail::resolve`
//! looks the rail up on the node.

use serde_json::Value;

use crate::protocol::cni;
use crate::protocol::error::{Error, Result};

/// Whether `name` can be an RDMA device name: not empty, no `/` or NUL, not starting with `.`,
/// so that joined to `/sys/class/infiniband` it names an entry of that directory. The one check
/// for every RDMA device name from a configuration or a CLI.
pub(crate) fn valid_rdma_device_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\0'])
}

/// The rail-selecting inputs of one attachment, syntax-checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    pub master: Option<String>,
    pub rdma_device: Option<String>,
    /// A PCI address, `dddd:bb:dd.f` (lower case).
    pub device_id: Option<String>,
    pub args_master: Option<String>,
    pub args_rdma_device: Option<String>,
    /// The NAD's `allowedRails`: the rails cni-args may choose (empty: none).
    pub allowed: AllowedRails,
    /// The NAD's `rails`: every matching netdev is a rail of this one attachment (one child
    /// each); exclusive with every other input that names a rail ([`Inputs::with_rails`]).
    pub rails: Option<Rails>,
}

/// The NAD's `rails`: netdev names and glob patterns, with `allowedRails`' syntax; every
/// netdev of the node that matches one is a rail of the attachment, in name order
/// (`attach::rail::find_all`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rails(Vec<String>);

impl Rails {
    /// Checks the NAD's `rails` value (absent: None).
    pub fn parse(value: Option<&Value>) -> Result<Option<Rails>> {
        Ok(parse_patterns("rails", "leave it out and name one rail", value)?.map(Rails))
    }

    pub fn matches(&self, netdev: &str) -> bool {
        self.0
            .iter()
            .any(|p| glob_match(p.as_bytes(), netdev.as_bytes()))
    }

    /// The patterns, for messages: `["rdma*", "eth1"]`.
    pub fn describe(&self) -> String {
        format!(
            "[{}]",
            self.0
                .iter()
                .map(|p| format!("{p:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// The NAD's `allowedRails`: netdev names and glob patterns (`*` any run of characters, `?`
/// one character) that a pod's cni-args may choose as its rail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedRails(Vec<String>);

impl AllowedRails {
    /// Checks the NAD's `allowedRails` value (absent: nothing allowed).
    pub fn parse(value: Option<&Value>) -> Result<AllowedRails> {
        Ok(AllowedRails(
            parse_patterns("allowedRails", "leave it out to let no pod choose", value)?
                .unwrap_or_default(),
        ))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn allows(&self, netdev: &str) -> bool {
        self.0
            .iter()
            .any(|p| glob_match(p.as_bytes(), netdev.as_bytes()))
    }

    /// Refuses a rail chosen by cni-args (`what`, e.g. `"args.cni.master" eth9`) that the NAD
    /// does not allow.
    pub(crate) fn check(&self, what: &str, netdev: &str) -> Result<()> {
        if self.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "{what} chooses the rail, but this NAD lets no pod choose it: cni-args come from \
                 the pod, so they are honoured only for rails the NAD lists in \"allowedRails\" \
                 (e.g. [\"rdma*\"]); add that to the NAD, or drop the cni-args and name the rail \
                 in the NAD (\"master\") or through the device plugin (deviceID)"
            )));
        }
        if !self.allows(netdev) {
            return Err(Error::InvalidConfig(format!(
                "{what} is rail {netdev}, which this NAD does not allow: \"allowedRails\" is \
                 [{}]; choose one of those rails, or ask the NAD's owner to add it",
                self.0
                    .iter()
                    .map(|p| format!("{p:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(())
    }
}

/// A list of netdev names and glob patterns under `key` (None when absent or null); an empty
/// list is refused with `if_empty` as the advice.
fn parse_patterns(key: &str, if_empty: &str, value: Option<&Value>) -> Result<Option<Vec<String>>> {
    let bad = |why: String| {
        Err(Error::InvalidConfig(format!(
            "\"{key}\" {why}: expected a non-empty list of rail netdev names or glob \
             patterns, e.g. [\"rdma0\", \"rdma*\"]"
        )))
    };
    let list = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) if list.is_empty() => {
            return bad(format!("is empty ({if_empty})"))
        }
        Some(Value::Array(list)) => list,
        Some(other) => return bad(format!("is {other}")),
    };
    let mut patterns = Vec::new();
    for entry in list {
        let Some(p) = entry.as_str() else {
            return bad(format!("has {entry}, not a string"));
        };
        // A pattern is an interface name in which '*' and '?' stand for characters.
        let probe = p.replace(['*', '?'], "x");
        if p.is_empty()
            || p.len() > 15
            || cni::validate_ifname(&probe).is_err()
            || p.contains(['[', ']', '\\'])
        {
            return bad(format!(
                "has {p:?}, which is neither an interface name nor a pattern of one (up to \
                 15 bytes, no '/', ':', '%', whitespace; '*' and '?' as wildcards)"
            ));
        }
        patterns.push(p.to_string());
    }
    Ok(Some(patterns))
}

/// Glob matching with `*` (any run, also empty) and `?` (one byte); everything else literal.
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    // The classic two-pointer walk: on a mismatch, retry from the last '*' one byte further.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl Inputs {
    /// Checks the inputs as the configuration gives them. `device_id` is the top-level
    /// `deviceID`; `runtime_device_id` is `runtimeConfig.deviceID` (the CNI `deviceID`
    /// capability); `args` is the configuration's `args` object.
    pub fn new(
        master: Option<String>,
        rdma_device: Option<String>,
        device_id: Option<String>,
        runtime_device_id: Option<String>,
        args: Option<&Value>,
        allowed: AllowedRails,
    ) -> Result<Inputs> {
        let master = master.filter(|m| !m.is_empty());
        if let Some(m) = &master {
            check_netdev_name("\"master\"", m)?;
        }
        let device_id = match (device_id, runtime_device_id) {
            (Some(a), Some(b)) if a != b => {
                return Err(Error::InvalidConfig(format!(
                    "\"deviceID\" {a:?} and \"runtimeConfig.deviceID\" {b:?} differ: expected the \
                     runtime to inject one device; check the device plugin and Multus"
                )))
            }
            (Some(a), _) => Some(a),
            (None, b) => b,
        };
        let device_id = device_id.map(|d| pci_address(&d)).transpose()?;
        let (args_master, args_rdma_device) = cni_args(args)?;
        if let Some(m) = &args_master {
            allowed.check(&format!("\"args.cni.master\" {m}"), m)?;
        } else if args_rdma_device.is_some() && allowed.is_empty() {
            // Which netdev the device's port is, resolve() finds out; that none is allowed
            // is clear now.
            let d = args_rdma_device.as_deref().unwrap_or_default();
            allowed.check(&format!("\"args.cni.rdmaDevice\" {d}"), d)?;
        }
        Ok(Inputs {
            master,
            rdma_device,
            device_id,
            args_master,
            args_rdma_device,
            allowed,
            rails: None,
        })
    }

    /// Adds the NAD's `rails`, which must be the only input naming a rail: the rails it
    /// matches are all the attachment's, so a `master`, an RDMA device, a `deviceID` or a pod's
    /// cni-args that chose one more would contradict it.
    pub fn with_rails(self, rails: Option<Rails>) -> Result<Inputs> {
        let Some(rails) = rails else {
            return Ok(self);
        };
        let others: Vec<&str> = [
            (self.master.is_some(), "\"master\""),
            (self.rdma_device.is_some(), "\"rdma.device\""),
            (self.device_id.is_some(), "\"deviceID\""),
            (self.args_master.is_some(), "cni-args \"master\""),
            (self.args_rdma_device.is_some(), "cni-args \"rdmaDevice\""),
        ]
        .into_iter()
        .filter_map(|(given, what)| given.then_some(what))
        .collect();
        if !others.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "\"rails\" {} and {} both name rails: expected only \"rails\", which makes \
                 one child on every matching rail. Drop {} (a deviceID comes from a \
                 resourceName annotation on the NAD, cni-args from the pod's network selection \
                 element), or drop \"rails\" to attach one rail",
                rails.describe(),
                others.join(", "),
                others.join(", ")
            )));
        }
        Ok(Inputs {
            rails: Some(rails),
            ..self
        })
    }

    /// Whether any input names a rail. A NAD may name none when every pod passes `cni-args`.
    pub fn names_a_rail(&self) -> bool {
        self.rails.is_some()
            || self.master.is_some()
            || self.rdma_device.is_some()
            || self.device_id.is_some()
            || self.args_master.is_some()
            || self.args_rdma_device.is_some()
    }
}

/// Checks a PCI address (`dddd:bb:dd.f`); explains the counters of the RDMA shared device plugin.
pub fn pci_address(raw: &str) -> Result<String> {
    let lower = raw.to_ascii_lowercase();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let ok = match lower.split_once('.') {
        Some((head, func)) => {
            let parts: Vec<&str> = head.split(':').collect();
            parts.len() == 3
                && hex(parts[0], 4)
                && hex(parts[1], 2)
                && hex(parts[2], 2)
                && func.len() == 1
                && matches!(func.as_bytes()[0], b'0'..=b'7')
        }
        None => false,
    };
    if ok {
        return Ok(lower);
    }
    if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::InvalidConfig(format!(
            "\"deviceID\" {raw:?} is a counter, not a PCI address: the RDMA shared device plugin \
             (rdma/…, e.g. rdma/rdma_shared_device_a) numbers its shared devices \"0\", \"1\", … \
             so the NAD's resourceName cannot tell the rail. Offer the rail PFs by PCI address \
             instead (e.g. nvidia.com/hostdev from the host-device or SR-IOV device plugin), or \
             drop the resourceName annotation and name the rail with \"master\" or cni-args"
        )));
    }
    Err(Error::InvalidConfig(format!(
        "\"deviceID\" {raw:?} is not a PCI address: expected dddd:bb:dd.f, e.g. 0000:0c:00.0 (what \
         Multus injects from a device plugin that hands out PCI functions)"
    )))
}

fn check_netdev_name(what: &str, name: &str) -> Result<()> {
    cni::validate_ifname(name)
        .map_err(|_| Error::InvalidConfig(format!("{what} {name:?} is not a valid interface name")))
}

/// `args.cni.master` and `args.cni.rdmaDevice`. Other keys under `args.cni` belong to other
/// plugins of a chain and are left alone.
fn cni_args(args: Option<&Value>) -> Result<(Option<String>, Option<String>)> {
    let Some(cni) = args.and_then(|a| a.get("cni")) else {
        return Ok((None, None));
    };
    if cni.is_null() {
        return Ok((None, None));
    }
    if !cni.is_object() {
        return Err(Error::InvalidConfig(format!(
            "\"args.cni\" is {cni}: expected an object (Multus cni-args), e.g. {{\"master\": \"rdma3\"}}"
        )));
    }
    let field = |key: &str| -> Result<Option<String>> {
        match cni.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Error::InvalidConfig(format!(
                "\"args.cni.{key}\" is {other}: expected a string"
            ))),
        }
    };
    let master = field("master")?;
    if let Some(m) = &master {
        check_netdev_name("\"args.cni.master\"", m)?;
    }
    let rdma = field("rdmaDevice")?;
    if let Some(d) = &rdma {
        if !valid_rdma_device_name(d) {
            return Err(Error::InvalidConfig(format!(
                "\"args.cni.rdmaDevice\" {d:?} is not an RDMA device name"
            )));
        }
    }
    Ok((master, rdma))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inputs(conf: Value) -> Result<Inputs> {
        let s = |k: &str| conf.get(k).and_then(Value::as_str).map(String::from);
        Inputs::new(
            s("master"),
            s("rdmaDevice"),
            s("deviceID"),
            conf.pointer("/runtimeConfig/deviceID")
                .and_then(Value::as_str)
                .map(String::from),
            conf.get("args"),
            AllowedRails::parse(conf.get("allowedRails"))?,
        )
    }

    #[test]
    fn device_names() {
        for ok in ["mlx5_0", "rxe0", "rocep8s0f0", "irdma-x"] {
            assert!(valid_rdma_device_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", ".hidden", "../etc", "a/b", "a\0b"] {
            assert!(!valid_rdma_device_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn allowed_rails_are_names_or_globs() {
        let allowed = AllowedRails::parse(Some(&json!(["rdma*", "ens?f0np0", "eth1"]))).unwrap();
        for yes in ["rdma0", "rdma15", "rdma", "ens1f0np0", "eth1"] {
            assert!(allowed.allows(yes), "{yes}");
        }
        for no in ["eth0", "eth10", "ens10f0np0", "xrdma0", "ens1f0np1", ""] {
            assert!(!allowed.allows(no), "{no}");
        }
        assert!(AllowedRails::parse(None).unwrap().is_empty());
        for bad in [
            json!([]),
            json!("rdma*"),
            json!([3]),
            json!([""]),
            json!(["a/b"]),
            json!(["a b"]),
            json!(["rdma[0-3]"]),
            json!(["sixteen-chars-xx"]),
        ] {
            let err = AllowedRails::parse(Some(&bad)).unwrap_err();
            assert_eq!(err.code(), 7, "{bad}");
            assert!(err.to_string().contains("allowedRails"), "{err}");
        }
    }

    #[test]
    fn rails_are_the_only_input_naming_rails() {
        let rails = |v: Value| Rails::parse(Some(&v)).unwrap();
        let r = inputs(json!({}))
            .unwrap()
            .with_rails(rails(json!(["rdma*"])))
            .unwrap();
        assert!(r.names_a_rail());
        assert!(r.rails.as_ref().unwrap().matches("rdma15"));
        assert!(!r.rails.as_ref().unwrap().matches("eth0"));
        for (conf, named) in [
            (json!({"master": "rdma6"}), "\"master\""),
            (json!({"rdmaDevice": "mlx5_6"}), "\"rdma.device\""),
            (json!({"deviceID": "0000:0c:00.0"}), "\"deviceID\""),
            (
                json!({"runtimeConfig": {"deviceID": "0000:0c:00.0"}}),
                "\"deviceID\"",
            ),
            (
                json!({"allowedRails": ["rdma*"], "args": {"cni": {"master": "rdma6"}}}),
                "cni-args \"master\"",
            ),
            (
                json!({"allowedRails": ["rdma*"], "args": {"cni": {"rdmaDevice": "mlx5_6"}}}),
                "cni-args \"rdmaDevice\"",
            ),
        ] {
            let err = inputs(conf.clone())
                .unwrap()
                .with_rails(rails(json!(["rdma*"])))
                .unwrap_err();
            assert_eq!(err.code(), 7, "{conf}");
            let msg = err.to_string();
            assert!(
                msg.contains("both name rails") && msg.contains(named),
                "{msg}"
            );
        }
        // Same syntax as allowedRails, same refusals, named "rails".
        assert_eq!(Rails::parse(None).unwrap(), None);
        for bad in [
            json!([]),
            json!("rdma*"),
            json!(["a/b"]),
            json!(["rdma[0-3]"]),
        ] {
            let err = Rails::parse(Some(&bad)).unwrap_err();
            assert_eq!(err.code(), 7, "{bad}");
            assert!(err.to_string().contains("\"rails\""), "{err}");
        }
    }

    #[test]
    fn glob_matching() {
        for (p, n, want) in [
            ("*", "", true),
            ("*", "abc", true),
            ("a*c", "abbbc", true),
            ("a*c", "abcd", false),
            ("*b*", "abc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("**", "x", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXcYb", false),
            ("", "", true),
            ("", "a", false),
        ] {
            assert_eq!(glob_match(p.as_bytes(), n.as_bytes()), want, "{p} {n}");
        }
    }

    #[test]
    fn counter_device_ids_are_explained() {
        for counter in ["0", "3", "15"] {
            let err = inputs(json!({"deviceID": counter})).unwrap_err();
            assert_eq!(err.code(), 7);
            let msg = err.to_string();
            assert!(msg.contains("is a counter, not a PCI address"), "{msg}");
            assert!(msg.contains("RDMA shared device plugin"), "{msg}");
        }
        for bad in [
            "mlx5_core.sf.2",
            "00:04.0",
            "0000:00:04.8",
            "0000:0g:00.0",
            "",
        ] {
            let err = inputs(json!({"deviceID": bad})).unwrap_err();
            assert_eq!(err.code(), 7, "{bad}");
            assert!(
                err.to_string().contains("not a PCI address"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn bad_cni_args_are_code_7() {
        for args in [
            json!({"cni": "rdma3"}),
            json!({"cni": {"master": 3}}),
            json!({"cni": {"master": "a/b"}}),
            json!({"cni": {"rdmaDevice": "../x"}}),
        ] {
            let err = inputs(json!({"args": args})).unwrap_err();
            assert_eq!(err.code(), 7, "{args}: {err}");
        }
    }
}
