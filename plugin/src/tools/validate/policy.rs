//! NicClusterPolicies and NicNodePolicies (NVIDIA Network Operator): the device-plugin
//! resources they offer, the per-node sections each defines, and the operator's own rules
//! (one release, a section in one kind of policy only, NicNodePolicies' names and nodes).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::load::name_of;
use super::{Index, Outcome};

/// What the other documents need to know of a NicNodePolicy.
pub(super) struct NodePolicyInfo {
    pub(super) name: String,
    pub(super) sections: BTreeSet<String>,
    pub(super) node_selector: Value,
}

/// The sections a NicNodePolicy may hold; each may be in the NicClusterPolicy or in
/// NicNodePolicies, never both (the Network Operator's admission webhook refuses that).
const NODE_SECTIONS: &[&str] = &["ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin"];

/// NicClusterPolicy components whose versions are not the release's tag.
const OWN_VERSION_SCHEME: &[&str] = &["ofedDriver", "docaTelemetryService"];

/// The Network Operator derives DaemonSet names and label values from a NicNodePolicy's name;
/// it refuses longer names.
const NODE_POLICY_NAME_MAX: usize = 30;

pub(super) fn sections_of(policy: &Value) -> BTreeSet<String> {
    NODE_SECTIONS
        .iter()
        .filter(|s| {
            policy
                .pointer(&format!("/spec/{s}"))
                .is_some_and(|v| !v.is_null())
        })
        .map(|s| s.to_string())
        .collect()
}

/// Resources a NicClusterPolicy's device plugins offer.
pub(super) fn offered_resources(policy: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let config = |path: &str, list: &str| -> Vec<Value> {
        policy
            .pointer(path)
            .and_then(Value::as_str)
            .and_then(|c| serde_json::from_str::<Value>(c).ok())
            .and_then(|c| c.get(list).and_then(Value::as_array).cloned())
            .unwrap_or_default()
    };
    // (configuration, its list, the resourcePrefix each plugin defaults to)
    for (path, list, default_prefix) in [
        (
            "/spec/sriovDevicePlugin/config",
            "resourceList",
            "intel.com",
        ),
        ("/spec/rdmaSharedDevicePlugin/config", "configList", "rdma"),
    ] {
        for r in config(path, list) {
            if let Some(name) = r.get("resourceName").and_then(Value::as_str) {
                let prefix = r
                    .get("resourcePrefix")
                    .and_then(Value::as_str)
                    .unwrap_or(default_prefix);
                out.push(format!("{prefix}/{name}"));
            }
        }
    }
    out
}

/// A NicClusterPolicy or NicNodePolicy (Network Operator 26.4 and later): its device-plugin
/// configurations are JSON, and its components come from one Network Operator release (each
/// release is tested with its own set only). A per-node section is in the NicClusterPolicy or
/// in NicNodePolicies, never both; NicNodePolicies' names are at most 30 characters and no two
/// select the same nodes (the operator's admission webhook refuses these).
pub(super) fn check_policy(kind: &str, policy: &Value, index: &Index) -> Outcome {
    let mut errors = Vec::new();
    let sections = sections_of(policy);
    let in_nodes = |s: &String| -> Vec<&str> {
        index
            .node_policies
            .iter()
            .filter(|p| p.sections.contains(s))
            .map(|p| p.name.as_str())
            .collect()
    };
    if kind == "NicClusterPolicy" {
        for s in &sections {
            let nodes = in_nodes(s);
            if !nodes.is_empty() {
                errors.push(format!(
                    "{s} is in this NicClusterPolicy and in NicNodePolicy {}: a section is in \
                     one or the other, and the Network Operator's admission webhook refuses \
                     both; keep it in the NicNodePolicies only",
                    nodes.join(", ")
                ));
            }
        }
    } else {
        let name = name_of(policy);
        if name.len() > NODE_POLICY_NAME_MAX {
            errors.push(format!(
                "the name {name:?} has {} characters: the Network Operator refuses NicNodePolicy \
                 names longer than {NODE_POLICY_NAME_MAX} (it derives DaemonSet names and label \
                 values from them)",
                name.len()
            ));
        }
        for s in sections
            .iter()
            .filter(|s| index.cluster_sections.contains(*s))
        {
            errors.push(format!(
                "{s} is in this NicNodePolicy and in the NicClusterPolicy: a section is in one or \
                 the other (the admission webhook refuses both); remove it from the NicClusterPolicy"
            ));
        }
        let selector = policy
            .pointer("/spec/nodeSelector")
            .cloned()
            .unwrap_or(Value::Null);
        let same: Vec<&str> = index
            .node_policies
            .iter()
            .filter(|p| p.name != name && p.node_selector == selector)
            .map(|p| p.name.as_str())
            .collect();
        if !same.is_empty() {
            errors.push(format!(
                "NicNodePolicy {} selects the same nodes (nodeSelector {selector}): two \
                 NicNodePolicies must not share a node; give each node group its own label",
                same.join(", ")
            ));
        }
    }
    if !errors.is_empty() {
        return Outcome::Error(errors.join("; "));
    }
    for path in [
        "/spec/sriovDevicePlugin/config",
        "/spec/rdmaSharedDevicePlugin/config",
    ] {
        if let Some(c) = policy.pointer(path) {
            let ok = c
                .as_str()
                .is_some_and(|c| serde_json::from_str::<Value>(c).is_ok());
            if !ok {
                return Outcome::Error(format!(
                    "{} is not a string holding JSON",
                    path.trim_start_matches('/').replace('/', ".")
                ));
            }
        }
    }
    let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let spec = policy.get("spec").and_then(Value::as_object);
    for (component, value) in spec.into_iter().flatten() {
        let mut visit = |path: String, v: &Value| {
            if let Some(version) = v.get("version").and_then(Value::as_str) {
                versions.entry(version.into()).or_default().push(path);
            }
        };
        visit(component.clone(), value);
        for (sub, v) in value.as_object().into_iter().flatten() {
            if v.is_object() {
                visit(format!("{component}.{sub}"), v);
            }
        }
    }
    // The DOCA driver and the DOCA telemetry service have version schemes of their own (a
    // release's hack/release.yaml: doca3.5.0-26.07-0.7.1.0-0, 1.25.5-doca3.4.0-host).
    versions.retain(|_, paths| {
        paths.retain(|p| !OWN_VERSION_SCHEME.contains(&p.as_str()));
        !paths.is_empty()
    });
    let offered = offered_resources(policy);
    let msg = if offered.is_empty() {
        "offers no device-plugin resource".to_string()
    } else {
        format!("offers {}", offered.join(", "))
    };
    if versions.len() > 1 {
        let list: Vec<String> = versions
            .iter()
            .map(|(v, paths)| format!("{} at {v}", paths.join(", ")))
            .collect();
        return Outcome::Warning(format!(
            "{msg}; but: components from different Network Operator releases ({}): a release \
             is tested with its own set only; take every version from one release",
            list.join("; ")
        ));
    }
    Outcome::Ok(msg)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn offered_resources_of_both_device_plugins_with_their_default_prefixes() {
        let sriov = r#"{"resourceList": [{"resourceName": "vf_a"},
            {"resourceName": "vf_b", "resourcePrefix": "nvidia.com"}]}"#;
        let shared = r#"{"configList": [{"resourceName": "shared_a"}]}"#;
        let policy = json!({"spec": {
            "sriovDevicePlugin": {"config": sriov},
            "rdmaSharedDevicePlugin": {"config": shared},
        }});
        assert_eq!(
            offered_resources(&policy),
            ["intel.com/vf_a", "nvidia.com/vf_b", "rdma/shared_a"]
        );
    }
}
