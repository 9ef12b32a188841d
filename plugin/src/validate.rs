//! `roce-ipvlan validate FILE...`: runs the plugin's own configuration checks
//! ([`NetConf::parse`]) on NetworkAttachmentDefinitions and CNI configurations, so that a NAD
//! is refused in CI or by an operator, not by kubelet on a GPU node.
//!
//! A file holds one or more YAML documents (JSON is YAML too): NetworkAttachmentDefinitions,
//! `List`s of them, CNI configurations or configuration lists. Other documents (DaemonSets, …)
//! are skipped. In a list, `cniVersion` and `name` are copied into each plugin's configuration,
//! as libcni does. Rail lookups are left out: they depend on the node (see rail.rs).

use std::fmt::Write as _;
use std::io::Read;

use serde::Deserialize;
use serde_json::Value;

use crate::config::NetConf;

/// The interface name configurations are checked for (`IFNAME` in sysctl keys).
const IFNAME: &str = "net1";
const RESOURCE_NAME: &str = "k8s.v1.cni.cncf.io/resourceName";

/// What one document amounted to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every roce-ipvlan configuration in it passed; the text says what was checked.
    Ok(String),
    /// Not something this command checks.
    Skipped(String),
    Error(String),
}

/// Runs the subcommand; returns the exit status (0: all OK, 1: an error, 2: usage).
pub fn main(args: &[String]) -> i32 {
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") {
        eprintln!(
            "usage: roce-ipvlan validate FILE...   ('-' reads stdin)\n\
             Checks every roce-ipvlan configuration in NetworkAttachmentDefinitions (YAML or \
             JSON, multi-document), CNI configurations and configuration lists."
        );
        return 2;
    }
    let mut failed = false;
    for file in args {
        let text = if file == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map(|_| s)
        } else {
            std::fs::read_to_string(file)
        };
        let results = match text {
            Ok(text) => check_text(&text),
            Err(e) => vec![("-".to_string(), Outcome::Error(format!("cannot read: {e}")))],
        };
        for (what, outcome) in results {
            match outcome {
                Outcome::Ok(msg) => println!("OK    {file}: {what}: {msg}"),
                Outcome::Skipped(msg) => println!("skip  {file}: {what}: {msg}"),
                Outcome::Error(msg) => {
                    failed = true;
                    println!("ERROR {file}: {what}: {msg}");
                }
            }
        }
    }
    i32::from(failed)
}

/// Checks every document of a YAML/JSON text; returns (document label, outcome) pairs.
pub fn check_text(text: &str) -> Vec<(String, Outcome)> {
    let mut out = Vec::new();
    // A JSON file is checked from its own text: a serde Value has already collapsed duplicate
    // keys, which NetConf::parse refuses.
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        check_value("document 1", &value, Some(text), &mut out);
        return out;
    }
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let label = format!("document {}", i + 1);
        match Value::deserialize(doc) {
            Ok(Value::Null) => {} // an empty document (a trailing `---`)
            Ok(value) => check_value(&label, &value, None, &mut out),
            Err(e) => {
                out.push((label, Outcome::Error(format!("not valid YAML/JSON: {e}"))));
                // The parser cannot resynchronise after a syntax error.
                break;
            }
        }
    }
    out
}

fn check_value(label: &str, doc: &Value, raw: Option<&str>, out: &mut Vec<(String, Outcome)>) {
    let kind = doc.get("kind").and_then(Value::as_str);
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    match kind {
        Some("NetworkAttachmentDefinition") => {
            let label = format!("{label} NetworkAttachmentDefinition {name}");
            out.push((label, check_nad(doc)));
        }
        Some("List") => match doc.get("items").and_then(Value::as_array) {
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    check_value(&format!("{label} item {}", i + 1), item, None, out);
                }
            }
            None => out.push((label.into(), Outcome::Error("a List without items".into()))),
        },
        Some(other) => out.push((
            format!("{label} {other} {name}"),
            Outcome::Skipped("not a NetworkAttachmentDefinition".into()),
        )),
        None if doc.get("cniVersion").is_some() => {
            out.push((label.into(), check_cni(doc, raw, "")));
        }
        None => out.push((
            label.into(),
            Outcome::Error(
                "neither a Kubernetes object (no \"kind\") nor a CNI configuration (no \
                 \"cniVersion\")"
                    .into(),
            ),
        )),
    }
}

fn check_nad(nad: &Value) -> Outcome {
    let Some(config) = nad.pointer("/spec/config") else {
        return Outcome::Skipped(
            "no spec.config: Multus reads the configuration from a file on the node".into(),
        );
    };
    let Some(config) = config.as_str() else {
        return Outcome::Error(format!(
            "spec.config is {config}: expected a string holding JSON (use `config: |`)"
        ));
    };
    let parsed: Value = match serde_json::from_str(config) {
        Ok(v) => v,
        Err(e) => return Outcome::Error(format!("spec.config is not valid JSON: {e}")),
    };
    let resource = nad
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(RESOURCE_NAME))
        .and_then(Value::as_str)
        .unwrap_or("");
    check_cni(&parsed, Some(config), resource)
}

/// A CNI configuration or configuration list, with its JSON text when there is one; `resource`
/// is the NAD's resourceName, if any.
fn check_cni(conf: &Value, raw: Option<&str>, resource: &str) -> Outcome {
    let mut checked = Vec::new();
    let mut notes = String::new();
    let configs: Vec<Value> = match conf.get("plugins") {
        Some(Value::Array(plugins)) => plugins
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
            .collect(),
        Some(other) => return Outcome::Error(format!("\"plugins\" is {other}: expected a list")),
        None => vec![conf.clone()],
    };
    for (i, c) in configs.iter().enumerate() {
        if c.get("type").and_then(Value::as_str) != Some("roce-ipvlan") {
            continue;
        }
        let text = match raw {
            Some(raw) if configs.len() == 1 && conf.get("plugins").is_none() => raw.to_string(),
            _ => c.to_string(),
        };
        match NetConf::parse(text.as_bytes(), IFNAME) {
            Ok(parsed) => {
                checked.push(i);
                if !parsed.rail.names_a_rail() {
                    if !resource.is_empty() {
                        let _ = write!(notes, "; the rail comes from the deviceID of {resource}");
                    } else if parsed.rail.allowed.is_empty() {
                        // Every ADD would be refused: no rail, and no pod may name one.
                        return Outcome::Error(format!(
                            "roce-ipvlan configuration{} names no rail: expected \"master\", \
                             \"rdma.device\", a {RESOURCE_NAME} annotation (deviceID), or \
                             \"allowedRails\" listing the rails pods may choose with cni-args",
                            if configs.len() > 1 {
                                format!(" (plugin {})", i + 1)
                            } else {
                                String::new()
                            }
                        ));
                    } else {
                        let _ = write!(
                            notes,
                            "; the rail comes from each pod's cni-args, among allowedRails"
                        );
                    }
                }
            }
            Err(e) => {
                return Outcome::Error(format!(
                    "roce-ipvlan configuration{} refused (code {}): {e}",
                    if configs.len() > 1 {
                        format!(" (plugin {})", i + 1)
                    } else {
                        String::new()
                    },
                    e.code()
                ))
            }
        }
    }
    if checked.is_empty() {
        return Outcome::Skipped("no roce-ipvlan configuration".into());
    }
    Outcome::Ok(format!(
        "{} roce-ipvlan configuration(s) valid{notes}",
        checked.len()
    ))
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
            matches!(&outcomes(&by_device)[0], Outcome::Ok(m) if m.contains("nvidia.com/hostdev")),
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
}
