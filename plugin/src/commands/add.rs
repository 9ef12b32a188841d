//! ADD: validate everything, then build the attachment step by step, pushing an undo for each
//! change; any failure takes back what was done, newest first.

use std::net::IpAddr;

use serde_json::Value;

use crate::attach::budget::Budget;
use crate::attach::device_info;
use crate::attach::failpoint::failpoint;
use crate::attach::gid_capacity;
use crate::attach::ipam::Ipam;
use crate::attach::ipv6;
use crate::attach::ipvlan;
use crate::attach::pod_record;
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
use crate::protocol::sysctl_keys::Sysctl;

/// A change made by ADD, and so something a failed ADD must take back.
#[derive(Debug)]
enum Step {
    Link {
        index: u32,
    },
    Ipam,
    /// A pod-wide sysctl and the value it had before.
    Sysctl {
        saved: sysctl::Saved,
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
struct Checked<'a> {
    conf: &'a NetConf,
    netns: Netns,
    host: RouteSocket,
    pod: RouteSocket,
    /// One per child, in rail order: one for `master` and the other single-rail inputs, one
    /// per matching rail for `rails`.
    rails: Vec<CheckedRail>,
    budget: Budget,
}

/// One rail of the attachment, checked.
struct CheckedRail {
    /// The attachment's environment with CNI_IFNAME the child's name (ipvlan::child_name for
    /// `rails`): what the child is created as and what its IPAM calls carry.
    env: Env,
    master: Link,
    port: RdmaPort,
    /// The sysctls written for this child; the pod-wide ones only by the first child of a
    /// multi-rail attachment (one save and one restore for the attachment).
    sysctls: Vec<Sysctl>,
    /// For `rails`: the attachment's CNI_IFNAME, added to the child's ifalias (ipvlan.rs).
    tie: Option<String>,
    /// GID table entries per address on this rail's port (gid_capacity.rs).
    gid_types: usize,
}

/// What one rail's build left: its undo steps, its socket in the pod (for them), and either
/// its part of the result or the error that stopped it.
struct RailRun {
    pod: Option<RouteSocket>,
    undo: UndoStack<Step>,
    outcome: Result<Built>,
}

/// One finished child.
struct Built {
    result: CniResult,
    interface: Interface,
    roce: Roce,
}

pub fn add(env: &Env, conf: &NetConf) -> Result<Value> {
    let budget = Budget::start(conf.timeouts.total);
    let ready = validate(env, conf, budget)?;
    tracing::debug!(rails = ready.rails.len(), "validated");
    // Held until the ADD has finished or undone everything (lock.rs).
    let _attachment = lock::acquire(
        &lock::Key::attachment(&env.container_id, &env.ifname),
        budget.remaining_at(std::time::Instant::now()),
    )?;
    let runs = build_all(&ready);
    if runs.iter().all(|run| run.outcome.is_ok()) {
        record(env, &ready, &runs);
        return Ok(result(&ready, runs));
    }
    // The first failing rail's error is the ADD's; the others are logged.
    let mut first = None;
    let mut undos = Vec::with_capacity(runs.len());
    for (rail, run) in ready.rails.iter().zip(runs) {
        if let Err(e) = run.outcome {
            let e = capacity_cause(rail, e);
            let e = if ready.rails.len() > 1 {
                Error::OnRail {
                    rail: rail.master.name.clone(),
                    child: rail.env.ifname.clone(),
                    cause: Box::new(e),
                }
            } else {
                e
            };
            match first {
                None => first = Some(e),
                Some(_) => tracing::warn!(error = %e, "another rail failed too"),
            }
        }
        undos.push((rail, run.pod, run.undo));
    }
    let err = first.expect("some rail failed");
    let steps: usize = undos.iter().map(|(_, _, undo)| undo.len()).sum();
    tracing::warn!(error = %err, steps, "ADD failed; undoing every rail");
    let failed_undo = rollback(&ready, undos);
    if failed_undo.is_empty() {
        Err(err)
    } else {
        Err(Error::Unwound {
            cause: Box::new(err),
            failed_undo,
        })
    }
}

fn validate<'a>(env: &'a Env, conf: &'a NetConf, budget: Budget) -> Result<Checked<'a>> {
    refuse_prev_result(conf)?;
    if let Some(path) = &conf.device_info_file {
        device_info::check_attachment(path, &env.container_id, &env.ifname)?;
    }
    let netns_path = env
        .netns
        .as_deref()
        .expect("Env::parse requires CNI_NETNS for ADD");
    let netns = Netns::open(netns_path).map_err(Error::netns)?;
    refuse_own(&netns)?;
    let host = RouteSocket::current()?;
    let found = match &conf.rail.rails {
        Some(rails) => rail::find_all(rails, &host, Error::Rail)?,
        None => vec![rail::find(&conf.rail, &host, Error::Rail)?],
    };
    let multi = conf.multi_rail();
    for (_, master) in &found {
        check_master(conf, master)?;
    }
    let ports = rail::rdma_ports(&found, conf.rdma.port)?;
    let gid_types = check_capacity(conf, &found, &ports)?;
    let mut rails = Vec::with_capacity(found.len());
    for (i, (((_, master), port), gid_types)) in
        found.into_iter().zip(ports).zip(gid_types).enumerate()
    {
        if i == 0 {
            require_shared_netns_mode(&port, &master)?;
        }
        let (env, sysctls, tie) = if multi {
            let name = ipvlan::child_name(&env.ifname, i);
            let mut sysctls = conf.sysctls_for(&name)?;
            if i > 0 {
                sysctls.retain(|s| !s.pod_wide);
            }
            (
                ipvlan::child_env(env, &name),
                sysctls,
                Some(env.ifname.clone()),
            )
        } else {
            (env.clone(), conf.sysctls.clone(), None)
        };
        rails.push(CheckedRail {
            env,
            master,
            port,
            sysctls,
            tie,
            gid_types,
        });
    }
    let pod = RouteSocket::open_in(&netns)?;
    if multi {
        let names: Vec<String> = pod.links()?.into_iter().map(|l| l.name).collect();
        if let Some(taken) = rails.iter().find(|r| names.contains(&r.env.ifname)) {
            return Err(Error::InvalidEnv(format!(
                "the pod already has an interface named {}, the name of a child of attachment \
                 {} (children are named {}, {}, ...): expected the names free; is this a \
                 second ADD for the same attachment, or does another attachment of the pod use \
                 such a name?",
                taken.env.ifname,
                env.ifname,
                ipvlan::child_name(&env.ifname, 0),
                ipvlan::child_name(&env.ifname, 1)
            )));
        }
    } else if let Some(existing) = pod.link_by_name(&env.ifname)? {
        return Err(Error::InvalidEnv(format!(
            "the pod already has an interface named {} (#{}): expected CNI_IFNAME to be free; is \
             this a second ADD for the same attachment?",
            env.ifname, existing.index
        )));
    }
    // Every child's IPAM plugin is the same binary: found once, before anything changes.
    Ipam::find(env, conf)?;
    Ok(Checked {
        conf,
        netns,
        host,
        pod,
        rails,
        budget,
    })
}

/// Every rail's GID table has room for the child's entries (gid_capacity.rs): refused with 110
/// before anything changes. Returns each rail's entries per address. A table that cannot be
/// read is not judged here: the GID wait reads it again and says what failed.
fn check_capacity(
    conf: &NetConf,
    found: &[(rail::Rail, Link)],
    ports: &[RdmaPort],
) -> Result<Vec<usize>> {
    let records = gid_capacity::records();
    let sysfs = Sysfs::system();
    let mut types = Vec::with_capacity(ports.len());
    for ((_, master), port) in found.iter().zip(ports) {
        match gid_capacity::measure(&sysfs, port, &records) {
            Ok(usage) => {
                let need = usage.types * gid_capacity::addresses_needed(conf);
                tracing::debug!(rail = %master.name, used = usage.used(), slots = usage.slots, need, "GID table counted");
                gid_capacity::check(&master.name, &usage, need)?;
                types.push(usage.types);
            }
            Err(e) => {
                tracing::warn!(rail = %master.name, %port, error = %e, "cannot count the GID table; not checking its room");
                types.push(2);
            }
        }
    }
    Ok(types)
}

/// A GID wait that timed out on a table with no room left failed for that reason: another ADD
/// took the last slots since the check, or what the node cannot see filled it (gid_capacity.rs).
fn capacity_cause(rail: &CheckedRail, err: Error) -> Error {
    if !matches!(err, Error::GidTimeout(_)) {
        return err;
    }
    match gid_capacity::is_full(&rail.port) {
        Some(usage) => {
            tracing::warn!(error = %err, "the GID wait timed out on a full table");
            gid_capacity::full(&rail.master.name, &usage, usage.types)
        }
        None => err,
    }
}

/// A rail the child can be made on: up, and with room for the configured MTU.
fn check_master(conf: &NetConf, master: &Link) -> Result<()> {
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
    Ok(())
}

/// Builds every rail's child: one rail on this thread with ADD's sockets; several at once, each
/// on a thread of its own with sockets of its own (a netlink socket answers one conversation at
/// a time), so that their IPAM calls, sysctls, routing and GID, RA and DAD waits overlap. All
/// share the one deadline of `timeouts.totalMs`. A rail whose thread cannot start fails, and
/// with it the ADD.
fn build_all(r: &Checked<'_>) -> Vec<RailRun> {
    if let [rail] = r.rails.as_slice() {
        let mut undo = UndoStack::default();
        let outcome = build(r, rail, &r.host, &r.pod, false, &mut undo);
        return vec![RailRun {
            pod: None,
            undo,
            outcome,
        }];
    }
    let parent = tracing::Span::current();
    std::thread::scope(|scope| {
        let handles: Vec<_> = r
            .rails
            .iter()
            .map(|rail| {
                let parent = parent.clone();
                std::thread::Builder::new()
                    .name(format!("rail-{}", rail.master.name))
                    .spawn_scoped(scope, move || {
                        let span = tracing::info_span!(parent: &parent, "rail", rail = %rail.master.name, child = %rail.env.ifname);
                        let _entered = span.enter();
                        build_rail(r, rail)
                    })
                    .map_err(|e| {
                        Error::io(
                            format!(
                                "cannot start a thread for rail {} (a pids limit of the plugin's \
                                 cgroup?)",
                                rail.master.name
                            ),
                            e,
                        )
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(e) => RailRun {
                    pod: None,
                    undo: UndoStack::default(),
                    outcome: Err(e),
                },
            })
            .collect()
    })
}

/// One rail of a multi-rail ADD, on its own thread with its own sockets.
fn build_rail(r: &Checked<'_>, rail: &CheckedRail) -> RailRun {
    let mut undo = UndoStack::default();
    let sockets =
        RouteSocket::current().and_then(|host| Ok((host, RouteSocket::open_in(&r.netns)?)));
    match sockets {
        Ok((host, pod)) => {
            let outcome = build(r, rail, &host, &pod, true, &mut undo);
            RailRun {
                pod: Some(pod),
                undo,
                outcome,
            }
        }
        Err(e) => RailRun {
            pod: None,
            undo,
            outcome: Err(e),
        },
    }
}

/// The result of a finished ADD: one interface per child, each child's addresses pointing at
/// it, and the `roce` data (one object for one rail; a list, in interface order, for `rails`).
fn result(r: &Checked<'_>, runs: Vec<RailRun>) -> Value {
    let mut built: Vec<Built> = runs
        .into_iter()
        .map(|run| {
            run.outcome
                .expect("result is called when every rail succeeded")
        })
        .collect();
    if !r.conf.multi_rail() {
        let Built {
            mut result,
            interface,
            roce,
        } = built.remove(0);
        result.interfaces = vec![interface];
        for ip in &mut result.ips {
            ip.interface = Some(0);
        }
        return result.to_json(&r.conf.cni_version, Some(&roce));
    }
    let mut merged = CniResult::default();
    let mut roces = Vec::with_capacity(built.len());
    for (i, b) in built.into_iter().enumerate() {
        merged.interfaces.push(b.interface);
        merged.ips.extend(b.result.ips.into_iter().map(|mut ip| {
            ip.interface = Some(i);
            ip
        }));
        // The routes of the IPAM section apply to every child; listed once.
        for route in b.result.routes {
            if !merged.routes.contains(&route) {
                merged.routes.push(route);
            }
        }
        if merged.dns.is_null() {
            merged.dns = b.result.dns;
        }
        roces.push(b.roce);
    }
    merged.to_json_rails(&r.conf.cni_version, &roces)
}

/// Leaves the attachment record for the installer to publish in the pod's object
/// (pod_record.rs), when the runtime named a Kubernetes pod. The last step of a successful
/// ADD, after which nothing can fail, so no failed ADD leaves one; and a record that cannot be
/// written fails nothing: it is what the operator sees, not what the pod needs.
fn record(env: &Env, r: &Checked<'_>, runs: &[RailRun]) {
    let args = std::env::var("CNI_ARGS").unwrap_or_default();
    let Some(pod) = pod_record::PodRef::from_cni_args(&args) else {
        tracing::debug!("no Kubernetes pod in CNI_ARGS: no attachment record");
        return;
    };
    let rails = r
        .rails
        .iter()
        .zip(runs)
        .filter_map(|(rail, run)| {
            let built = run.outcome.as_ref().ok()?;
            let ips = &built.result.ips;
            let ipv6_on = r.conf.ipv6_link_local || ips.iter().any(|ip| ip.address.is_ipv6());
            Some(pod_record::Rail {
                interface: rail.env.ifname.clone(),
                rail: rail.master.name.clone(),
                device: built.roce.rdma_device.clone(),
                port: built.roce.port,
                gid_index: built.roce.gid_index,
                gid: pod_record::gid_text(built.roce.gid),
                addresses: ips.iter().map(|ip| ip.address).collect(),
                gid_slots: u32::try_from(gid_capacity::slots_taken(
                    rail.gid_types,
                    ips.len(),
                    ipv6_on,
                ))
                .ok(),
            })
        })
        .collect();
    let record = pod_record::Record {
        version: pod_record::VERSION,
        network: r.conf.name.clone(),
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        pod,
        rails,
        netns: env.netns.as_ref().map(|p| p.display().to_string()),
    };
    match pod_record::write(std::path::Path::new(pod_record::DIR), &record) {
        Ok(path) => {
            tracing::info!(path = %path.display(), pod = %record.pod, "attachment record written")
        }
        Err(e) => tracing::warn!(
            error = %e,
            "cannot write the attachment record under {}: the pod's roce-ipvlan.io/gids \
             annotation will not list this attachment (the attachment itself is fine)",
            pod_record::DIR
        ),
    }
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

/// Builds one rail's child, pushing an undo for each change. `on_own_thread`: this runs on a
/// thread spawned for this rail alone (several rails), which may enter the pod for good.
fn build(
    r: &Checked<'_>,
    rail: &CheckedRail,
    host: &RouteSocket,
    pod: &RouteSocket,
    on_own_thread: bool,
    undo: &mut UndoStack<Step>,
) -> Result<Built> {
    let (env, conf) = (&rail.env, r.conf);
    let child = ipvlan::create(env, host, pod, &r.netns, &rail.master, conf.mtu)?;
    undo.push(Step::Link { index: child.index });
    tracing::debug!(index = child.index, "child created");
    failpoint!("after-child");

    let mut result = match Ipam::find(env, conf)? {
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
    if on_own_thread {
        // The rest is pod-side: a rail's own thread enters the pod once instead of starting a
        // thread for its sysctls, its address events and its GID reads (netns.rs). The IPAM
        // call above stays in the runtime's namespace, as CNI has it; undo runs elsewhere.
        r.netns.enter_for_rest_of_thread()?;
    }

    let mut sysctls = rail.sysctls.clone();
    sysctls.extend(ipv6::sysctls(conf, &result.ips, &env.ifname)?);
    // Saving and writing the pod-wide values is one step for the other ADDs into this pod,
    // which may be undoing theirs (lock.rs); the child already exists, so an undo that runs
    // after this step sees it.
    let held = if sysctls.iter().any(|s| s.pod_wide) {
        Some(pod_lock(
            r,
            r.budget.remaining_at(std::time::Instant::now()),
        )?)
    } else {
        None
    };
    let (saved, written) = r.netns.run(|| sysctl::apply(&sysctls))?;
    drop(held);
    for saved in saved {
        undo.push(Step::Sysctl { saved });
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
    install_routes(pod, undo, child.index, &plan)?;
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
                &rail.master.name,
                conf,
                r.budget,
                &mut result,
            )?;
            tracing::debug!(address = %done.gid_addr, "SLAAC address ready");
            install_routes(pod, undo, child.index, &done.routes)?;
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

    let roce = wait_for_gid(r, rail, gid_addr)?;
    tracing::debug!(gid_index = roce.gid_index, "GID visible in the pod");
    failpoint!("after-gid");
    if !r.netns.still_at_path() {
        // The runtime deleted the pod while ADD ran: our fd kept the namespace alive, so every
        // step worked, but nobody can reach the attachment and the IPAM address would leak
        // until a DEL that a runtime tearing the pod down may already have sent.
        return Err(Error::Netns(format!(
            "the pod's network namespace {} was deleted while ADD ran: expected it to outlive \
             the call; everything done for this attachment is undone",
            r.netns.path().display()
        )));
    }
    let alias = match &rail.tie {
        Some(ifname) => format!("{} {}={ifname}", roce.ifalias(), ipvlan::ATTACHMENT_KEY),
        None => roce.ifalias(),
    };
    pod.set_alias(child.index, &alias)?;
    failpoint!("after-alias");
    if let (Some(path), Some(pci)) = (&conf.device_info_file, &conf.rail.device_id) {
        if let Some(written) = device_info::write(path, pci, &roce.rdma_device)? {
            undo.push(Step::DeviceInfo(written));
        }
    }
    failpoint!("after-device-info");

    tracing::info!(gid_index = roce.gid_index, gid = %roce.gid, device = %roce.rdma_device, "attachment ready");
    Ok(Built {
        result,
        interface: Interface {
            name: env.ifname.clone(),
            mac: child.mac_string(),
            mtu: Some(child.mtu),
            sandbox: r.netns.path().display().to_string(),
        },
        roce,
    })
}

/// Waits, reading sysfs from inside the pod's namespace (as the workload will), until the RoCE
/// v2 GID of the child's address is in the port's table.
fn wait_for_gid(r: &Checked<'_>, rail: &CheckedRail, addr: IpAddr) -> Result<Roce> {
    let gid = rdma::roce_gid(addr);
    let share = r.budget.share(r.conf.rdma.gid_timeout);
    let timeout = share.limit;
    let port = rail.port.clone();
    let waited = r
        .netns
        .run(move || rdma::wait_for_gid(&Sysfs::system(), &port, gid, timeout))?;
    match waited {
        Ok(index) => Ok(Roce {
            rdma_device: rail.port.device.clone(),
            port: rail.port.port,
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
            rail.env.ifname,
            rail.port.device,
            rail.port.port,
            share.describe(r.conf.timeouts.total),
            last.map(|t| t.summary())
                .unwrap_or_else(|| "nothing could be read".into()),
            rail.port.device,
            rail.master.name,
        ))),
        Err(WaitError::Io(e)) => Err(Error::io(
            format!(
                "cannot read the GID table of {} port {}",
                rail.port.device, rail.port.port
            ),
            e,
        )),
    }
}

fn install_routes(
    pod: &RouteSocket,
    undo: &mut UndoStack<Step>,
    dev: u32,
    plan: &routing::Plan,
) -> Result<()> {
    for route in &plan.routes {
        pod.add_route(route.table, route.dst, route.gw, dev, route.src)?;
    }
    if let Some(table) = plan.table {
        for source in &plan.rules {
            pod.add_rule(*source, table, RULE_PRIORITY)?;
            undo.push(Step::Rule {
                source: *source,
                table,
            });
        }
    }
    Ok(())
}

/// Refuses the plugin's own namespace as a pod's (ADD and CHECK; DEL skips the pod side).
pub(crate) fn refuse_own(netns: &Netns) -> Result<()> {
    let own = netns.is_own().map_err(|e| {
        Error::io(
            "cannot compare CNI_NETNS with the plugin's own network namespace",
            e,
        )
    })?;
    if own {
        return Err(Error::own_netns(netns.path()));
    }
    Ok(())
}

/// The pod lock, waited for at most `limit`.
fn pod_lock(r: &Checked<'_>, limit: std::time::Duration) -> Result<lock::Held> {
    let (dev, ino) = r
        .netns
        .id()
        .map_err(|e| Error::io("cannot identify the pod's network namespace", e))?;
    lock::acquire(&lock::Key::pod(dev, ino), limit)
}

/// Puts a pod-wide sysctl back, unless something else relies on the value this ADD wrote:
/// another IPvlan child in the pod (a concurrent ADD that found the value already there, or an
/// attachment made before), or a change since. `ours` are this ADD's children (every rail's),
/// which do not count. Under the pod lock, so that no other ADD's sysctl step runs in between
/// (lock.rs).
fn restore_pod_wide(
    r: &Checked<'_>,
    pod: &RouteSocket,
    saved: &sysctl::Saved,
    ours: &[u32],
) -> Result<()> {
    // Its own wait, not what is left of the budget (Budget::undo_wait_at).
    let _pod = pod_lock(r, r.budget.undo_wait_at(std::time::Instant::now()))?;
    let others: Vec<String> = pod
        .links()?
        .into_iter()
        .filter(|l| !ours.contains(&l.index) && l.kind == Some(InfoKind::IpVlan))
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

/// Takes back every step of every rail, each rail's newest first, going on past a step that
/// fails; returns those that failed. Several rails are taken back at once, each on a thread of
/// its own (their IPAM DELs each get a fresh `timeouts.ipamMs`: one after the other, 16 of them
/// could outlast the kubelet's patience); a rail whose thread cannot start (pids.max) is taken
/// back on this one.
fn rollback(
    r: &Checked<'_>,
    undos: Vec<(&CheckedRail, Option<RouteSocket>, UndoStack<Step>)>,
) -> Vec<FailedUndo> {
    let ours: Vec<u32> = undos
        .iter()
        .flat_map(|(_, _, undo)| undo.steps())
        .filter_map(|step| match step {
            Step::Link { index } => Some(*index),
            _ => None,
        })
        .collect();
    let one_rail = |(rail, pod, undo): (&CheckedRail, Option<RouteSocket>, UndoStack<Step>)| {
        let pod = pod.as_ref().unwrap_or(&r.pod);
        let mut failed = Vec::new();
        for step in undo.unwind() {
            if let Err(e) = undo_step(r, rail, pod, &step, &ours) {
                tracing::error!(?step, child = %rail.env.ifname, error = %e, "could not undo a step of the failed ADD");
                let step = if r.rails.len() > 1 {
                    format!(
                        "{step} (rail {}, child {})",
                        rail.master.name, rail.env.ifname
                    )
                } else {
                    step.to_string()
                };
                failed.push(FailedUndo { step, error: e });
            }
        }
        failed
    };
    if undos.len() == 1 {
        return undos.into_iter().flat_map(one_rail).collect();
    }
    // Each rail's steps in a slot its thread takes them from; a slot still full afterwards is a
    // rail whose thread did not start.
    let slots: Vec<std::sync::Mutex<Option<_>>> = undos
        .into_iter()
        .map(|run| std::sync::Mutex::new(Some(run)))
        .collect();
    let take = |slot: &std::sync::Mutex<Option<_>>| slot.lock().expect("never poisoned").take();
    let mut failed: Vec<FailedUndo> = std::thread::scope(|scope| {
        let handles: Vec<_> = slots
            .iter()
            .filter_map(|slot| {
                std::thread::Builder::new()
                    .name("undo".into())
                    .spawn_scoped(scope, || take(slot).map(one_rail).unwrap_or_default())
                    .map_err(|e| tracing::warn!(error = %e, "no thread for a rail's undo; undoing it on the main thread"))
                    .ok()
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    for slot in &slots {
        failed.extend(take(slot).map(one_rail).unwrap_or_default());
    }
    failed
}

/// Takes back one step of a failed ADD.
fn undo_step(
    r: &Checked<'_>,
    rail: &CheckedRail,
    pod: &RouteSocket,
    step: &Step,
    ours: &[u32],
) -> Result<()> {
    failpoint!(step.undo_failpoint());
    match step {
        Step::DeviceInfo(written) => written.undo(),
        Step::Rule { source, table } => pod.delete_rules_from(*source, *table),
        Step::Sysctl { saved } => restore_pod_wide(r, pod, saved, ours),
        Step::Ipam => match Ipam::find(&rail.env, r.conf)? {
            Some(ipam) => ipam.del(None),
            None => Ok(()),
        },
        Step::Link { index } => pod.delete_link(*index),
    }
}
