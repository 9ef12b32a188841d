//! Which rail an attachment uses.
//!
//! Four inputs can name the rail, so that one NetworkAttachmentDefinition can serve every rail
//! of a node:
//!
//! - `args.cni.master` / `args.cni.rdmaDevice`: the Multus `cni-args` of the pod's network
//!   selection element, per attachment;
//! - `deviceID`: the PCI address Multus injects when the NAD has a `resourceName` annotation
//!   (the device the kubelet allocated to this attachment), per attachment;
//! - `master`: a netdev name in the NAD;
//! - `rdma.device`: an RDMA device name in the NAD.
//!
//! Precedence, highest first: `args.cni` > `deviceID` > `master` > `rdma.device`.
//!
//! Who may choose: `master`, `rdma.device` and `allowedRails` come from the NAD (its owner
//! decides); `deviceID` from the device plugin through Multus (the kubelet's allocation);
//! `args.cni` from the *pod's* network selection element, so from whoever may create pods that
//! use the NAD. cni-args are therefore honoured only for rails the NAD lists in
//! `allowedRails` (netdev names or `*`/`?` glob patterns): `args.cni.master` must match an
//! entry (checked at parse time), and a rail chosen by `args.cni.rdmaDevice` alone must be a
//! netdev that matches one (checked by [`resolve`], which knows the device's port). Without
//! `allowedRails`, cni-args that name a rail are refused (7): otherwise any pod allowed to use
//! the NAD could attach to any RDMA-capable netdev of the node (a storage or front-end NIC).
//! With `args.cni.master` given, `args.cni.rdmaDevice` only names the GID table to watch and
//! attaches nothing, so it is not matched.
//! - `args.cni` replaces the NAD's `master` and `rdma.device` as a whole: it exists so that a pod
//!   can pick a rail of a NAD shared by all rails, and a NAD default must not leak into the pod's
//!   choice (a NAD `master` with a pod `rdmaDevice` would otherwise put the child on one rail and
//!   wait for its GID on another).
//! - `deviceID` is the device the pod was actually given. Any other input that names a rail must
//!   name the same one, or ADD is refused (code 7): the pod would get a child on one rail and the
//!   RDMA device of another, whose GID table never holds the child's GID.
//! - `rdma.device` (or `args.cni.rdmaDevice`) names the rail only when nothing above does. Given
//!   together with `master`, it keeps its older meaning, "the GID table to watch", and is not
//!   compared: a `master` that is a VLAN on the rail has no RDMA port of its own.
//!
//! [`Inputs::new`] checks the syntax when the configuration is parsed; [`resolve`] looks the rail
//! up on the node (sysfs, RDMA netlink) before ADD or CHECK changes anything.

use std::io;

use crate::kernel::netlink::{Link, RouteSocket};
use crate::kernel::rdma::{self, RdmaPort, Sysfs};
use crate::protocol::error::{Error, Result};
use crate::protocol::rail_inputs::{Inputs, Rails};

/// The rail chosen for an attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rail {
    /// The rail netdev in the host namespace: the IPvlan child's parent.
    pub netdev: String,
    /// The RDMA device whose GID table will hold the child's GID, when an input named it; else
    /// the caller finds the rail's own port.
    pub rdma_device: Option<String>,
    /// Which input chose the rail, for messages: e.g. `deviceID 0000:0c:00.0`.
    pub chosen_by: String,
}

/// What [`resolve`] needs to know about the node.
pub trait Node {
    /// The netdevs of a PCI function (`/sys/bus/pci/devices/<addr>/net/*`); None when the node
    /// has no such function.
    fn pci_netdevs(&self, addr: &str) -> io::Result<Option<Vec<String>>>;
    /// The netdevs bound to the ports of an RDMA device; None when there is no such device.
    fn rdma_netdevs(&self, device: &str) -> io::Result<Option<Vec<String>>>;
    /// Every netdev bound to some RDMA port (to tell a PF's uplink from its representors).
    fn all_rdma_netdevs(&self) -> Vec<String>;
}

/// Chooses the rail; see the module documentation for the precedence.
pub fn resolve(inputs: &Inputs, node: &dyn Node) -> Result<Rail> {
    let from_args = inputs.args_master.is_some() || inputs.args_rdma_device.is_some();
    let (master, rdma_device, prefix) = if from_args {
        (&inputs.args_master, &inputs.args_rdma_device, "args.cni.")
    } else {
        (&inputs.master, &inputs.rdma_device, "")
    };
    let master_src = |m: &str| format!("\"{prefix}master\" {m}");
    let rdma_key = if from_args {
        "args.cni.rdmaDevice"
    } else {
        "rdma.device"
    };
    let rdma_src = |d: &str| format!("\"{rdma_key}\" {d}");

    if let Some(addr) = &inputs.device_id {
        let netdev = pci_netdev(node, addr)?;
        let chosen_by = format!("\"deviceID\" {addr}");
        if let Some(m) = master {
            if *m != netdev {
                return Err(conflict(&master_src(m), &chosen_by, &netdev));
            }
        } else if let Some(d) = rdma_device {
            let netdevs = rdma_netdevs(node, d, rdma_key)?;
            if !netdevs.contains(&netdev) {
                return Err(conflict(&rdma_src(d), &chosen_by, &netdev));
            }
            if from_args {
                inputs.allowed.check(&rdma_src(d), &netdev)?;
            }
        }
        return Ok(Rail {
            netdev,
            rdma_device: rdma_device.clone(),
            chosen_by,
        });
    }
    if let Some(m) = master {
        return Ok(Rail {
            netdev: m.clone(),
            rdma_device: rdma_device.clone(),
            chosen_by: master_src(m),
        });
    }
    if let Some(d) = rdma_device {
        let netdevs = rdma_netdevs(node, d, rdma_key)?;
        if from_args {
            for netdev in &netdevs {
                inputs.allowed.check(&rdma_src(d), netdev)?;
            }
        }
        return match netdevs.as_slice() {
            [netdev] => Ok(Rail {
                netdev: netdev.clone(),
                rdma_device: Some(d.clone()),
                chosen_by: rdma_src(d),
            }),
            _ => Err(Error::InvalidConfig(format!(
                "{} has ports on several netdevs ({}): expected one rail; name it with \"master\"",
                rdma_src(d),
                netdevs.join(", ")
            ))),
        };
    }
    Err(Error::InvalidConfig(
        "no rail named: expected \"master\" (a netdev such as rdma3), \"rdma.device\", a \
         \"deviceID\" injected by Multus (NAD annotation k8s.v1.cni.cncf.io/resourceName), or \
         cni-args \"master\"/\"rdmaDevice\" in the pod's network selection element"
            .into(),
    ))
}

fn conflict(other: &str, chosen_by: &str, netdev: &str) -> Error {
    Error::InvalidConfig(format!(
        "conflicting rails: {chosen_by} is rail {netdev}, but {other} names another; the pod \
         would get a child on one rail and the RDMA device of another. Drop one of them or make \
         them agree (with a deviceID from a device plugin, leave \"master\" out of the NAD)"
    ))
}

/// The one netdev of a PCI function that is a rail.
fn pci_netdev(node: &dyn Node, addr: &str) -> Result<String> {
    let netdevs = node
        .pci_netdevs(addr)
        .map_err(|e| Error::io(format!("cannot list the netdevs of PCI function {addr}"), e))?
        .ok_or_else(|| {
            Error::Rail(format!(
                "\"deviceID\" {addr}: expected a PCI function of this node, found none at \
                 /sys/bus/pci/devices/{addr}; check the device plugin's resource configuration \
                 (its PCI addresses) against `lspci -D` on the node"
            ))
        })?;
    match netdevs.as_slice() {
        [] => Err(Error::Rail(format!(
            "\"deviceID\" {addr}: the PCI function has no netdev in the host namespace: expected \
             a RoCE NIC bound to its network driver; is it bound to vfio-pci, or was its netdev \
             moved into a pod by another plugin?"
        ))),
        [one] => Ok(one.clone()),
        many => {
            // A switchdev PF lists its representors beside the uplink; only the uplink has an
            // RDMA port.
            let rdma = node.all_rdma_netdevs();
            let uplinks: Vec<&String> = many.iter().filter(|n| rdma.contains(n)).collect();
            match uplinks.as_slice() {
                [one] => Ok((*one).clone()),
                _ => Err(Error::Rail(format!(
                    "\"deviceID\" {addr}: the PCI function has several netdevs ({}) and not \
                     exactly one with an RDMA port: name the rail with \"master\" or cni-args",
                    many.join(", ")
                ))),
            }
        }
    }
}

fn rdma_netdevs(node: &dyn Node, device: &str, key: &str) -> Result<Vec<String>> {
    let netdevs = node
        .rdma_netdevs(device)
        .map_err(|e| Error::io(format!("cannot list the ports of RDMA device {device}"), e))?
        .ok_or_else(|| {
            Error::NoRdmaPort(format!(
                "RDMA device {device:?} (\"{key}\") does not exist on this node: check `rdma link \
                 show` and the NAD or the pod's cni-args"
            ))
        })?;
    if netdevs.is_empty() {
        return Err(Error::NoRdmaPort(format!(
            "RDMA device {device} (\"{key}\") has no port bound to a netdev in the host namespace: \
             expected a RoCE port (`rdma link show` lists its netdev); name the rail with \"master\""
        )));
    }
    Ok(netdevs)
}

/// The rail of `inputs` on this node: chosen by [`resolve`], then its netdev found in the host
/// network namespace. ADD, CHECK and STATUS all look their rail up here; a missing netdev is
/// reported through `missing`, so that each gives its own code (ADD 100, CHECK 107, STATUS 50).
pub(crate) fn find(
    inputs: &Inputs,
    host: &RouteSocket,
    missing: fn(String) -> Error,
) -> Result<(Rail, Link)> {
    let rail = resolve(inputs, &Host::default())?;
    let Some(master) = host.link_by_name(&rail.netdev)? else {
        return Err(missing(format!(
            "rail {:?} ({}) does not exist on this node: expected a netdev of that name in the \
             host network namespace; check the rail names with `ip link` and the NAD",
            rail.netdev, rail.chosen_by
        )));
    };
    check_own_name(inputs, &rail.netdev, &master.name)?;
    Ok((rail, master))
}

/// A lookup by name also matches a link's altnames (kernel >= 5.5): cni-args naming a NIC
/// outside allowedRails through an altname that matches a pattern must not reach it, so the
/// link's own name (`own`, found for `requested`) is what allowedRails is checked against.
/// The NAD's own `master` may be an altname: the NAD's owner chose that rail.
fn check_own_name(inputs: &Inputs, requested: &str, own: &str) -> Result<()> {
    if inputs.args_master.is_some() && own != requested {
        inputs.allowed.check(
            &format!("\"args.cni.master\" {requested} (an altname of {own})"),
            own,
        )?;
    }
    Ok(())
}

/// The rails of `rails` on this node: every netdev of the host namespace that matches, in
/// name order with numbers compared as numbers (rdma2 before rdma10), so that the N-th child
/// is on the N-th rail whatever the node calls them. No match is reported through `missing`
/// (ADD 100, CHECK 107, STATUS 50).
pub(crate) fn find_all(
    rails: &Rails,
    host: &RouteSocket,
    missing: fn(String) -> Error,
) -> Result<Vec<(Rail, Link)>> {
    let links = host.links()?;
    let mut found: Vec<Link> = links
        .iter()
        .filter(|l| rails.matches(&l.name))
        .cloned()
        .collect();
    if found.is_empty() {
        let mut names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
        names.sort_by(|a, b| natural_cmp(a, b));
        return Err(missing(format!(
            "\"rails\" {} matches no netdev of this node: expected at least one rail; found \
             {}. Check the rail names with `ip link` and the NAD's \"rails\"",
            rails.describe(),
            names.join(", ")
        )));
    }
    found.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    Ok(found
        .into_iter()
        .map(|link| {
            (
                Rail {
                    netdev: link.name.clone(),
                    rdma_device: None,
                    chosen_by: format!("\"rails\" {}", rails.describe()),
                },
                link,
            )
        })
        .collect())
}

/// Name order with runs of digits compared as numbers: rdma2 < rdma10, ens1f0np0 < ens1f1np0.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let (si, sj) = (i, j);
            while i < a.len() && a[i].is_ascii_digit() {
                i += 1;
            }
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            // Without leading zeros, the longer run is the larger number.
            let x = trim_zeros(&a[si..i]);
            let y = trim_zeros(&b[sj..j]);
            let by_number = x.len().cmp(&y.len()).then_with(|| x.cmp(y));
            if by_number != Ordering::Equal {
                return by_number;
            }
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j)).then_with(|| a.cmp(b))
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let start = digits
        .iter()
        .position(|&d| d != b'0')
        .unwrap_or(digits.len());
    &digits[start..]
}

/// The RDMA port whose GID table will hold the child's GID: the device an input named (port
/// `port`, "rdma.port", else 1), or the port bound to the rail's netdev `master` (its number
/// replaced by `port` when given).
pub(crate) fn rdma_port(rail: &Rail, port: Option<u32>, master: &Link) -> Result<RdmaPort> {
    if let Some(device) = rail.rdma_device.as_deref() {
        let sysfs = Sysfs::system();
        if !sysfs.device_exists(device) {
            return Err(Error::NoRdmaPort(format!(
                "RDMA device {device:?} (\"rdma.device\") does not exist on this node: check \
                 `rdma link show` and the NAD"
            )));
        }
        return Ok(RdmaPort {
            device: device.to_string(),
            port: port.unwrap_or(1),
        });
    }
    let found = rdma::port_of_netdev(master.index, &master.name).map_err(|e| {
        Error::io(
            format!(
                "cannot list the RDMA ports of this node (rail {})",
                master.name
            ),
            e,
        )
    })?;
    bound_port(found, port, master)
}

/// The RDMA ports of several rails at once (a multi-rail ADD), as [`rdma_port`] finds each: one
/// RDMA netlink walk for all of them.
pub(crate) fn rdma_ports(found: &[(Rail, Link)], port: Option<u32>) -> Result<Vec<RdmaPort>> {
    if let [(rail, master)] = found {
        return Ok(vec![rdma_port(rail, port, master)?]);
    }
    if found.iter().any(|(rail, _)| rail.rdma_device.is_some()) {
        return found
            .iter()
            .map(|(rail, master)| rdma_port(rail, port, master))
            .collect();
    }
    let netdevs: Vec<(u32, &str)> = found
        .iter()
        .map(|(_, master)| (master.index, master.name.as_str()))
        .collect();
    let ports = rdma::ports_of_netdevs(&netdevs)
        .map_err(|e| Error::io("cannot list the RDMA ports of this node", e))?;
    found
        .iter()
        .zip(ports)
        .map(|((_, master), found)| bound_port(found, port, master))
        .collect()
}

/// The port found bound to rail `master`, its number replaced by `port` when given; no port is
/// an error that says what to check.
fn bound_port(found: Option<RdmaPort>, port: Option<u32>, master: &Link) -> Result<RdmaPort> {
    match found {
        Some(mut found) => {
            if let Some(p) = port {
                found.port = p;
            }
            Ok(found)
        }
        None => Err(Error::NoRdmaPort(format!(
            "rail {} has no RDMA port: expected an RDMA device (e.g. mlx5_N, or rxeN for \
             Soft-RoCE) whose port is bound to {}; check `rdma link show`, that the NIC's RDMA \
             driver is loaded, or set \"rdma\": {{\"device\": ...}} in the NAD",
            master.name, master.name
        ))),
    }
}

/// The node as sysfs and RDMA netlink show it from the plugin's (host) namespace.
pub struct Host {
    sysfs: Sysfs,
}

impl Default for Host {
    fn default() -> Self {
        Host {
            sysfs: Sysfs::system(),
        }
    }
}

impl Node for Host {
    fn pci_netdevs(&self, addr: &str) -> io::Result<Option<Vec<String>>> {
        self.sysfs.pci_netdevs(addr)
    }

    fn rdma_netdevs(&self, device: &str) -> io::Result<Option<Vec<String>>> {
        if !self.sysfs.device_exists(device) {
            return Ok(None);
        }
        // RDMA netlink knows every port's netdev (also Soft-RoCE's, which has no PCI parent);
        // the parent function's netdevs in sysfs are the fallback when netlink cannot answer.
        let mut netdevs: Vec<String> = match rdma::device_ports(device) {
            Ok(ports) => ports.into_iter().filter_map(|p| p.ndev_name).collect(),
            Err(err) => {
                tracing::debug!(device, error = %err, "RDMA netlink failed; trying sysfs");
                Vec::new()
            }
        };
        if netdevs.is_empty() {
            netdevs = self.sysfs.device_netdevs(device)?.unwrap_or_default();
        }
        netdevs.sort();
        netdevs.dedup();
        Ok(Some(netdevs))
    }

    fn all_rdma_netdevs(&self) -> Vec<String> {
        rdma::netlink_ports()
            .map(|ports| ports.into_iter().filter_map(|p| p.ndev_name).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rail_inputs::AllowedRails;
    use serde_json::json;
    use serde_json::Value;
    use std::collections::BTreeMap;

    /// A node with PCI functions and RDMA devices.
    #[derive(Default)]
    struct FakeNode {
        pci: BTreeMap<&'static str, Vec<&'static str>>,
        rdma: BTreeMap<&'static str, Vec<&'static str>>,
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    impl Node for FakeNode {
        fn pci_netdevs(&self, addr: &str) -> io::Result<Option<Vec<String>>> {
            Ok(self.pci.get(addr).map(|v| strings(v)))
        }
        fn rdma_netdevs(&self, device: &str) -> io::Result<Option<Vec<String>>> {
            Ok(self.rdma.get(device).map(|v| strings(v)))
        }
        fn all_rdma_netdevs(&self) -> Vec<String> {
            self.rdma
                .values()
                .flatten()
                .map(|s| s.to_string())
                .collect()
        }
    }

    /// Two ConnectX rails: 0000:0c:00.0 = rdma6 (mlx5_6), 0000:0d:00.0 = rdma7 (mlx5_7), and a
    /// switchdev PF with representors.
    fn node() -> FakeNode {
        let mut n = FakeNode::default();
        n.pci.insert("0000:0c:00.0", vec!["rdma6"]);
        n.pci.insert("0000:0d:00.0", vec!["rdma7"]);
        n.pci
            .insert("0000:0e:00.0", vec!["pf0vf0", "rdma8", "pf0vf1"]);
        n.pci.insert("0000:0f:00.0", vec![]);
        n.rdma.insert("mlx5_6", vec!["rdma6"]);
        n.rdma.insert("mlx5_7", vec!["rdma7"]);
        n.rdma.insert("mlx5_8", vec!["rdma8"]);
        n.rdma.insert("mlx5_9", vec![]);
        n
    }

    fn inputs(conf: Value) -> Result<Inputs> {
        let s = |k: &str| conf.get(k).and_then(Value::as_str).map(String::from);
        Inputs::new(
            s("master"),
            s("rdmaDevice"),
            s("deviceID"),
            conf.pointer("/runtimeConfig/deviceID")
                .and_then(Value::as_str)
                .map(String::from),
            conf.get("args"),
            AllowedRails::parse(conf.get("allowedRails"))?,
        )
    }

    fn rail(conf: Value) -> Result<Rail> {
        resolve(&inputs(conf)?, &node())
    }

    fn refused(conf: Value, code: u32, needle: &str) {
        let err = rail(conf).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(
            err.to_string().contains(needle),
            "{err} should say {needle:?}"
        );
    }

    #[test]
    fn rails_come_in_name_order_with_numbers_as_numbers() {
        let mut names = vec![
            "rdma10",
            "rdma2",
            "rdma1",
            "rdma0",
            "ens1f1np0",
            "ens1f0np0",
            "rdma02",
            "rdma",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "ens1f0np0",
                "ens1f1np0",
                "rdma",
                "rdma0",
                "rdma1",
                "rdma02",
                "rdma2",
                "rdma10"
            ]
        );
    }

    /// Seen (issue #25, item 6): NIC stor0 with altname rdma9x, allowedRails ["rdma*"],
    /// cni-args master rdma9x: the lookup found stor0 and ADD attached there.
    #[test]
    fn an_altname_does_not_pass_allowed_rails() {
        let i = inputs(json!({"allowedRails": ["rdma*"], "args": {"cni": {"master": "rdma9x"}}}))
            .unwrap();
        let err = check_own_name(&i, "rdma9x", "stor0").unwrap_err();
        assert_eq!(err.code(), 7);
        assert!(
            err.to_string()
                .contains("\"args.cni.master\" rdma9x (an altname of stor0) is rail stor0"),
            "{err}"
        );
        check_own_name(&i, "rdma9x", "rdma9x").unwrap();
        check_own_name(&i, "rdma9x", "rdma5").unwrap(); // an altname of an allowed rail
                                                        // The NAD's own master through an altname: its owner chose it.
        let nad = inputs(json!({"master": "rdma9x"})).unwrap();
        check_own_name(&nad, "rdma9x", "stor0").unwrap();
    }

    #[test]
    fn master_alone_is_the_rail() {
        let r = rail(json!({"master": "rdma6"})).unwrap();
        assert_eq!(r.netdev, "rdma6");
        assert_eq!(r.rdma_device, None);
        assert_eq!(r.chosen_by, "\"master\" rdma6");
    }

    #[test]
    fn device_id_picks_the_pci_functions_netdev() {
        let r = rail(json!({"deviceID": "0000:0D:00.0"})).unwrap();
        assert_eq!(r.netdev, "rdma7");
        assert!(r.chosen_by.contains("0000:0d:00.0"));
        // Agreeing inputs are fine.
        assert_eq!(
            rail(json!({"deviceID": "0000:0d:00.0", "master": "rdma7"}))
                .unwrap()
                .netdev,
            "rdma7"
        );
        let r = rail(json!({"deviceID": "0000:0d:00.0", "rdmaDevice": "mlx5_7"})).unwrap();
        assert_eq!(
            (r.netdev.as_str(), r.rdma_device.as_deref()),
            ("rdma7", Some("mlx5_7"))
        );
        // runtimeConfig.deviceID (the CNI deviceID capability) counts the same.
        assert_eq!(
            rail(json!({"runtimeConfig": {"deviceID": "0000:0c:00.0"}}))
                .unwrap()
                .netdev,
            "rdma6"
        );
    }

    #[test]
    fn device_id_of_a_switchdev_pf_takes_the_uplink() {
        assert_eq!(
            rail(json!({"deviceID": "0000:0e:00.0"})).unwrap().netdev,
            "rdma8"
        );
    }

    #[test]
    fn rdma_device_alone_picks_its_port_netdev() {
        let r = rail(json!({"rdmaDevice": "mlx5_7"})).unwrap();
        assert_eq!(r.netdev, "rdma7");
        assert_eq!(r.rdma_device.as_deref(), Some("mlx5_7"));
    }

    #[test]
    fn master_with_rdma_device_keeps_rdma_device_as_the_gid_table() {
        // A VLAN on the rail has no RDMA port of its own: no comparison.
        let r = rail(json!({"master": "rdma6.100", "rdmaDevice": "mlx5_6"})).unwrap();
        assert_eq!(r.netdev, "rdma6.100");
        assert_eq!(r.rdma_device.as_deref(), Some("mlx5_6"));
    }

    #[test]
    fn cni_args_replace_the_nads_selection() {
        let r = rail(
            json!({"master": "rdma6", "rdmaDevice": "mlx5_6", "allowedRails": ["rdma*"],
                            "args": {"cni": {"master": "rdma7"}}}),
        )
        .unwrap();
        assert_eq!(r.netdev, "rdma7");
        assert_eq!(
            r.rdma_device, None,
            "the NAD's rdma.device must not leak in"
        );
        assert_eq!(r.chosen_by, "\"args.cni.master\" rdma7");
        let r = rail(json!({"master": "rdma6", "allowedRails": ["rdma7"],
                        "args": {"cni": {"rdmaDevice": "mlx5_7"}}}))
        .unwrap();
        assert_eq!(r.netdev, "rdma7");
        assert_eq!(r.rdma_device.as_deref(), Some("mlx5_7"));
        // Unrelated cni-args of other plugins are left alone.
        let r =
            rail(json!({"master": "rdma6", "args": {"cni": {"ips": ["10.0.0.1/24"]}}})).unwrap();
        assert_eq!(r.netdev, "rdma6");
    }

    /// cni-args come from the pod: only rails the NAD allows may be chosen with them, whatever
    /// names the rail (a netdev, or an RDMA device whose port is that netdev).
    #[test]
    fn cni_args_choose_only_rails_the_nad_allows() {
        // No allowedRails: no pod choice at all, whichever key.
        for args in [json!({"master": "rdma7"}), json!({"rdmaDevice": "mlx5_7"})] {
            refused(json!({"args": {"cni": args}}), 7, "lets no pod choose it");
        }
        // A rail outside the list, by netdev or through its RDMA device.
        let nad =
            |args: Value| json!({"allowedRails": ["rdma6", "gpu?rail"], "args": {"cni": args}});
        refused(
            nad(json!({"master": "rdma7"})),
            7,
            "\"args.cni.master\" rdma7 is rail rdma7, which this NAD does not allow",
        );
        refused(
            nad(json!({"rdmaDevice": "mlx5_7"})),
            7,
            "\"args.cni.rdmaDevice\" mlx5_7 is rail rdma7",
        );
        // Inside it.
        assert_eq!(
            rail(nad(json!({"master": "rdma6"}))).unwrap().netdev,
            "rdma6"
        );
        assert_eq!(
            rail(nad(json!({"rdmaDevice": "mlx5_6"}))).unwrap().netdev,
            "rdma6"
        );
        // deviceID is the device plugin's, not the pod's: no allowedRails needed.
        assert_eq!(
            rail(json!({"deviceID": "0000:0d:00.0"})).unwrap().netdev,
            "rdma7"
        );
        // A deviceID does not open the door to cni-args either.
        refused(
            json!({"deviceID": "0000:0d:00.0", "args": {"cni": {"master": "rdma7"}}}),
            7,
            "lets no pod choose it",
        );
    }

    #[test]
    fn conflicts_are_code_7_and_name_both_inputs() {
        refused(
            json!({"deviceID": "0000:0d:00.0", "master": "rdma6"}),
            7,
            "conflicting rails: \"deviceID\" 0000:0d:00.0 is rail rdma7, but \"master\" rdma6",
        );
        refused(
            json!({"deviceID": "0000:0d:00.0", "rdmaDevice": "mlx5_6"}),
            7,
            "\"rdma.device\" mlx5_6",
        );
        refused(
            json!({"deviceID": "0000:0d:00.0", "allowedRails": ["rdma*"],
                   "args": {"cni": {"master": "rdma6"}}}),
            7,
            "\"args.cni.master\" rdma6",
        );
        refused(
            json!({"deviceID": "0000:0d:00.0", "allowedRails": ["rdma*"],
                   "args": {"cni": {"rdmaDevice": "mlx5_6"}}}),
            7,
            "\"args.cni.rdmaDevice\" mlx5_6",
        );
        let err = inputs(json!({"deviceID": "0000:0d:00.0",
                                "runtimeConfig": {"deviceID": "0000:0c:00.0"}}))
        .unwrap_err();
        assert_eq!(err.code(), 7);
    }

    #[test]
    fn lookups_that_find_nothing_say_so() {
        refused(json!({"deviceID": "0000:99:00.0"}), 100, "found none");
        refused(json!({"deviceID": "0000:0f:00.0"}), 100, "no netdev");
        refused(json!({"rdmaDevice": "mlx5_99"}), 101, "does not exist");
        refused(json!({"rdmaDevice": "mlx5_9"}), 101, "no port bound");
        refused(json!({}), 7, "no rail named");
        refused(json!({"args": {"cni": {}}}), 7, "no rail named");
    }

    #[test]
    fn host_reads_the_node_from_its_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bus/pci/devices/0000:00:04.0/net/rdma1")).unwrap();
        let host = Host {
            sysfs: Sysfs::new(dir.path()),
        };
        assert_eq!(
            host.pci_netdevs("0000:00:04.0").unwrap(),
            Some(vec!["rdma1".to_string()])
        );
        assert_eq!(host.pci_netdevs("0000:00:07.0").unwrap(), None);
        assert_eq!(host.rdma_netdevs("mlx5_0").unwrap(), None);
    }
}
