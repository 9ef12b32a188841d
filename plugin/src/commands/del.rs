//! DEL: best-effort and idempotent. Everything that can be removed is removed; a namespace or
//! link that is already gone is success. Only a failure to release the IPAM allocation is
//! reported, because the runtime will not call DEL again and the address would leak.

use crate::attach::ipam::Ipam;
use crate::attach::ipvlan;
use crate::attach::pod_record;
use crate::kernel::lock;
use crate::kernel::netlink::RouteSocket;
use crate::kernel::netns::Netns;
use crate::protocol::cni::{CniResult, Env};
use crate::protocol::config::NetConf;
use crate::protocol::error::{Error, Result};

/// Synchronous: nothing in DEL waits on the runtime (ipvlan::remove).
pub fn del(env: &Env, conf: &NetConf) -> Result<()> {
    // An ADD of this attachment that is still running (orphaned by a runtime that gave up on
    // it) ends within its own limits, undone or done; then this DEL removes it (lock.rs).
    let key = lock::Key::attachment(&env.container_id, &env.ifname);
    let _attachment = match lock::acquire(&key, conf.timeouts.total + conf.timeouts.ipam) {
        Ok(held) => Some(held),
        Err(e @ Error::TryAgainLater(_)) => return Err(e),
        Err(e) => {
            // A DEL must not strand a pod over a lock file: go on without it.
            tracing::warn!(error = %e, "cannot take the attachment lock; deleting without it");
            None
        }
    };
    // First: whatever else fails below, the installer stops publishing this attachment.
    pod_record::remove(
        std::path::Path::new(pod_record::DIR),
        &env.container_id,
        &env.ifname,
    );
    if let Some(path) = &conf.device_info_file {
        // Another pod's file (or one not named for this attachment) is left as it is, and
        // DEL goes on: ADD refused it, so there is nothing of ours to remove there.
        match crate::attach::device_info::check_attachment(path, &env.container_id, &env.ifname) {
            Ok(()) => crate::attach::device_info::remove(path),
            Err(e) => tracing::warn!(error = %e, "device-info file left alone"),
        }
    }
    let netns = match crate::protocol::cni::validate_ifname(&env.ifname) {
        Ok(()) => env.netns.as_ref(),
        Err(e) => {
            // ADD never made a child of that name (it refuses such names), so there is none to
            // remove; IPAM DEL still runs for whatever an older release allocated.
            tracing::warn!(error = %e, "not cleaning up inside CNI_NETNS");
            None
        }
    };
    let prev = conf
        .prev_result
        .as_ref()
        .and_then(|v| CniResult::parse(v).ok());
    // A multi-rail attachment's children, as ADD reported them.
    let listed: Vec<String> = prev
        .iter()
        .flat_map(|p| &p.interfaces)
        .filter(|i| !i.sandbox.is_empty())
        .map(|i| i.name.clone())
        .collect();
    let mut found = Vec::new();
    if let Some(path) = netns {
        match Netns::open_if_exists(path) {
            // Never the host's: its links and rules are not the pod's to remove. IPAM DEL
            // still runs, so the address is released whatever the runtime got wrong.
            Ok(Some(netns)) if netns.is_own().unwrap_or(true) => tracing::warn!(
                netns = %path.display(),
                "CNI_NETNS is the plugin's own (host) namespace; not touching its links or rules"
            ),
            Ok(Some(netns)) if conf.multi_rail() => {
                match ipvlan::remove_children(env, &netns, &listed) {
                    Ok(names) => found = names,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not remove every child; continuing with IPAM")
                    }
                }
            }
            Ok(Some(netns)) => {
                if let Err(e) = ipvlan::remove(env, &netns) {
                    tracing::warn!(error = %e, "could not remove the child; continuing with IPAM");
                }
            }
            Ok(None) => tracing::info!(netns = %path.display(), "namespace already gone"),
            Err(e) => tracing::warn!(error = %e, "not cleaning up inside CNI_NETNS"),
        }
    }
    tracing::debug!("pod side removed");
    if conf.multi_rail() {
        return release_children(env, conf, prev.as_ref(), &listed, &found);
    }
    match Ipam::find(env, conf)? {
        Some(ipam) => ipam.del(prev.as_ref()),
        None => Ok(()),
    }
}

/// IPAM DEL for every child of a multi-rail attachment, each with its own CNI_IFNAME (as ADD
/// allocated) and its part of prevResult, all at once. Which children: those of prevResult,
/// those found in the pod, and as many as the node has rails matching `rails` now (the pod may
/// be gone and prevResult missing); a DEL for a child that has no allocation is harmless
/// (the spec requires it). Every release is tried; the first failure is the answer.
fn release_children(
    env: &Env,
    conf: &NetConf,
    prev: Option<&CniResult>,
    listed: &[String],
    found: &[String],
) -> Result<()> {
    if conf.ipam.is_none() {
        return Ok(());
    }
    let on_node = match &conf.rail.rails {
        Some(rails) => RouteSocket::current()
            .and_then(|host| host.links())
            .map(|links| links.iter().filter(|l| rails.matches(&l.name)).count())
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot count the rails of the node");
                0
            }),
        None => 0,
    };
    let derived = found
        .iter()
        .chain(listed)
        .filter_map(|name| ipvlan::child_index(&env.ifname, name))
        .map(|i| i + 1)
        .max()
        .unwrap_or(0)
        .max(on_node);
    let mut names: Vec<String> = (0..derived)
        .map(|i| ipvlan::child_name(&env.ifname, i))
        .collect();
    for name in listed {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    let envs: Vec<Env> = names.iter().map(|n| ipvlan::child_env(env, n)).collect();
    let release = |child: &Env| -> Result<()> {
        let own = prev.map(|p| p.for_interface(&child.ifname));
        match Ipam::find(child, conf)? {
            Some(ipam) => ipam.del(own.as_ref()),
            None => Ok(()),
        }
    };
    let outcomes: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = envs
            .iter()
            .map(|child| {
                std::thread::Builder::new()
                    .name("ipam-del".into())
                    .spawn_scoped(scope, || release(child))
                    // No thread (pids.max): released on this one, after the others.
                    .map_err(|_| child)
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(child) => release(child),
            })
            .collect()
    });
    tracing::debug!(children = names.len(), "IPAM released");
    outcomes.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}
