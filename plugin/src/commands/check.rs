//! CHECK: the attachment is still what ADD built. Each difference is named in the error.

use crate::attach::ipam::Ipam;
use crate::attach::ipv6;
use crate::attach::ipvlan;
use crate::attach::rail;
use crate::attach::routing;
use crate::kernel::netlink::{InfoKind, IpVlanMode, Link, RouteSocket};
use crate::kernel::netns::Netns;
use crate::kernel::rdma::{GidType, Sysfs};
use crate::kernel::sysctl;
use crate::protocol::cni::{self, CniResult, Env, Roce};
use crate::protocol::config::NetConf;
use crate::protocol::error::{Error, Result};
use crate::protocol::sysctl_keys::Sysctl;

pub fn check(env: &Env, conf: &NetConf) -> Result<()> {
    cni::require_command(&conf.cni_version, "CHECK")?;
    let prev = conf.prev_result.as_ref().ok_or_else(|| {
        Error::InvalidConfig(
            "CHECK needs \"prevResult\": the runtime must pass the ADD result".into(),
        )
    })?;
    let prev = CniResult::parse(prev)
        .map_err(|e| Error::InvalidConfig(format!("\"prevResult\" cannot be read: {e}")))?;
    let netns = Netns::open(
        env.netns
            .as_deref()
            .expect("Env::parse requires CNI_NETNS for CHECK"),
    )
    .map_err(Error::netns)?;
    crate::commands::add::refuse_own(&netns)?;
    let host = RouteSocket::current()?;
    let pod = RouteSocket::open_in(&netns)?;
    let Some(rails) = &conf.rail.rails else {
        let (_, master) = rail::find(&conf.rail, &host, Error::CheckFailed)?;
        return check_child(env, conf, &netns, &pod, &prev, &conf.sysctls, &[master]);
    };
    // Every child of a multi-rail attachment, as ADD reported them; each on one of the rails.
    let on_node: Vec<Link> = rail::find_all(rails, &host, Error::CheckFailed)?
        .into_iter()
        .map(|(_, link)| link)
        .collect();
    let children: Vec<&str> = prev
        .interfaces
        .iter()
        .filter(|i| !i.sandbox.is_empty())
        .map(|i| i.name.as_str())
        .collect();
    if children.is_empty() {
        return Err(Error::CheckFailed(format!(
            "{} in {}: expected prevResult to list the attachment's children with their \
             sandbox, found interfaces {:?}",
            env.ifname,
            netns.path().display(),
            prev.interfaces.iter().map(|i| &i.name).collect::<Vec<_>>()
        )));
    }
    for name in children {
        let child = ipvlan::child_env(env, name);
        let sysctls = conf.sysctls_for(name)?;
        check_child(
            &child,
            conf,
            &netns,
            &pod,
            &prev.for_interface(name),
            &sysctls,
            &on_node,
        )?;
    }
    Ok(())
}

/// CHECK of one child: `env`'s CNI_IFNAME is its name, `prev` the part of prevResult that
/// concerns it, `sysctls` what ADD wrote for it, `rails` the rails it may be a child of.
fn check_child(
    env: &Env,
    conf: &NetConf,
    netns: &Netns,
    pod: &RouteSocket,
    prev: &CniResult,
    sysctls: &[Sysctl],
    rails: &[Link],
) -> Result<()> {
    let differs = |what: String| {
        Err(Error::CheckFailed(format!(
            "{} in {}: {what}",
            env.ifname,
            netns.path().display()
        )))
    };

    let Some(child) = pod.link_by_name(&env.ifname)? else {
        return differs("expected an IPvlan child, found no such interface".into());
    };
    if child.kind != Some(InfoKind::IpVlan) || child.ipvlan_mode != Some(IpVlanMode::L2) {
        return differs(format!(
            "expected an IPvlan L2 child, found kind {:?} mode {:?}",
            child.kind, child.ipvlan_mode
        ));
    }
    if !rails.iter().any(|m| child.parent == Some(m.index)) {
        return differs(format!(
            "expected a child of rail {}, found parent #{:?}",
            rails
                .iter()
                .map(|m| format!("{} (#{})", m.name, m.index))
                .collect::<Vec<_>>()
                .join(" or "),
            child.parent
        ));
    }

    let ours = prev
        .interfaces
        .iter()
        .position(|i| i.name == env.ifname && !i.sandbox.is_empty());
    let Some(iface) = ours.map(|i| &prev.interfaces[i]) else {
        return differs(format!(
            "expected prevResult to list interface {} with its sandbox, found interfaces {:?}",
            env.ifname,
            prev.interfaces.iter().map(|i| &i.name).collect::<Vec<_>>()
        ));
    };
    let sandbox = netns.path().display().to_string();
    if iface.sandbox != sandbox {
        return differs(format!(
            "expected the sandbox of prevResult's interface to be CNI_NETNS {sandbox}, found {}",
            iface.sandbox
        ));
    }
    if !iface.mac.is_empty() && !iface.mac.eq_ignore_ascii_case(&child.mac_string()) {
        return differs(format!(
            "expected MAC {} (prevResult), found {}",
            iface.mac,
            child.mac_string()
        ));
    }
    let addrs = pod.addresses(child.index)?;
    for ip in prev
        .ips
        .iter()
        .filter(|ip| ip.interface.is_none() || ip.interface == ours)
    {
        if !addrs.contains(&ip.address) {
            return differs(format!(
                "expected address {}, found {}",
                ip.address,
                listed(&addrs, "none")
            ));
        }
    }

    // On a SLAAC rail the router's advertisements may rewrite some of them (ipv6.rs).
    let wanted: Vec<_> = sysctls
        .iter()
        .filter(|s| ipv6::checks_sysctl(conf, s))
        .collect();
    // One thread into the pod reads them all (netns.rs); the first difference or failure, in
    // order, is the answer, as when each had its own thread.
    let read = netns.run(|| wanted.iter().map(|s| sysctl::read(s)).collect::<Vec<_>>())?;
    for (s, found) in wanted.iter().zip(read) {
        let found = found?;
        if found != s.value {
            return differs(format!(
                "expected sysctl {} = {}, found {found}",
                s.key, s.value
            ));
        }
    }

    let ips: Vec<_> = prev
        .ips
        .iter()
        .filter(|ip| ip.interface.is_none() || ip.interface == ours)
        .cloned()
        .collect();
    let plan = routing::plan(child.index, &ips, &prev.routes, conf.source_routing);
    if let Some(table) = plan.table {
        // One dump of both families' rules.
        let rules = pod.rules_in_table(table)?;
        for source in &plan.rules {
            if !rules.iter().any(|r| r.source == Some(*source)) {
                return differs(format!(
                    "expected rule \"from {source} lookup {table}\", found none"
                ));
            }
        }
    }
    for route in &plan.routes {
        let found = pod.table_destinations(route.table, route.dst.is_ipv6())?;
        if !found.contains(&route.dst) {
            return differs(format!(
                "expected a route to {} in table {}, found routes to {}",
                route.dst,
                route.table,
                listed(&found, "nothing")
            ));
        }
    }

    // libcni drops the `roce` extension from prevResult, so the ifalias written at ADD is
    // where the reported GID is kept.
    let alias = child.alias.clone().unwrap_or_default();
    let Some(roce) = Roce::from_ifalias(&alias) else {
        return differs(format!(
            "expected ifalias \"rdma_dev=... port=... gid_index=... gid=...\", found {alias:?}"
        ));
    };
    if let Some(what) = ipv6::check(conf, pod, child.index, roce.gid)? {
        return differs(what);
    }
    let port = crate::kernel::rdma::RdmaPort {
        device: roce.rdma_device.clone(),
        port: roce.port,
    };
    let table = netns
        .run(|| Sysfs::system().read_gid_table(&port))?
        .map_err(|e| {
            Error::io(
                format!(
                    "cannot read the GID table of {} port {}",
                    port.device, port.port
                ),
                e,
            )
        })?;
    let at_index = table.slots.iter().find(|s| s.index == roce.gid_index);
    match at_index {
        Some(slot) if slot.gid == Some(roce.gid) && slot.gid_type == Some(GidType::RoceV2) => {}
        other => {
            return differs(format!(
                "expected RoCE v2 GID {} at index {} of {} port {}, found {}",
                roce.gid,
                roce.gid_index,
                port.device,
                port.port,
                other.map_or_else(|| "no such slot".to_owned(), |slot| slot.to_string())
            ))
        }
    }

    if let Some(ipam) = Ipam::find(env, conf)? {
        ipam.check(prev)?;
    }
    Ok(())
}

/// `items` joined with ", " for a message, or `none` when there are none.
fn listed<T: std::fmt::Display>(items: &[T], none: &str) -> String {
    if items.is_empty() {
        return none.to_string();
    }
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
