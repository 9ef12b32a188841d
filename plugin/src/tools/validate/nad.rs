//! NetworkAttachmentDefinitions and CNI configurations (lists too): each roce-ipvlan
//! configuration through the plugin's own parser ([`NetConf::parse`]), its keys, its place in a
//! list, a NAD's resourceName and its nv-ipam pools; and what a workload needs of a NAD
//! ([`NadInfo`]).

use std::fmt::Write as _;

use serde_json::Value;

use super::{with_warnings, Index, Outcome, IFNAME};
use crate::protocol::config::NetConf;

const RESOURCE_NAME: &str = "k8s.v1.cni.cncf.io/resourceName";

/// Top-level keys of a roce-ipvlan configuration: the plugin's own (config.rs `RawConf`, and
/// `allowedRails`, which limits the rails cni-args may pick), then the keys the CNI spec and the
/// runtime put into any plugin's configuration. Anything else is most likely a typo (`"mastr"`):
/// the plugin would ignore it silently.
const KNOWN_KEYS: &[&str] = &[
    "cniVersion",
    "name",
    "type",
    "master",
    "deviceID",
    "mode",
    "mtu",
    "ipam",
    "arpSysctls",
    "sysctl",
    "sourceRouting",
    "rdma",
    "ipv6",
    "logFile",
    "logLevel",
    "allowedRails",
    "rails",
    "runtimeConfig",
    "capabilities",
    "args",
    "prevResult",
    "dns",
    "cniVersions",
    "disableCheck",
    "disableGC",
];

/// What a workload needs to know of a roce-ipvlan NAD.
#[derive(Debug, Clone)]
pub(super) struct NadInfo {
    /// The NAD's resourceName: Multus passes one device of it per reference as "deviceID".
    pub(super) resource: Option<String>,
    /// A configuration list with other plugins: cni-args may be meant for them.
    pub(super) other_plugins: bool,
    /// The roce-ipvlan configuration (with cniVersion and name), to check cni-args with.
    pub(super) config: Value,
}

fn nad_config(nad: &Value) -> Result<Option<(String, Value)>, Outcome> {
    let Some(config) = nad.pointer("/spec/config") else {
        return Ok(None);
    };
    let Some(config) = config.as_str() else {
        return Err(Outcome::Error(format!(
            "spec.config is {config}: expected a string holding JSON (use `config: |`)"
        )));
    };
    match serde_json::from_str(config) {
        Ok(v) => Ok(Some((config.to_string(), v))),
        Err(e) => Err(Outcome::Error(format!(
            "spec.config is not valid JSON: {e}"
        ))),
    }
}

fn nad_resource(nad: &Value) -> &str {
    nad.pointer("/metadata/annotations")
        .and_then(|a| a.get(RESOURCE_NAME))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(super) fn check_nad(nad: &Value, index: &Index) -> Outcome {
    let (text, parsed) = match nad_config(nad) {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Outcome::Skipped(
                "no spec.config: Multus reads the configuration from a file on the node".into(),
            )
        }
        Err(outcome) => return outcome,
    };
    let resource = nad_resource(nad);
    let (outcome, mut warnings) = check_cni(&parsed, Some(&text), resource);
    let Outcome::Ok(mut msg) = outcome else {
        return outcome;
    };
    if let Err(e) = check_pools(&parsed, index, &mut msg) {
        return Outcome::Error(e);
    }
    if !resource.is_empty() {
        for conf in roce_configs(&parsed) {
            if conf.pointer("/capabilities/CNIDeviceInfoFile") != Some(&Value::Bool(true)) {
                warnings.push(format!(
                    "resourceName {resource} without \"capabilities\": {{\"CNIDeviceInfoFile\": \
                     true}}: Multus passes no device-info path, so the pod's network-status \
                     shows no PCI or RDMA device for this attachment; add the capability"
                ));
            }
        }
    }
    with_warnings(msg, warnings)
}

/// The nv-ipam pools a NAD's roce-ipvlan configurations name: each must be among the files'
/// IPPools (`"poolType": "ippool"`, nv-ipam's default) or CIDRPools (`"cidrpool"`) when the
/// files hold any pool, else nv-ipam fails every ADD (code 103). Without pools in the files the
/// message says they were not checked.
fn check_pools(conf: &Value, index: &Index, msg: &mut String) -> Result<(), String> {
    let mut unchecked = Vec::new();
    for c in roce_configs(conf) {
        let Some(ipam) = c
            .get("ipam")
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("nv-ipam"))
        else {
            continue;
        };
        let pool_type = ipam
            .get("poolType")
            .and_then(Value::as_str)
            .unwrap_or("ippool")
            .to_ascii_lowercase();
        let (pool_type, kind, other_kind) = match pool_type.as_str() {
            "ippool" => ("ippool", "IPPool", "CIDRPool"),
            "cidrpool" => ("cidrpool", "CIDRPool", "IPPool"),
            other => {
                return Err(format!(
                    "nv-ipam \"poolType\" {other:?}: expected \"ippool\" (the default) or \
                     \"cidrpool\""
                ))
            }
        };
        let names = ipam.get("poolName").and_then(Value::as_str).unwrap_or("");
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(pools) = &index.pools else {
                unchecked.push(name.to_string());
                continue;
            };
            if pools.contains(&(pool_type, name.to_string())) {
                continue;
            }
            let other = if pool_type == "ippool" {
                "cidrpool"
            } else {
                "ippool"
            };
            let hint = if pools.contains(&(other, name.to_string())) {
                format!(
                    "; the files hold a {other_kind} of that name: set \"poolType\": \"{other}\" \
                     in the NAD's ipam or make the pool an {kind}"
                )
            } else {
                let known: Vec<String> = pools.iter().map(|(t, n)| format!("{n} ({t})")).collect();
                format!("; the files hold: {}", known.join(", "))
            };
            return Err(format!(
                "nv-ipam pool {name:?} (poolType {pool_type}) is not among the files' {kind}s: \
                 nv-ipam would fail every ADD (code 103){hint}"
            ));
        }
    }
    if !unchecked.is_empty() {
        let _ = write!(
            msg,
            "; nv-ipam pool(s) {} not among the files (no IPPool or CIDRPool given), not checked",
            unchecked.join(", ")
        );
    }
    Ok(())
}

/// The plugin configurations of a configuration or configuration list, with the list's
/// `cniVersion` and `name` copied in; Err when "plugins" is not a list.
fn plugin_configs(conf: &Value) -> Result<Vec<Value>, String> {
    match conf.get("plugins") {
        Some(Value::Array(plugins)) => Ok(plugins
            .iter()
            .map(|p| {
                let mut p = p.clone();
                if let Some(obj) = p.as_object_mut() {
                    for key in ["cniVersion", "name"] {
                        if let Some(v) = conf.get(key) {
                            obj.insert(key.into(), v.clone());
                        }
                    }
                }
                p
            })
            .collect()),
        Some(other) => Err(format!("\"plugins\" is {other}: expected a list")),
        None => Ok(vec![conf.clone()]),
    }
}

fn is_roce(conf: &Value) -> bool {
    conf.get("type").and_then(Value::as_str) == Some("roce-ipvlan")
}

fn roce_configs(conf: &Value) -> Vec<Value> {
    plugin_configs(conf)
        .unwrap_or_default()
        .into_iter()
        .filter(is_roce)
        .collect()
}

pub(super) fn nad_info(nad: &Value) -> Option<NadInfo> {
    let (_, parsed) = nad_config(nad).ok()??;
    let configs = plugin_configs(&parsed).ok()?;
    let config = configs.iter().find(|c| is_roce(c))?.clone();
    let resource = Some(nad_resource(nad).to_string()).filter(|r| !r.is_empty());
    Some(NadInfo {
        resource,
        other_plugins: configs.len() > 1,
        config,
    })
}

/// A CNI configuration or configuration list, with its JSON text when there is one; `resource`
/// is the NAD's resourceName, if any. Returns the outcome and, when it is Ok, the warnings.
pub(super) fn check_cni(conf: &Value, raw: Option<&str>, resource: &str) -> (Outcome, Vec<String>) {
    let mut checked = 0;
    let mut notes = String::new();
    let mut warnings = Vec::new();
    let configs = match plugin_configs(conf) {
        Ok(c) => c,
        Err(e) => return (Outcome::Error(e), warnings),
    };
    let count = configs.len();
    for (i, c) in configs.iter().enumerate() {
        if !is_roce(c) {
            continue;
        }
        let which = if count > 1 {
            format!(" (plugin {})", i + 1)
        } else {
            String::new()
        };
        if i > 0 {
            // ADD refuses a prevResult with interfaces or addresses (add.rs): roce-ipvlan
            // creates the attachment's interface itself.
            let msg = format!(
                "roce-ipvlan is plugin {} of the configuration list, after {}: ADD refuses the \
                 prevResult the plugins before it leave (code 7); put roce-ipvlan first and the \
                 meta plugins (tuning, sbr, ...) after it",
                i + 1,
                configs[..i]
                    .iter()
                    .map(|p| p.get("type").and_then(Value::as_str).unwrap_or("?"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return (Outcome::Error(msg), warnings);
        }
        let text = match raw {
            Some(raw) if count == 1 && conf.get("plugins").is_none() => raw.to_string(),
            _ => c.to_string(),
        };
        let parsed = match NetConf::parse(text.as_bytes(), IFNAME) {
            Ok(parsed) => parsed,
            Err(e) => {
                let msg = format!(
                    "roce-ipvlan configuration{which} refused (code {}): {e}",
                    e.code()
                );
                return (Outcome::Error(msg), warnings);
            }
        };
        checked += 1;
        // SLAAC addresses are /64 (RFC 4862 with a 64-bit interface identifier): a longer
        // prefix holds only the addresses whose identifier happens to fall inside it.
        if let Some(prefix) = parsed.slaac.as_ref().and_then(|s| s.prefix) {
            if prefix.prefix() > 64 {
                let msg = format!(
                    "roce-ipvlan configuration{which} refused: \"ipv6.prefix\" {prefix} is longer \
                     than /64, but SLAAC addresses are /64 (64-bit interface identifiers), so \
                     hardly any SLAAC address falls inside it and ADD would time out; use the \
                     rail's /64 or a shorter prefix covering every rail"
                );
                return (Outcome::Error(msg), warnings);
            }
        }
        if let Some(obj) = c.as_object() {
            for key in obj.keys().filter(|k| !KNOWN_KEYS.contains(&k.as_str())) {
                warnings.push(format!(
                    "unknown key {key:?}{which}: roce-ipvlan ignores it (a typo? known keys are \
                     in docs/configuration.md)"
                ));
            }
        }
        if let Some(rails) = &parsed.rail.rails {
            if !resource.is_empty() {
                // Multus injects a deviceID per reference, which "rails" excludes (rail.rs).
                let msg = format!(
                    "roce-ipvlan configuration{which} refused: \"rails\" {} makes one child \
                     per matching rail, but the NAD's {RESOURCE_NAME} {resource} makes Multus \
                     inject a deviceID, another way of naming the rail, and every ADD would \
                     fail (code 7); drop the annotation (request the RDMA resource in the pod \
                     instead) or drop \"rails\"",
                    rails.describe()
                );
                return (Outcome::Error(msg), warnings);
            }
            let _ = write!(
                notes,
                "; one child per rail matching \"rails\" {}",
                rails.describe()
            );
        }
        if !parsed.rail.names_a_rail() {
            if !resource.is_empty() {
                let _ = write!(notes, "; the rail comes from the deviceID of {resource}");
            } else if parsed.rail.allowed.is_empty() {
                // Every ADD would be refused: no rail, and no pod may name one.
                // A misspelt "master" lands here: name the unknown keys in the error itself.
                let mut msg = format!(
                    "roce-ipvlan configuration{which} names no rail: expected \"master\", \
                     \"rdma.device\", a {RESOURCE_NAME} annotation (deviceID), or \
                     \"allowedRails\" listing the rails pods may choose with cni-args"
                );
                for w in &warnings {
                    let _ = write!(msg, "; {w}");
                }
                return (Outcome::Error(msg), warnings);
            } else {
                let _ = write!(
                    notes,
                    "; the rail comes from each pod's cni-args, among allowedRails"
                );
            }
        }
    }
    if checked == 0 {
        return (
            Outcome::Skipped("no roce-ipvlan configuration".into()),
            warnings,
        );
    }
    let msg = format!("{checked} roce-ipvlan configuration(s) valid{notes}");
    (Outcome::Ok(msg), warnings)
}

#[cfg(test)]
mod tests {
    //! Each configuration through the whole command (`check_text`), one document at a time.

    use super::*;
    use crate::tools::validate::tests::{
        device_nad, is_error, is_warning, last, nad, outcomes, NAD, RAIL_NAD,
    };

    #[test]
    fn conflists_get_name_and_version_from_the_list() {
        let list = r#"{"cniVersion": "1.0.0", "name": "rails", "plugins": [
            {"type": "roce-ipvlan", "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"},
             "master": "rdma0"},
            {"type": "tuning"}]}"#;
        assert!(matches!(&outcomes(list)[0], Outcome::Ok(_)));
        let other = r#"{"cniVersion": "1.0.0", "name": "x", "type": "ipvlan", "master": "eth0"}"#;
        assert!(matches!(&outcomes(other)[0], Outcome::Skipped(_)));
    }

    #[test]
    fn rails_nads_are_checked() {
        let rails = NAD.replace("\"master\": \"rdma3\",", "\"rails\": [\"rdma*\"],");
        assert!(
            matches!(&outcomes(&rails)[0], Outcome::Ok(m) if m.contains("one child per rail matching \"rails\" [\"rdma*\"]")),
            "{:?}",
            outcomes(&rails)
        );
        // With another way of naming a rail: refused, as ADD would.
        let both = NAD.replace(
            "\"master\": \"rdma3\",",
            "\"master\": \"rdma3\", \"rails\": [\"rdma*\"],",
        );
        assert!(
            matches!(&outcomes(&both)[0], Outcome::Error(m) if m.contains("both name rails")),
            "{:?}",
            outcomes(&both)
        );
        let bad = NAD.replace("\"master\": \"rdma3\",", "\"rails\": [],");
        assert!(
            matches!(&outcomes(&bad)[0], Outcome::Error(m) if m.contains("\"rails\" is empty")),
            "{:?}",
            outcomes(&bad)
        );
        // A resourceName makes Multus inject a deviceID, which "rails" excludes.
        let annotated = rails.replace(
            "  name: rail3\n",
            "  name: rail3\n  annotations:\n    k8s.v1.cni.cncf.io/resourceName: rdma/a\n",
        );
        assert!(
            matches!(&outcomes(&annotated)[0], Outcome::Error(m) if m.contains("inject a deviceID")),
            "{:?}",
            outcomes(&annotated)
        );
    }

    #[test]
    fn shared_nads_say_where_the_rail_comes_from() {
        // No rail and nothing a pod may choose: every ADD would be refused.
        let shared = NAD.replace("\"master\": \"rdma3\",", "");
        assert!(
            matches!(&outcomes(&shared)[0], Outcome::Error(m) if m.contains("allowedRails")),
            "{:?}",
            outcomes(&shared)
        );
        let by_args = NAD.replace("\"master\": \"rdma3\",", "\"allowedRails\": [\"rdma*\"],");
        assert!(
            matches!(&outcomes(&by_args)[0], Outcome::Ok(m) if m.contains("cni-args")),
            "{:?}",
            outcomes(&by_args)
        );
        let bad = NAD.replace("\"master\": \"rdma3\",", "\"allowedRails\": [\"a/b\"],");
        assert!(
            matches!(&outcomes(&bad)[0], Outcome::Error(m) if m.contains("allowedRails")),
            "{:?}",
            outcomes(&bad)
        );
        let by_device = shared.replace(
            "  name: rail3\n",
            "  name: rail3\n  annotations:\n    k8s.v1.cni.cncf.io/resourceName: nvidia.com/hostdev\n",
        );
        assert!(
            matches!(&outcomes(&by_device)[0], Outcome::Warning(m) if m.contains("deviceID of nvidia.com/hostdev")),
            "{:?}",
            outcomes(&by_device)
        );
    }

    #[test]
    fn unknown_top_level_keys_warn_and_runtime_keys_are_known() {
        let typo = NAD.replace("\"master\"", "\"mastr\"");
        // No rail left, so the typo is refused, and the error names the unknown key.
        let o = &outcomes(&typo)[0];
        assert!(is_error(o, "names no rail"), "{o:?}");
        assert!(is_error(o, "unknown key \"mastr\""), "{o:?}");
        let runtime = NAD.replace(
            "\"master\": \"rdma3\",",
            "\"master\": \"rdma3\", \"runtimeConfig\": {}, \"capabilities\": {\"CNIDeviceInfoFile\": true}, \
             \"args\": {\"cni\": {}}, \"prevResult\": null, \"dns\": {}, \"allowedRails\": [\"rdma3\"],",
        );
        assert!(
            matches!(&outcomes(&runtime)[0], Outcome::Ok(_)),
            "{:?}",
            outcomes(&runtime)
        );
        // A bare CNI configuration warns too.
        let bare = r#"{"cniVersion": "1.0.0", "name": "x", "type": "roce-ipvlan", "mastr": "rdma0", "ipam": {"type": "host-local"}}"#;
        assert!(
            is_error(&outcomes(bare)[0], "unknown key \"mastr\""),
            "{:?}",
            outcomes(bare)
        );
    }

    #[test]
    fn a_slaac_prefix_longer_than_64_is_refused() {
        let v6 = |prefix: &str| {
            format!(
                r#"{{"cniVersion": "1.0.0", "name": "x", "type": "roce-ipvlan", "master": "rdma0", "ipv6": {{"slaac": true, "prefix": "{prefix}"}}}}"#
            )
        };
        assert!(is_error(
            &outcomes(&v6("2001:db8:1:2::/72"))[0],
            "longer than /64"
        ));
        assert!(matches!(
            outcomes(&v6("2001:db8:1:2::/64"))[0],
            Outcome::Ok(_)
        ));
        assert!(matches!(outcomes(&v6("2001:db8::/48"))[0], Outcome::Ok(_)));
    }

    #[test]
    fn a_device_id_nad_without_the_device_info_capability_warns() {
        assert!(is_warning(
            &last(&[&device_nad(false)]),
            "CNIDeviceInfoFile"
        ));
        assert!(matches!(last(&[&device_nad(true)]), Outcome::Ok(_)));
        // A NAD that names its rail has no deviceID: nothing to warn about.
        assert!(matches!(
            last(&[&nad("rail0", "", RAIL_NAD)]),
            Outcome::Ok(_)
        ));
    }

    #[test]
    fn roce_ipvlan_must_come_first_in_a_conflist() {
        let list = r#"{"cniVersion": "1.0.0", "name": "rails", "plugins": [{"type": "tuning"},
            {"type": "roce-ipvlan", "master": "rdma0", "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"}}]}"#;
        let o = &outcomes(list)[0];
        assert!(
            is_error(
                o,
                "roce-ipvlan is plugin 2 of the configuration list, after tuning"
            ),
            "{o:?}"
        );
        let nad_list = nad("rails", "", &list.replace('\n', " "));
        assert!(is_error(&last(&[&nad_list]), "put roce-ipvlan first"));
    }
}
