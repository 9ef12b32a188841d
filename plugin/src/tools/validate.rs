//! `roce-ipvlan validate [--strict] FILE...`: runs the plugin's own configuration checks
//! ([`NetConf::parse`](crate::protocol::config::NetConf::parse)) on
//! NetworkAttachmentDefinitions and CNI configurations, and checks the workloads that use them,
//! so that a NAD or a pod is refused in CI or by an operator, not by kubelet on a GPU node.
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
//!
//! This file holds the command line and the run over one set: it indexes the NADs, policies
//! and pools of every document, then checks each document with its part: `load` reads the
//! files into documents, `nad` checks NADs and CNI configurations, `workload` the workloads
//! using them, `policy` the NicClusterPolicies and NicNodePolicies.

mod load;
mod nad;
mod policy;
mod workload;

use std::collections::{BTreeSet, HashMap};
use std::io::Read;

use serde_json::Value;

use crate::tools::cli::{self, Arg, Long, Parsed, Short, ValueExt as _};
use load::{name_of, namespace_of, parse_text, Doc};
use nad::{check_cni, check_nad, nad_info, NadInfo};
use policy::{check_policy, offered_resources, sections_of, NodePolicyInfo};
use workload::{check_workload, is_workload, pod_templates};

/// The interface name configurations are checked for (`IFNAME` in sysctl keys).
const IFNAME: &str = "net1";

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

/// Checks every document of one YAML/JSON text on its own; returns (label, outcome) pairs.
#[cfg(test)]
fn check_text(text: &str) -> Vec<(String, Outcome)> {
    check_docs(&parse_text("-", text))
        .into_iter()
        .map(|(_, label, outcome)| (label, outcome))
        .collect()
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

fn with_warnings(msg: String, warnings: Vec<String>) -> Outcome {
    if warnings.is_empty() {
        Outcome::Ok(msg)
    } else {
        Outcome::Warning(format!("{msg}; but: {}", warnings.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    //! The whole command on inputs of several kinds, and the documents and assertions the
    //! parts' tests share (pub(super)).

    use super::*;

    pub(super) fn outcomes(text: &str) -> Vec<Outcome> {
        check_text(text).into_iter().map(|(_, o)| o).collect()
    }

    pub(super) const NAD: &str = r#"
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

    pub(super) fn nad(name: &str, annotations: &str, config: &str) -> String {
        format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  \
             name: {name}\n  namespace: default\n{annotations}spec:\n  config: '{config}'\n"
        )
    }

    const DEVICE_NAD_ANNOTATIONS: &str =
        "  annotations:\n    k8s.v1.cni.cncf.io/resourceName: nvidia.com/hostdev\n";

    pub(super) fn device_nad(capability: bool) -> String {
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

    pub(super) const RAIL_NAD: &str = r#"{"cniVersion": "1.0.0", "name": "rail0", "type": "roce-ipvlan", "master": "rdma0", "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"}}"#;
    const ARGS_NAD: &str = r#"{"cniVersion": "1.0.0", "name": "byargs", "type": "roce-ipvlan", "allowedRails": ["rdma*"], "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"}}"#;

    fn pod(networks: &str, resources: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    \
             k8s.v1.cni.cncf.io/networks: '{networks}'\nspec:\n  containers:\n    - name: c\n      \
             image: x\n      resources:\n        limits: {{{resources}}}\n"
        )
    }

    /// The outcome of the last document of `docs` joined by `---`.
    pub(super) fn last(docs: &[&str]) -> Outcome {
        let text = docs.join("---\n");
        check_text(&text).pop().expect("one outcome per document").1
    }

    pub(super) fn is_warning(o: &Outcome, needle: &str) -> bool {
        matches!(o, Outcome::Warning(m) if m.contains(needle))
    }

    pub(super) fn is_error(o: &Outcome, needle: &str) -> bool {
        matches!(o, Outcome::Error(m) if m.contains(needle))
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
        // One release whose DOCA components carry their own versions (v26.7.0-rc.2's
        // hack/release.yaml): not a mix.
        let doca = format!(
            "{good}  ofedDriver: {{version: doca3.5.0-26.07-0.7.1.0-0}}\n  \
             docaTelemetryService: {{version: 1.25.5-doca3.4.0-host}}\n"
        );
        assert!(
            matches!(last(&[&doca]), Outcome::Ok(_)),
            "{:?}",
            last(&[&doca])
        );
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

    /// The NVIDIA Network Operator renders its NADs in cniVersion 0.3.1 (issue #37): such a
    /// NAD, alone or as a list with a meta plugin after roce-ipvlan, passes `--strict`.
    #[test]
    fn nads_in_cni_0_3_1_pass_strict() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("nads.yaml");
        let list = r#"{"cniVersion": "0.3.1", "name": "rail1", "plugins": [{"type": "roce-ipvlan", "master": "rdma1", "ipam": {"type": "host-local", "subnet": "10.0.1.0/24"}}, {"type": "tuning"}]}"#;
        let nads = [
            device_nad(true).replace("1.0.0", "0.3.1"),
            nad("rail0", "", &RAIL_NAD.replace("1.0.0", "0.3.1")),
            nad("rail1", "", list),
        ];
        for (i, text) in nads.iter().enumerate() {
            assert!(text.contains("\"0.3.1\""), "{text}");
            assert!(
                matches!(&outcomes(text)[0], Outcome::Ok(_)),
                "{i}: {:?}",
                outcomes(text)
            );
        }
        std::fs::write(&file, nads.join("---\n")).unwrap();
        let file = file.display().to_string();
        assert_eq!(main(&["--strict".into(), file]), 0);
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
