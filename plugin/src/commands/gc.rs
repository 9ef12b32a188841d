//! GC (CNI 1.1): release the state of attachments the runtime no longer knows.
//!
//! The runtime lists the attachments still in use in `cni.dev/valid-attachments`
//! (`[{"containerID": ..., "ifname": ...}]`); everything else of this network may go.
//!
//! What roce-ipvlan itself keeps, and why GC has nothing of its own to remove:
//! - the IPvlan child, its addresses, per-interface sysctls, routing table and rules live in the
//!   pod's network namespace and disappear with it; a GC request carries no namespace paths, so
//!   there is nothing to look at even if one outlived its pod;
//! - the Multus device-info file (device_info.rs) sits at a path Multus chooses per attachment
//!   (`runtimeConfig.CNIDeviceInfoFile`), which a GC request does not carry and which cannot be
//!   derived from a container ID: it cannot be enumerated, and Multus removes its own directory
//!   entries;
//! - the attachment records (pod_record.rs) are keyed by container id and ifname: GC removes
//!   its network's records of attachments not in the list;
//! - there is no cache, lock file or database.
//!
//! So GC checks the request, removes stale records, and forwards it to the IPAM plugin (host-local's allocations, for
//! instance, are exactly the state that outlives a crashed runtime), when that plugin speaks
//! CNI 1.1; an older IPAM plugin is skipped with a log line.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::attach::ipam::{Delegated, Ipam};
use crate::attach::ipvlan;
use crate::attach::pod_record;
use crate::kernel::netlink::RouteSocket;
use crate::protocol::cni::{self, Env};
use crate::protocol::config::NetConf;
use crate::protocol::error::{Error, Result};

/// The key the spec names (libcni also sends the misspelt `cni.dev/attachments`, spec issue
/// #1101; it carries the same list).
pub const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

pub fn gc(env: &Env, conf: &NetConf) -> Result<()> {
    cni::require_command(&conf.cni_version, "GC")?;
    let valid = valid_attachments(&conf.raw)?;
    let keep: Vec<(String, String)> = valid
        .iter()
        .map(|a| (a.container_id.clone(), a.ifname.clone()))
        .collect();
    let removed = pod_record::gc(std::path::Path::new(pod_record::DIR), &conf.name, &keep);
    tracing::info!(
        valid = valid.len(),
        stale_records = removed,
        "GC: stale attachment records removed; forwarding to IPAM"
    );
    let expanded;
    let conf = if conf.multi_rail() {
        expanded = with_children(conf, &valid);
        &expanded
    } else {
        conf
    };
    if let Some(ipam) = Ipam::find(env, conf)? {
        if ipam.gc()? == Delegated::Forwarded {
            tracing::info!("IPAM GC done");
        }
    }
    Ok(())
}

/// How many children of each valid multi-rail attachment GC keeps at least: the IPAM
/// allocations of a live pod's children must survive a GC even when the node lost rails since
/// its ADD (the child names are numbered in rail order, ipvlan.rs).
const CHILDREN_KEPT: usize = 64;

/// The configuration IPAM GC gets for a multi-rail network: the runtime lists each attachment
/// by its CNI_IFNAME, but its IPAM allocations are the children's (one per rail, each under the
/// child's name), which would all look stale to the IPAM plugin. So every valid attachment
/// stands for its children too: as many as the node has rails matching `rails`, and at least
/// [`CHILDREN_KEPT`].
fn with_children(conf: &NetConf, valid: &[Attachment]) -> NetConf {
    let on_node = match &conf.rail.rails {
        Some(rails) => RouteSocket::current()
            .and_then(|host| host.links())
            .map(|links| links.iter().filter(|l| rails.matches(&l.name)).count())
            .unwrap_or(0),
        None => 0,
    };
    let list: Vec<Value> = valid
        .iter()
        .flat_map(|a| {
            std::iter::once(a.ifname.clone())
                .chain((0..on_node.max(CHILDREN_KEPT)).map(|i| ipvlan::child_name(&a.ifname, i)))
                .map(|ifname| json!({"containerID": a.container_id, "ifname": ifname}))
        })
        .collect();
    let mut conf = conf.clone();
    for key in [VALID_ATTACHMENTS, "cni.dev/attachments"] {
        if conf.raw.get(key).is_some() {
            conf.raw[key] = Value::Array(list.clone());
        }
    }
    conf
}

/// The attachments the runtime still uses. A missing list is refused rather than read as
/// "none": forwarded as is, it would let the IPAM plugin release every address of the network
/// because of a runtime bug. An empty list is the runtime's explicit word and is accepted.
pub fn valid_attachments(raw: &Value) -> Result<Vec<Attachment>> {
    let Some(list) = raw.get(VALID_ATTACHMENTS) else {
        return Err(Error::InvalidConfig(format!(
            "GC needs \"{VALID_ATTACHMENTS}\": the list of attachments still in use (an empty \
             list releases everything); the runtime did not send it"
        )));
    };
    serde_json::from_value(list.clone()).map_err(|e| {
        Error::InvalidConfig(format!(
            "\"{VALID_ATTACHMENTS}\" is {list}: expected [{{\"containerID\": ..., \"ifname\": \
             ...}}, ...] ({e})"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_attachments_are_read_and_checked() {
        let raw = json!({ VALID_ATTACHMENTS: [
            {"containerID": "c1", "ifname": "net1"},
            {"containerID": "c2", "ifname": "net2"}
        ]});
        let list = valid_attachments(&raw).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1].container_id, "c2");
        assert_eq!(
            valid_attachments(&json!({ VALID_ATTACHMENTS: [] })).unwrap(),
            vec![]
        );
        for bad in [
            json!({}),
            json!({ VALID_ATTACHMENTS: "c1" }),
            json!({ VALID_ATTACHMENTS: [{"containerID": "c1"}] }),
            json!({ VALID_ATTACHMENTS: [{"containerID": 1, "ifname": "net1"}] }),
        ] {
            let err = valid_attachments(&bad).unwrap_err();
            assert_eq!(err.code(), 7, "{err}");
            assert!(err.to_string().contains(VALID_ATTACHMENTS), "{err}");
        }
    }
}
