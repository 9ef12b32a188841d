//! `roce-ipvlan validate [--strict] FILE...`: runs the plugin's own configuration checks
//! ([`NetConf::parse`]) on NetworkAttachmentDefinitions and CNI configurations, and checks the
//! workloads that use them, so that a NAD or a pod is refused in CI or by an operator, not by
//! kubelet on a GPU node.
//!
//! A file holds one or more YAML documents (JSON is YAML too): NetworkAttachmentDefinitions,
//! CNI configurations or configuration lists, workloads (Pod, Job, CronJob, Deployment,
//! StatefulSet, DaemonSet, ReplicaSet, MPIJob, PyTorchJob, JobSet), NicClusterPolicies and
//! NicNodePolicies, nv-ipam IPPools and CIDRPools, and `List`s of them. Other documents are
//! skipped. In a configuration list, `cniVersion` and `name` are
//! copied into each plugin's configuration, as libcni does. Rail lookups are left out: they
//! depend on the node (see rail.rs).
//!
//! All files of one run are one set: a pod is checked against the NADs and Nic*Policies of
//! every file given (the NADs it names, looked up as Multus does, in the reference's namespace or
//! the pod's; the number of roce-ipvlan attachments against its RDMA resources; its cni-args
//! through the plugin's own parser), and a NAD's nv-ipam pools against the IPPools and
//! CIDRPools given. What works but loses something (an unknown key, a
//! deviceID NAD without the device-info capability) is a warning; `--strict` fails on warnings.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::Read;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::protocol::config::NetConf;
use crate::tools::cli::{self, Arg, Long, Parsed, Short, ValueExt as _};

/// The interface name configurations are checked for (`IFNAME` in sysctl keys).
const IFNAME: &str = "net1";
const RESOURCE_NAME: &str = "k8s.v1.cni.cncf.io/resourceName";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

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

/// The cni-args keys roce-ipvlan reads (`args.cni`, rail.rs).
const CNI_ARGS_KEYS: &[&str] = &["master", "rdmaDevice"];

/// What one document amounted to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check passed; the text says what was checked.
    Ok(String),
    /// Valid, but something is lost or probably mistyped; `--strict` fails on it.
    Warning(String),
    /// Not something this command checks.
    Skipped(String),
    Error(String),
}

/// Runs the subcommand; returns the exit status (0: all OK, 1: an error, or a warning with
/// `--strict`, 2: usage).
pub fn main(args: &[String]) -> i32 {
    const USAGE: &str = "usage: roce-ipvlan validate [--strict] FILE...   ('-' reads stdin)\n\
             Checks every roce-ipvlan configuration in NetworkAttachmentDefinitions (YAML or \
             JSON, multi-document), CNI configurations and configuration lists, and the Pods, \
             Jobs, MPIJobs, PyTorchJobs, JobSets, ... that use them (against the NADs, \
             NicClusterPolicies, NicNodePolicies and nv-ipam pools of all FILEs). --strict: \
             warnings fail too.";
    let (strict, files) = match cli::args_or_exit("validate", USAGE, parse_args(args)) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let mut docs = Vec::new();
    for file in files {
        let text = if file == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map(|_| s)
        } else {
            std::fs::read_to_string(&file)
        };
        match text {
            Ok(text) => docs.extend(parse_text(&file, &text)),
            Err(e) => docs.push(Doc::broken(&file, "-", format!("cannot read: {e}"))),
        }
    }
    let mut failed = false;
    for (file, what, outcome) in check_docs(&docs) {
        match outcome {
            Outcome::Ok(msg) => println!("OK    {file}: {what}: {msg}"),
            Outcome::Skipped(msg) => println!("skip  {file}: {what}: {msg}"),
            Outcome::Warning(msg) => {
                failed |= strict;
                println!("WARN  {file}: {what}: {msg}");
            }
            Outcome::Error(msg) => {
                failed = true;
                println!("ERROR {file}: {what}: {msg}");
            }
        }
    }
    i32::from(failed)
}

/// `--strict` and the files (at least one; `-` is stdin, and after `--` every argument is a
/// file).
fn parse_args(args: &[String]) -> cli::Outcome<(bool, Vec<String>)> {
    cli::parse(args, |p| {
        let mut strict = false;
        let mut files = Vec::new();
        while let Some(arg) = p.next()? {
            match arg {
                Long("strict") => strict = true,
                Arg::Value(file) => files.push(file.string()?),
                Short('h') | Long("help") => return Ok(Parsed::Help),
                arg => return Err(cli::unexpected(arg)),
            }
        }
        if files.is_empty() {
            return Err(cli::Error::new("no FILE to check"));
        }
        Ok(Parsed::Run((strict, files)))
    })
}

/// One YAML/JSON document (a `List`'s items are documents of their own).
struct Doc {
    file: String,
    label: String,
    /// The document, or why it could not be read.
    value: Result<Value, String>,
    /// A JSON file's own text: a serde Value has already collapsed duplicate keys, which
    /// NetConf::parse refuses.
    raw: Option<String>,
}

impl Doc {
    fn broken(file: &str, label: &str, why: String) -> Doc {
        Doc {
            file: file.into(),
            label: label.into(),
            value: Err(why),
            raw: None,
        }
    }
}

fn parse_text(file: &str, text: &str) -> Vec<Doc> {
    let mut out = Vec::new();
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        push_doc(
            file,
            "document 1".into(),
            value,
            Some(text.into()),
            &mut out,
        );
        return out;
    }
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let label = format!("document {}", i + 1);
        match Value::deserialize(doc) {
            Ok(Value::Null) => {} // an empty document (a trailing `---`)
            Ok(value) => push_doc(file, label, value, None, &mut out),
            Err(e) => {
                out.push(Doc::broken(
                    file,
                    &label,
                    format!("not valid YAML/JSON: {e}"),
                ));
                // The parser cannot resynchronise after a syntax error.
                break;
            }
        }
    }
    out
}

fn push_doc(file: &str, label: String, value: Value, raw: Option<String>, out: &mut Vec<Doc>) {
    if value.get("kind").and_then(Value::as_str) == Some("List") {
        match value.get("items").and_then(Value::as_array) {
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    push_doc(
                        file,
                        format!("{label} item {}", i + 1),
                        item.clone(),
                        None,
                        out,
                    );
                }
            }
            None => out.push(Doc::broken(file, &label, "a List without items".into())),
        }
        return;
    }
    out.push(Doc {
        file: file.into(),
        label,
        value: Ok(value),
        raw,
    });
}

/// Checks every document of one YAML/JSON text on its own; returns (label, outcome) pairs.
#[cfg(test)]
fn check_text(text: &str) -> Vec<(String, Outcome)> {
    check_docs(&parse_text("-", text))
        .into_iter()
        .map(|(_, label, outcome)| (label, outcome))
        .collect()
}

/// What a workload needs to know of a roce-ipvlan NAD.
#[derive(Debug, Clone)]
struct NadInfo {
    /// The NAD's resourceName: Multus passes one device of it per reference as "deviceID".
    resource: Option<String>,
    /// A configuration list with other plugins: cni-args may be meant for them.
    other_plugins: bool,
    /// The roce-ipvlan configuration (with cniVersion and name), to check cni-args with.
    config: Value,
}

/// The NADs and device-plugin resources of all documents of a run.
#[derive(Default)]
struct Index {
    /// (namespace, name) of each roce-ipvlan NAD.
    nads: HashMap<(String, String), NadInfo>,
    /// Resources the NicClusterPolicies and NicNodePolicies offer; None when none was given.
    offered: Option<BTreeSet<String>>,
    /// nv-ipam pools, as (poolType, name) with poolType `ippool` or `cidrpool`; None when the
    /// files hold no IPPool or CIDRPool (the pools are then not checked).
    pools: Option<BTreeSet<(&'static str, String)>>,
    /// The per-node sections (ofedDriver, rdmaSharedDevicePlugin, sriovDevicePlugin) the
    /// NicClusterPolicies define, and per NicNodePolicy its sections and node selector.
    cluster_sections: BTreeSet<String>,
    node_policies: Vec<NodePolicyInfo>,
}

/// What the other documents need to know of a NicNodePolicy.
struct NodePolicyInfo {
    name: String,
    sections: BTreeSet<String>,
    node_selector: Value,
}

/// The sections a NicNodePolicy may hold; each may be in the NicClusterPolicy or in
/// NicNodePolicies, never both (the Network Operator's admission webhook refuses that).
const NODE_SECTIONS: &[&str] = &["ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin"];

/// The Network Operator derives DaemonSet names and label values from a NicNodePolicy's name;
/// it refuses longer names.
const NODE_POLICY_NAME_MAX: usize = 30;

fn sections_of(policy: &Value) -> BTreeSet<String> {
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

fn name_of(doc: &Value) -> &str {
    doc.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
}

fn namespace_of(doc: &Value) -> String {
    doc.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string()
}

fn check_docs(docs: &[Doc]) -> Vec<(String, String, Outcome)> {
    let mut index = Index::default();
    for doc in docs {
        let Ok(value) = &doc.value else { continue };
        match value.get("kind").and_then(Value::as_str) {
            Some("NetworkAttachmentDefinition") => {
                let name = value.pointer("/metadata/name").and_then(Value::as_str);
                if let (Some(name), Some(info)) = (name, nad_info(value)) {
                    index.nads.insert((namespace_of(value), name.into()), info);
                }
            }
            Some("NicClusterPolicy") => {
                index
                    .offered
                    .get_or_insert_with(BTreeSet::new)
                    .extend(offered_resources(value));
                index.cluster_sections.extend(sections_of(value));
            }
            Some("NicNodePolicy") => {
                index
                    .offered
                    .get_or_insert_with(BTreeSet::new)
                    .extend(offered_resources(value));
                index.node_policies.push(NodePolicyInfo {
                    name: name_of(value).into(),
                    sections: sections_of(value),
                    node_selector: value
                        .pointer("/spec/nodeSelector")
                        .cloned()
                        .unwrap_or(Value::Null),
                });
            }
            Some(kind @ ("IPPool" | "CIDRPool")) => {
                let pool_type = if kind == "IPPool" {
                    "ippool"
                } else {
                    "cidrpool"
                };
                index
                    .pools
                    .get_or_insert_with(BTreeSet::new)
                    .insert((pool_type, name_of(value).into()));
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for doc in docs {
        let mut push = |label: String, outcome| out.push((doc.file.clone(), label, outcome));
        match &doc.value {
            Err(why) => push(doc.label.clone(), Outcome::Error(why.clone())),
            Ok(value) => {
                for (label, outcome) in check_value(&doc.label, value, doc.raw.as_deref(), &index) {
                    push(label, outcome);
                }
            }
        }
    }
    out
}

fn check_value(
    label: &str,
    doc: &Value,
    raw: Option<&str>,
    index: &Index,
) -> Vec<(String, Outcome)> {
    let kind = doc.get("kind").and_then(Value::as_str);
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let labelled = |k: &str| format!("{label} {k} {name}");
    match kind {
        Some("NetworkAttachmentDefinition") => {
            vec![(
                labelled("NetworkAttachmentDefinition"),
                check_nad(doc, index),
            )]
        }
        Some(k @ ("NicClusterPolicy" | "NicNodePolicy")) => {
            vec![(labelled(k), check_policy(k, doc, index))]
        }
        Some(k) if is_workload(k) => {
            let templates = pod_templates(k, doc);
            if templates.is_empty() {
                return vec![(labelled(k), Outcome::Skipped("no pod template".into()))];
            }
            templates
                .into_iter()
                .map(|(role, template)| {
                    let what = match &role {
                        Some(role) => format!("{} {role}", labelled(k)),
                        None => labelled(k),
                    };
                    (what, check_workload(k, role, doc, template, index))
                })
                .collect()
        }
        Some(other) => vec![(
            labelled(other),
            Outcome::Skipped("not a NetworkAttachmentDefinition or a workload".into()),
        )],
        None if doc.get("cniVersion").is_some() => {
            let outcome = match check_cni(doc, raw, "") {
                (Outcome::Ok(msg), warnings) => with_warnings(msg, warnings),
                (other, _) => other,
            };
            vec![(label.into(), outcome)]
        }
        None => vec![(
            label.into(),
            Outcome::Error(
                "neither a Kubernetes object (no \"kind\") nor a CNI configuration (no \
                 \"cniVersion\")"
                    .into(),
            ),
        )],
    }
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

fn check_nad(nad: &Value, index: &Index) -> Outcome {
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

fn with_warnings(msg: String, warnings: Vec<String>) -> Outcome {
    if warnings.is_empty() {
        Outcome::Ok(msg)
    } else {
        Outcome::Warning(format!("{msg}; but: {}", warnings.join("; ")))
    }
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

fn nad_info(nad: &Value) -> Option<NadInfo> {
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
fn check_cni(conf: &Value, raw: Option<&str>, resource: &str) -> (Outcome, Vec<String>) {
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

fn is_workload(kind: &str) -> bool {
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
fn pod_templates<'a>(kind: &str, doc: &'a Value) -> Vec<(Option<String>, &'a Value)> {
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

fn check_workload(
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

/// Resources a NicClusterPolicy's device plugins offer.
fn offered_resources(policy: &Value) -> Vec<String> {
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
fn check_policy(kind: &str, policy: &Value, index: &Index) -> Outcome {
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
    // The DOCA driver has its own version scheme (e.g. doca3.1.0-25.07-...).
    versions.retain(|_, paths| {
        paths.retain(|p| p != "ofedDriver");
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
    use super::*;

    fn outcomes(text: &str) -> Vec<Outcome> {
        check_text(text).into_iter().map(|(_, o)| o).collect()
    }

    const NAD: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: rail3
spec:
  config: |
    { "cniVersion": "1.0.0", "name": "rail3", "type": "roce-ipvlan", "master": "rdma3",
      "ipam": { "type": "nv-ipam", "poolName": "p" } }
"#;

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

    #[test]
    fn a_good_nad_is_ok() {
        let r = check_text(NAD);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, "document 1 NetworkAttachmentDefinition rail3");
        assert!(matches!(&r[0].1, Outcome::Ok(m) if m.starts_with("1 roce-ipvlan")));
    }

    #[test]
    fn multi_document_yaml_reports_each_document() {
        let bad = NAD.replace("\"rdma3\",", "\"rdma3\", \"mode\": \"l3\",");
        let text = format!("{NAD}---\n{bad}---\nkind: DaemonSet\nmetadata: {{name: x}}\n---\n");
        let r = outcomes(&text);
        assert_eq!(r.len(), 3, "{r:?}");
        assert!(matches!(r[0], Outcome::Ok(_)));
        assert!(
            matches!(&r[1], Outcome::Error(m) if m.contains("code 7") && m.contains("l3")),
            "{:?}",
            r[1]
        );
        assert!(matches!(r[2], Outcome::Skipped(_)));
    }

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
    fn broken_inputs_are_errors() {
        let not_json = NAD.replace("\"cniVersion\"", "cniVersion");
        assert!(
            matches!(&outcomes(&not_json)[0], Outcome::Error(m) if m.contains("not valid JSON"))
        );
        assert!(matches!(&outcomes("a: [")[0], Outcome::Error(m) if m.contains("YAML")));
        assert!(matches!(&outcomes("foo: 1")[0], Outcome::Error(_)));
        let no_string =
            "kind: NetworkAttachmentDefinition\nmetadata: {name: x}\nspec: {config: {a: 1}}\n";
        assert!(
            matches!(&outcomes(no_string)[0], Outcome::Error(m) if m.contains("expected a string"))
        );
        // Duplicate sysctl keys survive into NetConf::parse, which refuses them.
        let dup = NAD.replace(
            "\"master\": \"rdma3\",",
            "\"master\": \"rdma3\", \"sysctl\": {\"net.ipv4.conf.IFNAME.arp_ignore\": \"1\", \
             \"net.ipv4.conf.IFNAME.arp_ignore\": \"2\"},",
        );
        assert!(matches!(&outcomes(&dup)[0], Outcome::Error(m) if m.contains("twice")));
    }

    #[test]
    fn lists_are_walked() {
        let list = format!(
            "apiVersion: v1\nkind: List\nitems:\n{}",
            NAD.trim_start()
                .lines()
                .enumerate()
                .map(|(i, l)| if i == 0 {
                    format!("- {l}\n")
                } else {
                    format!("  {l}\n")
                })
                .collect::<String>()
        );
        let r = check_text(&list);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].0.contains("item 1"));
        assert!(matches!(r[0].1, Outcome::Ok(_)));
    }

    fn nad(name: &str, annotations: &str, config: &str) -> String {
        format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  \
             name: {name}\n  namespace: default\n{annotations}spec:\n  config: '{config}'\n"
        )
    }

    const DEVICE_NAD_ANNOTATIONS: &str =
        "  annotations:\n    k8s.v1.cni.cncf.io/resourceName: nvidia.com/hostdev\n";

    fn device_nad(capability: bool) -> String {
        let cap = if capability {
            r#""capabilities": {"CNIDeviceInfoFile": true}, "#
        } else {
            ""
        };
        nad(
            "rails",
            DEVICE_NAD_ANNOTATIONS,
            &format!(
                r#"{{"cniVersion": "1.0.0", "name": "rails", "type": "roce-ipvlan", {cap}"ipam": {{"type": "host-local", "subnet": "10.0.0.0/24"}}}}"#
            ),
        )
    }

    const RAIL_NAD: &str = r#"{"cniVersion": "1.0.0", "name": "rail0", "type": "roce-ipvlan", "master": "rdma0", "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"}}"#;
    const ARGS_NAD: &str = r#"{"cniVersion": "1.0.0", "name": "byargs", "type": "roce-ipvlan", "allowedRails": ["rdma*"], "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"}}"#;

    fn pod(networks: &str, resources: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    \
             k8s.v1.cni.cncf.io/networks: '{networks}'\nspec:\n  containers:\n    - name: c\n      \
             image: x\n      resources:\n        limits: {{{resources}}}\n"
        )
    }

    /// The outcome of the last document of `docs` joined by `---`.
    fn last(docs: &[&str]) -> Outcome {
        let text = docs.join("---\n");
        check_text(&text).pop().expect("one outcome per document").1
    }

    fn is_warning(o: &Outcome, needle: &str) -> bool {
        matches!(o, Outcome::Warning(m) if m.contains(needle))
    }

    fn is_error(o: &Outcome, needle: &str) -> bool {
        matches!(o, Outcome::Error(m) if m.contains(needle))
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
    fn a_pod_on_rail_nads_needs_an_rdma_resource() {
        let rail = nad("rail0", "", RAIL_NAD);
        let o = last(&[&rail, &pod("rail0", "nvidia.com/gpu: 1")]);
        assert!(is_error(&o, "requests no RDMA resource"), "{o:?}");
        let o = last(&[&rail, &pod("rail0", "rdma/rdma_shared_device_a: 1")]);
        assert!(matches!(o, Outcome::Ok(_)), "{o:?}");
        // A pod on networks that are not roce-ipvlan's is not checked.
        let o = last(&[&rail, &pod("other", "nvidia.com/gpu: 1")]);
        assert!(matches!(o, Outcome::Skipped(_)), "{o:?}");
    }

    #[test]
    fn device_id_attachments_are_counted_against_the_resource() {
        let n = device_nad(true);
        let o = last(&[
            &n,
            &pod("rails, default/rails@net2", "nvidia.com/hostdev: 1"),
        ]);
        assert!(is_error(&o, "no device for attachment 2"), "{o:?}");
        let o = last(&[&n, &pod("rails,rails", "nvidia.com/hostdev: \"2\"")]);
        assert!(matches!(o, Outcome::Ok(_)), "{o:?}");
        let o = last(&[&n, &pod("rails,rails", "nvidia.com/hostdev: 3")]);
        assert!(is_warning(&o, "1 device(s) get no child"), "{o:?}");
        // Another namespace's NAD of the same name is not found by Multus.
        let o = last(&[&n, &pod("team/rails", "nvidia.com/gpu: 1")]);
        assert!(is_error(&o, "looked up in namespace team"), "{o:?}");
    }

    #[test]
    fn cni_args_go_through_the_plugin_parser() {
        let n = nad("byargs", "", ARGS_NAD);
        let res = "rdma/rdma_shared_device_a: 1";
        let with = |args: &str| {
            pod(
                &format!(r#"[{{"name": "byargs", "cni-args": {args}}}]"#),
                res,
            )
        };
        assert!(matches!(
            last(&[&n, &with(r#"{"master": "rdma0"}"#)]),
            Outcome::Ok(_)
        ));
        let o = last(&[&n, &with(r#"{"mastr": "rdma0", "master": "rdma1"}"#)]);
        assert!(is_warning(&o, "cni-args key \"mastr\""), "{o:?}");
        let o = last(&[&n, &with(r#"{"master": "bad/name"}"#)]);
        assert!(is_error(&o, "refused (code 7)"), "{o:?}");
        let o = last(&[&n, &pod("byargs", res)]);
        assert!(is_error(&o, "names no rail"), "{o:?}");
        let o = last(&[&n, &pod("[{\"interface\": \"net1\"}]", res)]);
        assert!(is_error(&o, "has no \"name\""), "{o:?}");
    }

    #[test]
    fn job_templates_are_checked_and_mpi_workers_must_run_sshd() {
        let rail = nad("rail0", "", RAIL_NAD);
        let mpijob = |command: &str| {
            format!(
                "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {{name: j}}\nspec:\n  \
                 mpiReplicaSpecs:\n    Worker:\n      template:\n        metadata:\n          \
                 annotations: {{k8s.v1.cni.cncf.io/networks: rail0}}\n        spec:\n          \
                 containers:\n            - name: w\n              image: x\n{command}              \
                 resources: {{limits: {{rdma/rdma_shared_device_a: 1}}}}\n"
            )
        };
        let o = last(&[&rail, &mpijob("")]);
        assert!(is_warning(&o, "runs no sshd"), "{o:?}");
        let o = last(&[
            &rail,
            &mpijob("              command: [/usr/sbin/sshd, -De]\n"),
        ]);
        assert!(matches!(o, Outcome::Ok(_)), "{o:?}");
        let job = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: t}\nspec:\n  \
                   pytorchReplicaSpecs:\n    Master:\n      template:\n        metadata:\n          \
                   annotations: {k8s.v1.cni.cncf.io/networks: rail0}\n        spec:\n          \
                   containers: [{name: m, image: x}]\n";
        let r = check_text(&format!("{rail}---\n{job}"));
        assert_eq!(r[1].0, "document 2 PyTorchJob t Master");
        assert!(is_error(&r[1].1, "requests no RDMA resource"), "{r:?}");
    }

    #[test]
    fn nic_cluster_policies_offer_the_resources_and_come_from_one_release() {
        let policy = |shared: &str, multus: &str| {
            format!(
                "apiVersion: mellanox.com/v1alpha1\nkind: NicClusterPolicy\nmetadata: {{name: p}}\n\
                 spec:\n  rdmaSharedDevicePlugin:\n    version: network-operator-v25.7.0\n    \
                 config: '{{\"configList\": [{{\"resourceName\": \"{shared}\"}}]}}'\n  \
                 secondaryNetwork:\n    multus: {{version: {multus}}}\n"
            )
        };
        let good = policy("rdma_shared_device_a", "network-operator-v25.7.0");
        assert!(
            matches!(last(&[&good]), Outcome::Ok(m) if m.contains("rdma/rdma_shared_device_a"))
        );
        let mixed = policy("rdma_shared_device_a", "v4.1.0");
        assert!(is_warning(
            &last(&[&mixed]),
            "different Network Operator releases"
        ));
        let rail = nad("rail0", "", RAIL_NAD);
        let p = pod("rail0", "rdma/rdma_shared_device_a: 1");
        assert!(matches!(last(&[&good, &rail, &p]), Outcome::Ok(_)));
        let other = policy("rdma_shared_device_b", "network-operator-v25.7.0");
        assert!(is_error(
            &last(&[&other, &rail, &p]),
            "no NicClusterPolicy or NicNodePolicy among the files offers"
        ));
    }

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

    #[test]
    fn strict_fails_on_warnings_and_files_are_one_set() {
        let dir = tempfile::tempdir().unwrap();
        let nads = dir.path().join("nads.yaml");
        let pods = dir.path().join("pods.yaml");
        std::fs::write(&nads, device_nad(false)).unwrap();
        std::fs::write(&pods, pod("rails", "nvidia.com/hostdev: 1")).unwrap();
        let args = |strict: bool, files: &[&std::path::Path]| -> Vec<String> {
            let mut a: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            if strict {
                a.insert(0, "--strict".into());
            }
            a
        };
        assert_eq!(main(&args(false, &[&nads, &pods])), 0);
        assert_eq!(
            main(&args(true, &[&nads, &pods])),
            1,
            "the NAD's warning fails --strict"
        );
        std::fs::write(&nads, device_nad(true)).unwrap();
        assert_eq!(main(&args(true, &[&nads, &pods])), 0);
        // The pod is checked against the NAD of the other file: two attachments, one device.
        std::fs::write(&pods, pod("rails,rails", "nvidia.com/hostdev: 1")).unwrap();
        assert_eq!(main(&args(false, &[&nads, &pods])), 1);
        assert_eq!(
            main(&args(false, &[&pods])),
            0,
            "alone, the pod's NAD is unknown"
        );
    }

    #[test]
    fn references_are_looked_up_in_the_pod_namespace_as_multus_does() {
        let rail = nad("rail0", "", RAIL_NAD);
        let in_ml = |networks: &str| {
            pod(networks, "rdma/rdma_shared_device_a: 1")
                .replace("  name: p\n", "  name: p\n  namespace: ml\n")
        };
        let o = last(&[&rail, &in_ml("rail0")]);
        assert!(
            is_error(&o, "looked up in namespace ml (the pod's namespace)")
                && is_error(&o, "write default/rail0"),
            "{o:?}"
        );
        let o = last(&[&rail, &in_ml("default/rail0")]);
        assert!(matches!(o, Outcome::Ok(_)), "{o:?}");
        // A name that no file holds in any namespace is not known here: not checked.
        let o = last(&[&rail, &in_ml("elsewhere")]);
        assert!(matches!(o, Outcome::Skipped(_)), "{o:?}");
    }

    fn pool(kind: &str, name: &str) -> String {
        format!("apiVersion: nv-ipam.nvidia.com/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}, namespace: nvidia-network-operator}}\n")
    }

    fn nv_ipam_nad(ipam: &str) -> String {
        nad(
            "rail0",
            "",
            &format!(
                r#"{{"cniVersion": "1.0.0", "name": "rail0", "type": "roce-ipvlan", "master": "rdma0", "ipam": {{"type": "nv-ipam", {ipam}}}}}"#
            ),
        )
    }

    #[test]
    fn nv_ipam_pools_must_be_among_the_files_when_any_is() {
        let n = nv_ipam_nad(r#""poolName": "a""#);
        assert!(matches!(last(&[&pool("IPPool", "a"), &n]), Outcome::Ok(_)));
        let o = last(&[&pool("IPPool", "b"), &n]);
        assert!(
            is_error(&o, "nv-ipam pool \"a\" (poolType ippool) is not among")
                && is_error(&o, "code 103"),
            "{o:?}"
        );
        // The chart's mistake: a CIDRPool while the NAD asks for an IPPool.
        let o = last(&[&pool("CIDRPool", "a"), &n]);
        assert!(is_error(&o, "set \"poolType\": \"cidrpool\""), "{o:?}");
        let cidr = nv_ipam_nad(r#""poolName": "a", "poolType": "cidrpool""#);
        assert!(matches!(
            last(&[&pool("CIDRPool", "a"), &cidr]),
            Outcome::Ok(_)
        ));
        // Dual stack: every pool of the list.
        let two = nv_ipam_nad(r#""poolName": "a,v6""#);
        let o = last(&[&pool("IPPool", "a"), &two]);
        assert!(is_error(&o, "pool \"v6\""), "{o:?}");
        // No pool in the files: said, not failed.
        let o = last(&[&n]);
        assert!(
            matches!(&o, Outcome::Ok(m) if m.contains("a not among the files")),
            "{o:?}"
        );
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

    #[test]
    fn jobset_templates_are_checked() {
        let rail = nad("rail0", "", RAIL_NAD);
        let jobset = |resources: &str| {
            format!(
                "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {{name: js}}\nspec:\n  \
                 replicatedJobs:\n    - name: workers\n      replicas: 2\n      template:\n        \
                 spec:\n          template:\n            metadata:\n              annotations: \
                 {{k8s.v1.cni.cncf.io/networks: rail0}}\n            spec:\n              containers:\n\
                 \x20               - name: w\n                  image: x\n                  \
                 resources: {{limits: {{{resources}}}}}\n"
            )
        };
        let r = check_text(&format!("{rail}---\n{}", jobset("nvidia.com/gpu: 8")));
        assert_eq!(r[1].0, "document 2 JobSet js workers");
        assert!(is_error(&r[1].1, "requests no RDMA resource"), "{r:?}");
        let o = last(&[&rail, &jobset("rdma/rdma_shared_device_a: 1")]);
        assert!(matches!(o, Outcome::Ok(_)), "{o:?}");
    }

    fn node_policy(name: &str, selector: &str, section: &str, resource: &str) -> String {
        format!(
            "apiVersion: mellanox.com/v1alpha1\nkind: NicNodePolicy\nmetadata: {{name: {name}}}\n\
             spec:\n  nodeSelector: {{{selector}}}\n  {section}:\n    version: network-operator-v26.4.0\n    \
             config: '{{\"configList\": [{{\"resourceName\": \"{resource}\"}}]}}'\n"
        )
    }

    #[test]
    fn nic_node_policies_offer_resources_and_follow_the_operator_rules() {
        let gpu = node_policy("gpu", "pool: a", "rdmaSharedDevicePlugin", "shared_a");
        let rail = nad("rail0", "", RAIL_NAD);
        let p = pod("rail0", "rdma/shared_a: 1");
        assert!(matches!(last(&[&gpu, &rail, &p]), Outcome::Ok(_)));
        assert!(is_error(
            &last(&[&gpu, &rail, &pod("rail0", "rdma/shared_b: 1")]),
            "no NicClusterPolicy or NicNodePolicy among the files offers"
        ));
        assert!(matches!(&last(&[&gpu]), Outcome::Ok(m) if m.contains("rdma/shared_a")));
        // The same section in the NicClusterPolicy and a NicNodePolicy.
        let ncp = "apiVersion: mellanox.com/v1alpha1\nkind: NicClusterPolicy\nmetadata: {name: p}\n\
                   spec:\n  rdmaSharedDevicePlugin: {version: network-operator-v26.4.0, config: '{}'}\n";
        let o = last(&[ncp, &gpu]);
        assert!(
            is_error(
                &o,
                "rdmaSharedDevicePlugin is in this NicNodePolicy and in the NicClusterPolicy"
            ),
            "{o:?}"
        );
        let o = last(&[&gpu, ncp]);
        assert!(is_error(&o, "and in NicNodePolicy gpu"), "{o:?}");
        // Two NicNodePolicies on the same nodes; a name the operator refuses.
        let other = node_policy("storage", "pool: a", "sriovDevicePlugin", "x");
        assert!(is_error(
            &last(&[&gpu, &other]),
            "NicNodePolicy gpu selects the same nodes"
        ));
        let long = node_policy(&"n".repeat(31), "pool: b", "ofedDriver", "x");
        assert!(is_error(&last(&[&long]), "has 31 characters"));
        let mixed = gpu.replace("network-operator-v26.4.0", "v1.5.1");
        let mixed = format!("{mixed}  sriovDevicePlugin: {{version: network-operator-v26.4.0}}\n");
        assert!(is_warning(
            &last(&[&mixed]),
            "different Network Operator releases"
        ));
    }
}
