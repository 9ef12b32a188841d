//! Workloads (Pods, Jobs, MPIJobs, PyTorchJobs, JobSets, ...): each pod template's
//! networks annotation, its roce-ipvlan NADs looked up as Multus does, its RDMA resources
//! against the attachments and the Nic*Policies, and each reference's cni-args through the
//! plugin's own parser.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::load::namespace_of;
use super::nad::NadInfo;
use super::{with_warnings, Index, Outcome, IFNAME};
use crate::protocol::config::NetConf;

const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

/// The cni-args keys roce-ipvlan reads (`args.cni`, rail.rs).
const CNI_ARGS_KEYS: &[&str] = &["master", "rdmaDevice"];

pub(super) fn is_workload(kind: &str) -> bool {
    matches!(
        kind,
        "Pod"
            | "Job"
            | "CronJob"
            | "Deployment"
            | "StatefulSet"
            | "DaemonSet"
            | "ReplicaSet"
            | "MPIJob"
            | "PyTorchJob"
            | "JobSet"
    )
}

/// The pod templates of a workload, with the replica role of MPIJobs and PyTorchJobs.
pub(super) fn pod_templates<'a>(kind: &str, doc: &'a Value) -> Vec<(Option<String>, &'a Value)> {
    let replicas = |key: &str| -> Vec<(Option<String>, &'a Value)> {
        let Some(specs) = doc
            .pointer(&format!("/spec/{key}"))
            .and_then(Value::as_object)
        else {
            return Vec::new();
        };
        specs
            .iter()
            .filter_map(|(role, spec)| Some((Some(role.clone()), spec.get("template")?)))
            .collect()
    };
    let at = |path: &str| {
        doc.pointer(path)
            .map(|t| vec![(None, t)])
            .unwrap_or_default()
    };
    match kind {
        "Pod" => vec![(None, doc)],
        "Job" | "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => at("/spec/template"),
        "CronJob" => at("/spec/jobTemplate/spec/template"),
        "MPIJob" => replicas("mpiReplicaSpecs"),
        "PyTorchJob" => replicas("pytorchReplicaSpecs"),
        // JobSet (jobset.x-k8s.io): each replicated job's Job template, named by the job.
        "JobSet" => doc
            .pointer("/spec/replicatedJobs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|job| {
                let name = job.get("name").and_then(Value::as_str).unwrap_or("?");
                Some((
                    Some(name.to_string()),
                    job.pointer("/template/spec/template")?,
                ))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// One element of a pod's `k8s.v1.cni.cncf.io/networks`.
#[derive(Debug, PartialEq)]
struct NetRef {
    name: String,
    namespace: Option<String>,
    cni_args: Option<Value>,
}

/// The networks annotation: a JSON list of network selection elements, or the short form
/// `[namespace/]name[@interface], ...`.
fn parse_networks(text: &str) -> Result<Vec<NetRef>, String> {
    let text = text.trim();
    if text.starts_with('[') {
        let list: Vec<Value> = serde_json::from_str(text)
            .map_err(|e| format!("{NETWORKS} is not a valid JSON list: {e}"))?;
        return list
            .into_iter()
            .map(|e| {
                let name = e.get("name").and_then(Value::as_str).ok_or_else(|| {
                    format!("{NETWORKS}: element {e} has no \"name\" (the NAD's name)")
                })?;
                Ok(NetRef {
                    name: name.into(),
                    namespace: e.get("namespace").and_then(Value::as_str).map(Into::into),
                    cni_args: e.get("cni-args").cloned(),
                })
            })
            .collect();
    }
    text.split(',')
        .map(str::trim)
        .map(|item| {
            let item = item.split('@').next().unwrap_or_default();
            let (namespace, name) = match item.split_once('/') {
                Some((ns, name)) => (Some(ns.to_string()), name),
                None => (None, item),
            };
            if name.is_empty() {
                return Err(format!(
                    "{NETWORKS} {text:?} has an empty element: expected \
                     [namespace/]name[@interface], comma-separated"
                ));
            }
            Ok(NetRef {
                name: name.into(),
                namespace,
                cni_args: None,
            })
        })
        .collect()
}

/// Device-plugin resources of a pod template: per name, the most any container asks for in
/// its limits (else requests), summed over the containers (kubelet allocates per container).
fn pod_resources(template: &Value) -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    let containers = template
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for c in containers {
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let mut names: BTreeSet<&String> = BTreeSet::new();
        names.extend(limits.into_iter().flat_map(|m| m.keys()));
        names.extend(requests.into_iter().flat_map(|m| m.keys()));
        for name in names {
            let value = limits
                .and_then(|m| m.get(name))
                .or_else(|| requests.and_then(|m| m.get(name)));
            let count = match value {
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(s)) => s.parse().ok(),
                _ => None,
            };
            if let Some(n) = count {
                *total.entry(name.clone()).or_insert(0) += n;
            }
        }
    }
    total
}

/// Whether a resource gives the pod RDMA devices: the RDMA shared device plugin's `rdma/`
/// prefix, a deviceID NAD's resourceName, or (with a NicClusterPolicy) one it offers.
fn is_rdma_resource(name: &str, index: &Index) -> bool {
    name.starts_with("rdma/")
        || index
            .nads
            .values()
            .any(|n| n.resource.as_deref() == Some(name))
        || index.offered.as_ref().is_some_and(|o| o.contains(name))
}

pub(super) fn check_workload(
    kind: &str,
    role: Option<String>,
    doc: &Value,
    template: &Value,
    index: &Index,
) -> Outcome {
    let mut warnings = Vec::new();
    if kind == "MPIJob" && role.as_deref() == Some("Worker") {
        // MPI Operator v2beta1 starts every rank from the launcher over ssh.
        let first = template.pointer("/spec/containers/0");
        let runs: Vec<&str> = ["command", "args"]
            .iter()
            .filter_map(|k| first.and_then(|c| c.get(k)).and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !runs.iter().any(|a| a.contains("sshd")) {
            warnings.push(
                "the Worker's container runs no sshd: MPI Operator v2beta1 starts the ranks \
                 from the launcher over ssh, so nothing would accept them; run it (command: \
                 [\"/usr/sbin/sshd\", \"-De\"]) unless the image's entrypoint does"
                    .to_string(),
            );
        }
    }
    let networks = template
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(NETWORKS))
        .and_then(Value::as_str);
    let Some(networks) = networks else {
        return with_warnings_or_skip(warnings, "no secondary networks");
    };
    let refs = match parse_networks(networks) {
        Ok(refs) => refs,
        Err(e) => return Outcome::Error(e),
    };
    let namespace = namespace_of(doc);
    let mut unknown = BTreeSet::new();
    let mut roce = Vec::new();
    let mut errors = Vec::new();
    for r in &refs {
        let ns = r.namespace.clone().unwrap_or_else(|| namespace.clone());
        match index.nads.get(&(ns.clone(), r.name.clone())) {
            Some(nad) => roce.push((r, nad)),
            None => {
                // Multus looks a NAD up in the namespace the reference names, else the pod's:
                // the same name elsewhere among the files is not found.
                let elsewhere: Vec<&str> = index
                    .nads
                    .keys()
                    .filter(|(_, name)| *name == r.name)
                    .map(|(n, _)| n.as_str())
                    .collect();
                if elsewhere.is_empty() {
                    unknown.insert(r.name.as_str());
                    continue;
                }
                let whose = if r.namespace.is_some() {
                    "the reference names"
                } else {
                    "the pod's namespace"
                };
                errors.push(format!(
                    "network {} is looked up in namespace {ns} ({whose}), but the files hold it \
                     only in {}: Multus fails ADD with \"cannot find a network-attachment-definition\"; \
                     write {}/{} in the annotation or create the NAD in {ns}",
                    r.name,
                    elsewhere.join(", "),
                    elsewhere[0],
                    r.name
                ));
            }
        }
    }
    if roce.is_empty() {
        if !errors.is_empty() {
            return Outcome::Error(errors.join("; "));
        }
        return with_warnings_or_skip(warnings, "no roce-ipvlan network among the NADs given");
    }
    let resources = pod_resources(template);

    // deviceID NADs: Multus takes one device of the NAD's resource per reference, in order.
    let mut per_resource: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, nad) in &roce {
        if let Some(res) = &nad.resource {
            *per_resource.entry(res).or_insert(0) += 1;
        }
    }
    for (res, wanted) in &per_resource {
        let have = resources.get(*res).copied().unwrap_or(0);
        if have < *wanted {
            errors.push(format!(
                "{wanted} attachment(s) take a device of {res} (deviceID NADs) but the pod \
                 requests {have}: Multus has no device for attachment {} and ADD fails; request \
                 {res}: {wanted}",
                have + 1
            ));
        } else if have > *wanted {
            warnings.push(format!(
                "the pod requests {have} {res} but only {wanted} attachment(s) use one: {} \
                 device(s) get no child on their rail",
                have - wanted
            ));
        }
    }
    // Other NADs name the rail themselves: the pod still needs the rails' RDMA devices.
    if roce.iter().any(|(_, nad)| nad.resource.is_none())
        && !resources
            .iter()
            .any(|(name, n)| *n > 0 && is_rdma_resource(name, index))
    {
        errors.push(
            "the pod requests no RDMA resource (e.g. rdma/rdma_shared_device_a of the RDMA \
             shared device plugin): it gets no /dev/infiniband device, so RDMA fails and NCCL \
             falls back to sockets; request one"
                .to_string(),
        );
    }
    if let Some(offered) = &index.offered {
        for name in resources.keys().filter(|n| is_rdma_resource(n, index)) {
            if !offered.contains(name) {
                errors.push(format!(
                    "the pod requests {name}, which no NicClusterPolicy or NicNodePolicy among \
                     the files offers (they offer: {}): the pod would stay Pending",
                    offered.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    for (r, nad) in &roce {
        check_reference(r, nad, &mut errors, &mut warnings);
    }

    if !errors.is_empty() {
        return Outcome::Error(errors.join("; "));
    }
    let mut msg = format!(
        "{} roce-ipvlan attachment(s) checked against the pod's resources",
        roce.len()
    );
    if !unknown.is_empty() {
        let names: Vec<&str> = unknown.into_iter().collect();
        let _ = write!(
            msg,
            "; network(s) {} not among the NADs given, not checked",
            names.join(", ")
        );
    }
    with_warnings(msg, warnings)
}

fn with_warnings_or_skip(warnings: Vec<String>, why: &str) -> Outcome {
    if warnings.is_empty() {
        Outcome::Skipped(why.into())
    } else {
        Outcome::Warning(format!("{why}; but: {}", warnings.join("; ")))
    }
}

/// One reference of a roce-ipvlan NAD: its cni-args go through the plugin's own parser with
/// the NAD's configuration, as Multus would pass them (`args.cni`).
fn check_reference(
    r: &NetRef,
    nad: &NadInfo,
    errors: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    let name = &r.name;
    let args = r.cni_args.as_ref();
    if let Some(obj) = args.and_then(Value::as_object) {
        if !nad.other_plugins {
            for key in obj.keys().filter(|k| !CNI_ARGS_KEYS.contains(&k.as_str())) {
                warnings.push(format!(
                    "cni-args key {key:?} of network {name}: roce-ipvlan reads only {}",
                    CNI_ARGS_KEYS.join(", ")
                ));
            }
        }
    }
    let mut config = nad.config.clone();
    if let (Some(args), Some(obj)) = (args, config.as_object_mut()) {
        obj.insert("args".into(), json!({ "cni": args }));
    }
    match NetConf::parse(config.to_string().as_bytes(), IFNAME) {
        Err(e) => errors.push(format!(
            "network {name} with this reference's cni-args is refused (code {}): {e}",
            e.code()
        )),
        Ok(parsed) if !parsed.rail.names_a_rail() && nad.resource.is_none() => {
            errors.push(format!(
                "network {name} names no rail and has no resourceName, and this reference \
                 passes no cni-args \"master\" or \"rdmaDevice\": ADD fails (code 7); pass \
                 cni-args or name the rail in the NAD"
            ))
        }
        Ok(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_annotations_parse_in_both_forms() {
        let refs = parse_networks(" a, ns/b@net2 ,c@x").unwrap();
        let names: Vec<_> = refs
            .iter()
            .map(|r| (r.namespace.as_deref(), r.name.as_str()))
            .collect();
        assert_eq!(names, vec![(None, "a"), (Some("ns"), "b"), (None, "c")]);
        let refs =
            parse_networks(r#"[{"name": "a", "namespace": "n", "cni-args": {"master": "rdma0"}}]"#)
                .unwrap();
        assert_eq!(refs[0].namespace.as_deref(), Some("n"));
        assert_eq!(refs[0].cni_args, Some(json!({"master": "rdma0"})));
        assert!(parse_networks("a,,b").is_err());
        assert!(parse_networks("[{\"name\": 1}]").is_err());
    }
}
