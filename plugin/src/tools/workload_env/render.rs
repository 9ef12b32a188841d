//! Rendering: a plan as shell lines, JSON or an nccl.conf.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::{Format, Plan, Rail};

/// Single-quotes a value for POSIX shells.
pub(super) fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

pub fn render(format: Format, rails: &[Rail], plan: &Plan) -> String {
    let mut out = String::new();
    match format {
        Format::Shell => {
            for note in &plan.notes {
                let _ = writeln!(out, "# {note}");
            }
            if !plan.unset.is_empty() {
                let _ = writeln!(out, "unset {}", plan.unset.join(" "));
            }
            for (key, value) in &plan.env {
                let _ = writeln!(out, "export {key}={}", shell_quote(value));
            }
        }
        Format::NcclConf => {
            let _ = writeln!(
                out,
                "# NCCL settings for this pod's roce-ipvlan rails (roce-ipvlan env). Environment \
                 variables override this file."
            );
            for note in &plan.notes {
                let _ = writeln!(out, "# {note}");
            }
            let unset: Vec<&str> = plan
                .unset
                .iter()
                .copied()
                .filter(|k| k.starts_with("NCCL_"))
                .collect();
            if !unset.is_empty() {
                let _ = writeln!(
                    out,
                    "# must not be set in the environment: {}",
                    unset.join(" ")
                );
            }
            for (key, value) in plan.env.iter().filter(|(k, _)| k.starts_with("NCCL_")) {
                let _ = writeln!(out, "{key}={value}");
            }
        }
        Format::Json => {
            let env: serde_json::Map<String, Value> = plan
                .env
                .iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
                .collect();
            let doc = json!({
                "rails": rails.iter().map(|r| json!({
                    "interface": r.ifname,
                    "rdmaDevice": r.roce.rdma_device,
                    "port": r.roce.port,
                    "gidIndex": r.roce.gid_index,
                    "gid": r.roce.gid.to_string(),
                })).collect::<Vec<_>>(),
                "sameGidIndex": rails.iter().all(|r| r.roce.gid_index == rails[0].roce.gid_index),
                "env": env,
                "unset": plan.unset,
                "notes": plan.notes,
            });
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&doc).expect("a JSON value always serializes")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::workload_env::plan::plan;
    use crate::tools::workload_env::plan::tests::{rail, upstream_v4};

    #[test]
    fn renders_every_format() {
        let (t, i) = upstream_v4("10.9.0.7", &[]);
        let rails = vec![rail("net1", "mlx5_6", i, "::ffff:10.9.0.7", t)];
        let plan = plan(&rails).unwrap();
        let shell = render(Format::Shell, &rails, &plan);
        assert_eq!(
            shell,
            "unset NCCL_IB_ADDR_FAMILY NCCL_IB_ADDR_RANGE NCCL_IB_ROCE_VERSION_NUM UCX_IB_ROCE_SUBNETS\n\
             export NCCL_IB_HCA='=mlx5_6:1'\n\
             export NCCL_IB_GID_INDEX='1'\n\
             export UCX_NET_DEVICES='mlx5_6:1'\n\
             export UCX_IB_GID_INDEX='1'\n"
        );
        let conf = render(Format::NcclConf, &rails, &plan);
        assert!(
            conf.contains("\nNCCL_IB_HCA==mlx5_6:1\nNCCL_IB_GID_INDEX=1\n"),
            "{conf}"
        );
        assert!(!conf.contains("UCX_"), "{conf}");
        let doc: Value = serde_json::from_str(&render(Format::Json, &rails, &plan)).unwrap();
        assert_eq!(doc["rails"][0]["interface"], "net1");
        assert_eq!(doc["rails"][0]["gidIndex"], 1);
        assert_eq!(doc["rails"][0]["gid"], "::ffff:10.9.0.7");
        assert_eq!(doc["env"]["NCCL_IB_GID_INDEX"], "1");
        assert_eq!(doc["sameGidIndex"], true);
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
