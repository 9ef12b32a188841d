//! The IPvlan L2 child of a rail in the pod: created by ADD (under CNI_IFNAME, or under a
//! temporary name and renamed), removed by DEL with its source rules.

use crate::attach::failpoint::failpoint;
use crate::attach::routing;
use crate::kernel::netlink::{InfoKind, Link, RouteSocket};
use crate::kernel::netns::Netns;
use crate::protocol::cni::Env;
use crate::protocol::error::{Error, Result};

/// Creates the IPvlan child in the pod as CNI_IFNAME.
///
/// First in one request, straight under its final name. The kernel looks a create request's
/// name up in the namespace the request is sent from, so that fails with EEXIST when the host
/// has a link of that name (though the pod does not). Then the child is created under a
/// temporary name and renamed in the pod, as the reference plugins always do; the rename costs
/// an RCU grace period in the kernel (`dev_change_name`), which is why it is not the first try.
pub(crate) fn create(
    env: &Env,
    host: &RouteSocket,
    pod: &RouteSocket,
    netns: &Netns,
    master: &Link,
    mtu: Option<u32>,
) -> Result<Link> {
    let name = match host.create_ipvlan_l2(&env.ifname, master.index, mtu, netns) {
        Ok(()) => env.ifname.clone(),
        Err(e) if e.netlink_errno() == Some(libc::EEXIST) => {
            let temp = temp_name(env);
            tracing::debug!(ifname = %env.ifname, %temp, "the host has a link of that name; creating under a temporary one");
            host.create_ipvlan_l2(&temp, master.index, mtu, netns)?;
            temp
        }
        Err(e) => return Err(e),
    };
    let child = match lookup_created(pod, &name) {
        Ok(Some(child)) => child,
        Ok(None) => {
            return Err(Error::io(
                format!("IPvlan child {name} vanished from the pod right after it was created"),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ))
        }
        Err(e) => {
            // ADD's undo step for the child needs its index, which this lookup was to give:
            // the child it has just created is removed here, or it would outlive the ADD.
            remove_created(netns, &name);
            return Err(e);
        }
    };
    if name != env.ifname {
        if let Err(e) = pod.rename(child.index, &env.ifname) {
            if let Err(undo) = pod.delete_link(child.index) {
                tracing::error!(link = %name, error = %undo, "could not remove the child after its rename failed");
            }
            return Err(e);
        }
    }
    Ok(child)
}

/// The child `create` has just made, by name.
fn lookup_created(pod: &RouteSocket, name: &str) -> Result<Option<Link>> {
    // A failed lookup, for the privileged tests (failpoint.rs).
    failpoint!("after-create");
    pod.link_by_name(name)
}

/// Removes the IPvlan child `name` that `create` made, on a socket of its own (the failed
/// lookup may have left the other unusable); a failure is logged, and DEL removes the child
/// by that name later.
fn remove_created(netns: &Netns, name: &str) {
    let removed = RouteSocket::open_in(netns).and_then(|pod| match pod.link_by_name(name)? {
        Some(link) if link.kind == Some(InfoKind::IpVlan) => pod.delete_link(link.index),
        _ => Ok(()),
    });
    if let Err(e) = removed {
        tracing::error!(link = %name, error = %e, "could not remove the child after its lookup failed; DEL removes it");
    }
}

/// A name for the child while it is created: unique per attachment, at most 15 bytes, and the
/// same in every invocation for that attachment, so that DEL can find a child left under it by
/// an ADD killed between creating and renaming it. (Two ADDs of one attachment at once collide
/// on it; the second fails, as it should.) The hash is 32-bit FNV-1a, written out here: it
/// must give the same name in every release, which `std`'s `DefaultHasher` does not promise
/// (its algorithm may change with the Rust version, and a DEL by an upgraded binary would then
/// miss the child).
fn temp_name(env: &Env) -> String {
    format!("rtmp{:08x}", temp_name_hash(&env.container_id, &env.ifname))
}

/// FNV-1a (32-bit) over the container id, a NUL (which neither may contain) and the interface
/// name.
fn temp_name_hash(container_id: &str, ifname: &str) -> u32 {
    fnv1a32(container_id.bytes().chain([0]).chain(ifname.bytes()))
}

fn fnv1a32(bytes: impl Iterator<Item = u8>) -> u32 {
    const OFFSET_BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    bytes.fold(OFFSET_BASIS, |h, b| (h ^ u32::from(b)).wrapping_mul(PRIME))
}

/// Removes the child CNI_IFNAME from the pod with its source rules (DEL), and a child still
/// under its temporary name. A link of another kind under that name is left alone.
pub(crate) fn remove(env: &Env, netns: &Netns) -> Result<()> {
    let pod = RouteSocket::open_in(netns)?;
    // A child still under its temporary name: an ADD that had to use one (see `create`) was
    // killed before renaming it.
    let temp = temp_name(env);
    if let Some(link) = pod.link_by_name(&temp)? {
        if link.kind == Some(InfoKind::IpVlan) {
            tracing::info!(link = %temp, "removing a child left by an interrupted ADD");
            pod.delete_link(link.index)?;
        }
    }
    let Some(link) = pod.link_by_name(&env.ifname)? else {
        return Ok(());
    };
    if link.kind != Some(InfoKind::IpVlan) {
        tracing::warn!(ifname = %env.ifname, kind = ?link.kind, "not an IPvlan child; leaving it alone");
        return Ok(());
    }
    // Rules are not tied to the link: remove them before the link, while the table number
    // (derived from its ifindex) is still known to be ours. One dump holds both families'.
    for rule in pod.rules_in_table(routing::table_for(link.index))? {
        pod.delete_rule(&rule)?;
    }
    // Routes in the child's table go away with the link.
    pod.delete_link(link.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(container_id: &str, ifname: &str) -> Env {
        Env {
            command: crate::protocol::cni::Command::Add,
            container_id: container_id.into(),
            netns: None,
            ifname: ifname.into(),
            path: Vec::new(),
        }
    }

    /// Pinned: a release that changes these names strands children of killed ADDs.
    #[test]
    fn temp_names_are_stable_across_releases() {
        // FNV-1a's published test vectors.
        assert_eq!(fnv1a32("".bytes()), 0x811c_9dc5);
        assert_eq!(fnv1a32("a".bytes()), 0xe40c_292c);
        assert_eq!(fnv1a32("foobar".bytes()), 0xbf9c_f968);
        assert_eq!(temp_name(&env("c1", "net1")), "rtmp1b4d049d");
        assert_eq!(
            temp_name(&env(
                "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "net16"
            )),
            "rtmp64eee53d"
        );
        let name = temp_name(&env("c1", "net2"));
        assert_ne!(name, temp_name(&env("c1", "net1")));
        assert!(name.len() <= 15, "{name}");
    }
}
