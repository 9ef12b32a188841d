//! DEL: best-effort and idempotent. Everything that can be removed is removed; a namespace or
//! link that is already gone is success. Only a failure to release the IPAM allocation is
//! reported, because the runtime will not call DEL again and the address would leak.

use crate::attach::ipam::Ipam;
use crate::attach::ipvlan;
use crate::kernel::lock;
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
    if let Some(path) = netns {
        match Netns::open_if_exists(path) {
            // Never the host's: its links and rules are not the pod's to remove. IPAM DEL
            // still runs, so the address is released whatever the runtime got wrong.
            Ok(Some(netns)) if netns.is_own().unwrap_or(true) => tracing::warn!(
                netns = %path.display(),
                "CNI_NETNS is the plugin's own (host) namespace; not touching its links or rules"
            ),
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
    let prev = conf
        .prev_result
        .as_ref()
        .and_then(|v| CniResult::parse(v).ok());
    match Ipam::find(env, conf)? {
        Some(ipam) => ipam.del(prev.as_ref()),
        None => Ok(()),
    }
}
