//! STATUS (CNI 1.1): can this node serve ADD for this network right now?
//!
//! Checked, in the order ADD would need them: the rail named by the configuration exists in the
//! host namespace and is up, its RDMA device exists and the port is ACTIVE, and the IPAM plugin
//! is there and, when it speaks CNI 1.1, answers its own STATUS. Nothing is changed.
//!
//! Codes, as the spec defines them:
//! - 50, "cannot serve ADD": the rail or its RDMA device does not exist, the configuration names
//!   no usable rail, the IPAM plugin is missing or its STATUS failed. Existing attachments are not
//!   hurt by any of these (an IPvlan child disappears with its rail, so a missing rail has none).
//! - 51, "cannot serve ADD, and existing attachments may have limited connectivity": the rail is
//!   administratively down, or its RDMA port is not ACTIVE. Pods already attached to this rail
//!   keep their children but cannot pass traffic (or RoCE traffic) through it. An IPAM STATUS
//!   that fails with 51 is passed on as 51.
//!
//! The rail is resolved as ADD resolves it (rail.rs), from what the configuration carries.
//! `deviceID` and `args.cni` are per attachment and normally absent from a STATUS request; a
//! configuration that names no rail at all (every pod passes cni-args) has no rail to check,
//! which STATUS reports in a log line and does not count as a failure.

use crate::attach::ipam::{Delegated, Ipam};
use crate::attach::rail;
use crate::kernel::netlink::{Link, RouteSocket};
use crate::kernel::rdma::{self, Sysfs};
use crate::protocol::cni::{self, Env};
use crate::protocol::config::NetConf;
use crate::protocol::error::{Error, Result};

pub fn status(env: &Env, conf: &NetConf) -> Result<()> {
    cni::require_command(&conf.cni_version, "STATUS")?;
    if conf.rail.names_a_rail() {
        rail_ready(conf)?;
    } else {
        tracing::info!(
            "the configuration names no rail (pods choose it with cni-args): no rail to check"
        );
    }
    let ipam = Ipam::find(env, conf).map_err(|e| Error::Unavailable(e.to_string()))?;
    if let Some(ipam) = ipam {
        match ipam.status() {
            Ok(Delegated::Forwarded | Delegated::Skipped { .. }) => {}
            Err(e) if Ipam::failed_with(&e, 51) => {
                return Err(Error::UnavailableLimited(format!("IPAM STATUS: {e}")))
            }
            Err(e) => return Err(Error::Unavailable(format!("IPAM STATUS: {e}"))),
        }
    }
    tracing::info!("STATUS: ready");
    Ok(())
}

/// Every rail of the configuration (each of `rails`, in order; the first that is not ready is
/// the answer).
fn rail_ready(conf: &NetConf) -> Result<()> {
    let host = RouteSocket::current()?;
    let found = match &conf.rail.rails {
        Some(rails) => rail::find_all(rails, &host, Error::Unavailable),
        None => rail::find(&conf.rail, &host, Error::Unavailable).map(|one| vec![one]),
    };
    let found = found.map_err(|e| match e {
        // A configuration refused here would be refused by ADD as well: not available.
        e @ (Error::InvalidConfig(_) | Error::Rail(_) | Error::NoRdmaPort(_)) => {
            Error::Unavailable(e.to_string())
        }
        other => other,
    })?;
    for (rail, master) in &found {
        one_rail_ready(conf, rail, master)?;
    }
    Ok(())
}

fn one_rail_ready(conf: &NetConf, rail: &rail::Rail, master: &Link) -> Result<()> {
    if !master.admin_up {
        return Err(Error::UnavailableLimited(format!(
            "rail {} is down: pods already on it have no connectivity through it and new ones \
             cannot attach; bring it up (ip link set {} up)",
            master.name, master.name
        )));
    }
    let port = rail::rdma_port(rail, conf.rdma.port, master)
        .map_err(|e| Error::Unavailable(e.to_string()))?;
    let state = Sysfs::system().port_state(&port).map_err(|e| {
        Error::Unavailable(format!(
            "cannot read the state of RDMA port {} {}: {e}; check `rdma link show` and \"rdma.port\"",
            port.device, port.port
        ))
    })?;
    if !rdma::port_active(&state) {
        return Err(Error::UnavailableLimited(format!(
            "RDMA port {} {} of rail {} is {state:?}, expected ACTIVE: RoCE traffic of pods on \
             this rail cannot flow; check the cable/switch port and `rdma link show`",
            port.device, port.port, master.name
        )));
    }
    tracing::info!(rail = %master.name, device = %port.device, port = port.port, "rail ready");
    Ok(())
}
