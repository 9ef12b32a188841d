//! ADD: validate everything, then build the attachment step by step, pushing an undo for each
//! change; any failure takes back what was done, newest first.

use std::net::IpAddr;

use serde_json::Value;

use crate::attach::budget::Budget;
use crate::attach::device_info;
use crate::attach::failpoint::failpoint;
use crate::attach::ipam::Ipam;
use crate::attach::ipv6;
use crate::attach::ipvlan;
use crate::attach::rail;
use crate::attach::routing::{self, RULE_PRIORITY};
use crate::attach::undo::UndoStack;
use crate::kernel::lock;
use crate::kernel::netlink::{InfoKind, Link, RouteSocket};
use crate::kernel::netns::Netns;
use crate::kernel::rdma::{self, GidType, RdmaPort, Sysfs, WaitError};
use crate::kernel::sysctl;
use crate::protocol::cni::{CniResult, Env, Interface, Roce};
use crate::protocol::config::NetConf;
use crate::protocol::error::{Error, FailedUndo, Result};

/// A change made by ADD, and so something a failed ADD must take back.
#[derive(Debug)]
enum Step {
    Link {
        index: u32,
    },
    Ipam,
    /// A pod-wide sysctl and the value it had before, written for the child `child`.
    Sysctl {
        saved: sysctl::Saved,
        child: u32,
    },
    Rule {
        source: IpAddr,
        table: u32,
    },
    DeviceInfo(device_info::Written),
}

impl Step {
    /// The failpoint that makes this step's undo fail (failpoint.rs).
    #[cfg(feature = "failpoints")]
    fn undo_failpoint(&self) -> &'static str {
        match self {
            Step::Link { .. } => "undo-link",
            Step::Ipam => "undo-ipam",
            Step::Sysctl { .. } => "undo-sysctl",
            Step::Rule { .. } => "undo-rule",
            Step::DeviceInfo(_) => "undo-device-info",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Link { index } => write!(f, "the IPvlan child (#{index}) in the pod"),
            Step::Ipam => write!(f, "the IPAM allocation"),
            Step::Sysctl { saved, .. } => write!(
                f,
                "pod-wide sysctl {} (to restore to {:?})",
                saved.old.key, saved.old.value
            ),
            Step::Rule { source, table } => {
                write!(f, "the rule \"from {source} lookup {table}\" in the pod")
            }
            Step::DeviceInfo(written) => write!(f, "{written}"),
        }
    }
}

/// What ADD checked before changing anything.
struct Ready<'a> {
    env: &'a Env,
    conf: &'a NetConf,
    netns: Netns,
    host: RouteSocket,
    pod: RouteSocket,
    master: Link,
    port: RdmaPort,
    ipam: Option<Ipam<'a>>,
    budget: Budget,
}

pub fn add(env: &Env, conf: &NetConf) -> Result<Value> {
    let budget = Budget::start(conf.timeouts.total);
    let ready = validate(env, conf, budget)?;
    tracing::debug!(rdma = %ready.port, "validated");
    // Held until the ADD has finished or undone everything (lock.rs).
    let _attachment = lock::acquire(
        &lock::Key::attachment(&env.container_id, &env.ifname),
        budget.remaining_at(std::time::Instant::now()),
    )?;
    let mut undo = UndoStack::default();
    match build(&ready, &mut undo) {
        Ok(doc) => Ok(doc),
        Err(err) => {
            tracing::warn!(error = %err, steps = undo.len(), "ADD failed; undoing");
            let failed_undo = rollback(&ready, undo);
            if failed_undo.is_empty() {
                Err(err)
            } else {
                Err(Error::Unwound {
                    cause: Box::new(err),
                    failed_undo,
                })
            }
        }
    }
}

fn validate<'a>(env: &'a Env, conf: &'a NetConf, budget: Budget) -> Result<Ready<'a>> {
    refuse_prev_result(conf)?;
    let netns_path = env
        .netns
        .as_deref()
        .expect("Env::parse requires CNI_NETNS for ADD");
    let netns = Netns::open(netns_path)?;
    netns.refuse_own()?;
    let host = RouteSocket::current()?;
    let (rail, master) = rail::find(&conf.rail, &host, Error::Rail)?;
    if !master.admin_up {
        return Err(Error::Rail(format!(
            "rail {} is down: expected it up before pods attach; bring it up (ip link set {} up) \
             or check the node's network configuration",
            master.name, master.name
        )));
    }
    if let Some(mtu) = conf.mtu {
        if mtu > master.mtu {
            return Err(Error::InvalidConfig(format!(
                "\"mtu\" {mtu} is larger than rail {}'s MTU {}: an IPvlan child cannot exceed its \
                 rail; lower \"mtu\" or leave it out to inherit {}",
                master.name, master.mtu, master.mtu
            )));
        }
    }
    let port = rail::rdma_port(&rail, conf.rdma.port, &master)?;
    require_shared_netns_mode(&port, &master)?;
    let pod = RouteSocket::open_in(&netns)?;
    if let Some(existing) = pod.link_by_name(&env.ifname)? {
        return Err(Error::InvalidEnv(format!(
            "the pod already has an interface named {} (#{}): expected CNI_IFNAME to be free; is \
             this a second ADD for the same attachment?",
            env.ifname, existing.index
        )));
    }
    let ipam = Ipam::find(env, conf)?;
    Ok(Ready {
        env,
        conf,
        netns,
        host,
        pod,
        master,
        port,
        ipam,
        budget,
    })
}

/// roce-ipvlan creates the attachment's interface, so it must be the first plugin of its list
/// (tuning, sbr and other meta plugins go after it). A `prevResult` on ADD means a plugin ran
/// before it; its interfaces and addresses would have to be either dropped from the result
/// (the runtime would lose them silently) or merged into it, and merging is not sound here: the
/// source rules, the routing table and the GID this plugin reports concern only its own child,
/// and an `ips[].interface` index of the other plugin would point at the wrong interface. So
/// ADD refuses it (7). An empty `prevResult` (no interfaces, addresses, routes or DNS) carries
/// nothing to lose and is accepted.
fn refuse_prev_result(conf: &NetConf) -> Result<()> {
    let Some(prev) = &conf.prev_result else {
        return Ok(());
    };
    let non_empty = |key: &str| match prev.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    };
    let carried: Vec<&str> = ["interfaces", "ips", "routes", "dns"]
        .into_iter()
        .filter(|k| non_empty(k))
        .collect();
    if carried.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidConfig(format!(
        "ADD got a \"prevResult\" with {}: another plugin ran before roce-ipvlan in this \
         network's plugin list. roce-ipvlan creates the interface and must come first; put \
         other plugins (tuning, sbr, …) after it, or give the other interface its own network",
        carried.join(", ")
    )))
}

/// In exclusive mode each RDMA device belongs to one netns, and the rail's stays in the host's:
/// the pod would see no RDMA device, so the GID wait could only time out. A kernel too old to
/// report the mode (before 5.2) has no exclusive mode; there the read fails and ADD goes on.
fn require_shared_netns_mode(port: &RdmaPort, master: &Link) -> Result<()> {
    match rdma::netns_mode() {
        Ok(rdma::NetnsMode::Shared) => Ok(()),
        Ok(rdma::NetnsMode::Exclusive) => Err(Error::NoRdmaPort(format!(
            "the RDMA subsystem is in exclusive netns mode (`rdma system show netns`), expected \
             shared: in exclusive mode an RDMA device belongs to one network namespace, and {}, \
             the device of rail {}, stays in the host's, so the pod would see no RDMA device and \
             no GID. roce-ipvlan shares a rail's device between pods, which needs shared mode: \
             set the ib_core module parameter netns_mode=1 (and reboot), or run `rdma system set \
             netns shared` while no other network namespace exists; or give pods SR-IOV VFs \
             with the RDMA CNI, which moves each VF's device into its pod",
            port.device, master.name
        ))),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the RDMA netns mode; assuming shared");
            Ok(())
        }
    }
}

fn build(r: &Ready<'_>, undo: &mut UndoStack<Step>) -> Result<Value> {
    let (env, conf, pod) = (r.env, r.conf, &r.pod);
    let child = ipvlan::create(r.env, &r.host, &r.pod, &r.netns, &r.master, r.conf.mtu)?;
    undo.push(Step::Link { index: child.index });
    tracing::debug!(index = child.index, "child created");
    failpoint!("after-child");

    let mut result = match &r.ipam {
        Some(ipam) => {
            // Pushed before the call: an IPAM plugin that allocated and then printed something
            // unusable (not JSON, no address) or failed half-way still gets its DEL, which the
            // spec requires to be harmless for an allocation that does not exist.
            undo.push(Step::Ipam);
            ipam.add(r.budget.share(conf.timeouts.ipam))?
        }
        None => CniResult::default(),
    };
    tracing::debug!(ips = result.ips.len(), "IPAM done");
    failpoint!("after-ipam");

    let mut sysctls = conf.sysctls.clone();
    sysctls.extend(ipv6::sysctls(conf, &result.ips, &env.ifname)?);
    // Saving and writing the pod-wide values is one step for the other ADDs into this pod,
    // which may be undoing theirs (lock.rs); the child already exists, so an undo that runs
    // after this step sees it.
    let held = if sysctls.iter().any(|s| s.pod_wide) {
        Some(pod_lock(r)?)
    } else {
        None
    };
    let (saved, written) = r.netns.run(|| sysctl::apply(&sysctls))?;
    drop(held);
    for saved in saved {
        undo.push(Step::Sysctl {
            saved,
            child: child.index,
        });
    }
    written?;
    failpoint!("after-sysctls");

    for ip in &result.ips {
        pod.add_address(child.index, ip.address)?;
    }
    failpoint!("after-addresses");
    // Subscribed before the link comes up, so that no address event is missed.
    let slaac = ipv6::subscribe(&r.netns, conf)?;
    pod.set_up(child.index)?;
    tracing::debug!("sysctls set, addresses added, child up");
    failpoint!("after-up");

    let plan = routing::plan(
        child.index,
        &result.ips,
        &result.routes,
        conf.source_routing,
    );
    install_routes(r, undo, child.index, &plan)?;
    tracing::debug!(
        routes = plan.routes.len(),
        rules = plan.rules.len(),
        "routes installed"
    );
    failpoint!("after-rules");

    let gid_addr = match slaac {
        Some(slaac) => {
            let done = ipv6::configure(
                slaac,
                pod,
                &child,
                &r.master.name,
                conf,
                r.budget,
                &mut result,
            )?;
            install_routes(r, undo, child.index, &done.routes)?;
            done.gid_addr
        }
        None => result
            .ips
            .iter()
            .map(|ip| ip.address.ip())
            .find(|ip| ip.is_ipv4())
            .or_else(|| result.ips.first().map(|ip| ip.address.ip()))
            .ok_or_else(|| Error::ipam("IPAM returned no address"))?,
    };

    let roce = wait_for_gid(r, gid_addr)?;
    tracing::debug!(gid_index = roce.gid_index, "GID visible in the pod");
    failpoint!("after-gid");
    if !r.netns.still_at_path() {
        // The runtime deleted the pod while ADD ran: our fd kept the namespace alive, so every
        // step worked, but nobody can reach the attachment and the IPAM address would leak
        // until a DEL that a runtime tearing the pod down may already have sent.
        return Err(Error::Netns(format!(
            "the pod's network namespace {} was deleted while ADD ran: expected it to outlive the call; everything done for this attachment is undone",
            r.netns.path().display()
        )));
    }
    pod.set_alias(child.index, &roce.ifalias())?;
    failpoint!("after-alias");
    if let (Some(path), Some(pci)) = (&conf.device_info_file, &conf.rail.device_id) {
        if let Some(written) = device_info::write(path, pci, &roce.rdma_device)? {
            undo.push(Step::DeviceInfo(written));
        }
    }
    failpoint!("after-device-info");

    result.interfaces = vec![Interface {
        name: env.ifname.clone(),
        mac: child.mac_string(),
        mtu: Some(child.mtu),
        sandbox: r.netns.path().display().to_string(),
    }];
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    tracing::info!(gid_index = roce.gid_index, gid = %roce.gid, device = %roce.rdma_device, "attachment ready");
    Ok(result.to_json(&conf.cni_version, Some(&roce)))
}

/// Waits, reading sysfs from inside the pod's namespace (as the workload will), until the RoCE
/// v2 GID of the child's address is in the port's table.
fn wait_for_gid(r: &Ready<'_>, addr: IpAddr) -> Result<Roce> {
    let gid = rdma::roce_gid(addr);
    let share = r.budget.share(r.conf.rdma.gid_timeout);
    let timeout = share.limit;
    let port = r.port.clone();
    let waited = r
        .netns
        .run(move || rdma::wait_for_gid(&Sysfs::system(), &port, gid, timeout))?;
    match waited {
        Ok(index) => Ok(Roce {
            rdma_device: r.port.device.clone(),
            port: r.port.port,
            gid_index: index,
            gid,
            gid_type: GidType::RoceV2.to_string(),
        }),
        Err(WaitError::Timeout { last }) => Err(Error::GidTimeout(format!(
            "the RoCE v2 GID {gid} of {} ({addr}) did not appear on {} port {} within {}, \
             reading /sys/class/infiniband from inside the pod's network namespace; visible there: \
             {}. Likely causes: {} is not the RDMA device of rail {} (check `rdma link show`), \
             the RDMA subsystem is in exclusive netns mode (`rdma system show`), or the NIC \
             driver does not add GIDs for IPvlan children",
            r.env.ifname,
            r.port.device,
            r.port.port,
            share.describe(r.conf.timeouts.total),
            last.map(|t| t.summary())
                .unwrap_or_else(|| "nothing could be read".into()),
            r.port.device,
            r.master.name,
        ))),
        Err(WaitError::Io(e)) => Err(Error::io(
            format!(
                "cannot read the GID table of {} port {}",
                r.port.device, r.port.port
            ),
            e,
        )),
    }
}

fn install_routes(
    r: &Ready<'_>,
    undo: &mut UndoStack<Step>,
    dev: u32,
    plan: &routing::Plan,
) -> Result<()> {
    for route in &plan.routes {
        r.pod
            .add_route(route.table, route.dst, route.gw, dev, route.src)?;
    }
    if let Some(table) = plan.table {
        for source in &plan.rules {
            r.pod.add_rule(*source, table, RULE_PRIORITY)?;
            undo.push(Step::Rule {
                source: *source,
                table,
            });
        }
    }
    Ok(())
}

fn pod_lock(r: &Ready<'_>) -> Result<lock::Held> {
    let (dev, ino) = r.netns.id()?;
    lock::acquire(
        &lock::Key::pod(dev, ino),
        r.budget.remaining_at(std::time::Instant::now()),
    )
}

/// Puts a pod-wide sysctl back, unless something else relies on the value this ADD wrote:
/// another IPvlan child in the pod (a concurrent ADD that found the value already there, or an
/// attachment made before), or a change since. Under the pod lock, so that no other ADD's
/// sysctl step runs in between (lock.rs).
fn restore_pod_wide(r: &Ready<'_>, saved: &sysctl::Saved, child: u32) -> Result<()> {
    let _pod = pod_lock(r)?;
    let others: Vec<String> = r
        .pod
        .links()?
        .into_iter()
        .filter(|l| l.index != child && l.kind == Some(InfoKind::IpVlan))
        .map(|l| l.name)
        .collect();
    if !others.is_empty() {
        tracing::info!(sysctl = %saved.old.key, ?others, "not restoring a pod-wide sysctl: other IPvlan children of the pod rely on it");
        return Ok(());
    }
    if !saved.still_ours()? {
        tracing::info!(sysctl = %saved.old.key, "not restoring a pod-wide sysctl: it was changed since ADD wrote it");
        return Ok(());
    }
    saved.restore()
}

/// Takes back every step, newest first, going on past a step that fails; returns those that
/// failed.
fn rollback(r: &Ready<'_>, undo: UndoStack<Step>) -> Vec<FailedUndo> {
    let mut failed = Vec::new();
    for step in undo.unwind() {
        let outcome = undo_step(r, &step);
        if let Err(e) = outcome {
            tracing::error!(?step, error = %e, "could not undo a step of the failed ADD");
            failed.push(FailedUndo {
                step: step.to_string(),
                error: e,
            });
        }
    }
    failed
}

/// Takes back one step of a failed ADD.
fn undo_step(r: &Ready<'_>, step: &Step) -> Result<()> {
    failpoint!(step.undo_failpoint());
    match step {
        Step::DeviceInfo(written) => written.undo(),
        Step::Rule { source, table } => r.pod.delete_rules_from(*source, *table),
        Step::Sysctl { saved, child } => restore_pod_wide(r, saved, *child),
        Step::Ipam => match &r.ipam {
            Some(ipam) => ipam.del(None),
            None => Ok(()),
        },
        Step::Link { index } => r.pod.delete_link(*index),
    }
}
