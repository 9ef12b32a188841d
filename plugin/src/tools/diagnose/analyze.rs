//! The diagnosis proper: a pure function from a [`Snapshot`] to a [`Report`].
//!
//! Nothing here reads the system, so every verdict is unit-tested on recorded snapshots
//! (`fixtures/*.json`).

use super::classify::{classify_ib_core, netdev_reports, port_report};
use super::findings::{device_findings, gid_index_advice, mode_name, netdev_findings};
use super::report::{finding, PortReport, Report, Severity};
use super::snapshot::Snapshot;

/// Runs the diagnosis.
pub fn analyze(snap: &Snapshot) -> Report {
    let ib_core = classify_ib_core(&snap.ib_core, !snap.devices.is_empty());
    let mut findings = vec![finding(
        Severity::Info,
        "ib-core",
        format!(
            "ib_core is {} ({})",
            ib_core.flavor,
            ib_core.evidence.join("; ")
        ),
        None,
    )];
    match snap.netns_mode {
        Some(mode) => findings.push(finding(
            Severity::Info,
            "netns-mode",
            format!("RDMA subsystem netns mode: {}", mode_name(mode)),
            None,
        )),
        None => findings.push(finding(
            Severity::Info,
            "netns-mode",
            "RDMA subsystem netns mode: unknown (RDMA netlink did not answer)".into(),
            None,
        )),
    }

    let mut ports: Vec<PortReport> = Vec::new();
    for device in &snap.devices {
        for port in &device.ports {
            ports.push(port_report(snap, ib_core.flavor, device, port));
        }
    }
    let netdevs = netdev_reports(snap, &mut ports);

    device_findings(snap, &ib_core, &ports, &netdevs, &mut findings);
    for port in ports.iter().filter(|p| !p.netdevs_here.is_empty()) {
        if !port.is_active() {
            findings.push(finding(
                Severity::Warning,
                "port-not-active",
                format!(
                    "{} is {}, not ACTIVE",
                    port.rail_name(),
                    port.state.as_deref().unwrap_or("in an unknown state")
                ),
                Some(
                    "check the link of the rail netdev (ip link, ethtool) and the switch port"
                        .into(),
                ),
            ));
        }
        if let Some(err) = &port.gids_error {
            findings.push(finding(
                Severity::Warning,
                "gid-table-unreadable",
                format!("cannot read the GID table of {}: {err}", port.name()),
                None,
            ));
        }
    }
    netdev_findings(&ports, &netdevs, &mut findings);
    gid_index_advice(&netdevs, &mut findings);
    for err in &snap.errors {
        // A problem of diagnose, not of the namespace: what it affects is reported anyway.
        findings.push(finding(
            Severity::Info,
            "incomplete",
            format!("diagnose could not read everything: {err}"),
            None,
        ));
    }

    let healthy = findings.iter().all(|f| f.severity == Severity::Info);
    Report {
        target: snap.target.clone(),
        ib_core,
        netns_mode: snap.netns_mode,
        ports,
        netdevs,
        findings,
        healthy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::rdma::GidType;
    use crate::tools::diagnose::report::{Finding, Flavor, GidClass};
    use crate::tools::diagnose::snapshot::{IbCoreFacts, Netdev};

    fn fixture(name: &str) -> Snapshot {
        let text = match name {
            "healthy-pod" => include_str!("fixtures/healthy-pod.json"),
            "ofed-pod-no-rail-netdev" => include_str!("fixtures/ofed-pod-no-rail-netdev.json"),
            "ofed-vm-pod-no-attachment" => include_str!("fixtures/ofed-vm-pod-no-attachment.json"),
            "exclusive-no-device" => include_str!("fixtures/exclusive-no-device.json"),
            "ipv6-placeholder" => include_str!("fixtures/ipv6-placeholder.json"),
            "tentative-address" => include_str!("fixtures/tentative-address.json"),
            other => panic!("no fixture {other}"),
        };
        serde_json::from_str(text).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
    }

    fn codes(report: &Report, severity: Severity) -> Vec<&'static str> {
        report
            .findings
            .iter()
            .filter(|f| f.severity == severity)
            .map(|f| f.code)
            .collect()
    }

    fn message<'a>(report: &'a Report, code: &str) -> &'a Finding {
        report
            .findings
            .iter()
            .find(|f| f.code == code)
            .unwrap_or_else(|| panic!("no finding {code}: {:#?}", report.findings))
    }

    #[test]
    fn a_full_gid_table_is_an_error_and_a_nearly_full_one_a_warning() {
        let fill = |keep_free: usize| {
            let mut snap = fixture("healthy-pod");
            let gids = &mut snap.devices[0].ports[0].gids;
            // A table of 64 slots: a tenth of it is 6.4.
            let slots = 64;
            for index in gids.len()..slots {
                gids.push(crate::kernel::rdma::Gid::zero(index as u32));
            }
            for (i, slot) in gids.iter_mut().enumerate().skip(2) {
                if i + keep_free < slots {
                    slot.gid = Some(format!("fd00::{i:x}").parse().unwrap());
                    slot.gid_type = Some(GidType::RoceV2);
                    slot.ndev = Some("rdma0".into());
                }
            }
            (slots, analyze(&snap))
        };
        let (slots, full) = fill(0);
        assert!(!full.healthy);
        let f = message(&full, "gid-table-full");
        assert_eq!(f.severity, Severity::Error);
        assert!(
            f.message.contains(&format!(
                "rail rdma0 (rxe0 port 1) has at most 0 free slots of {slots}"
            )),
            "{f:?}"
        );
        let (_, nearly) = fill(2);
        assert_eq!(
            message(&nearly, "gid-table-nearly-full").severity,
            Severity::Warning
        );
        assert!(!codes(&nearly, Severity::Error).contains(&"gid-table-full"));
        let (_, roomy) = fill(slots / 2);
        assert!(roomy
            .findings
            .iter()
            .all(|f| !f.code.starts_with("gid-table")));
    }

    #[test]
    fn healthy_pod_is_healthy_and_names_the_gid_index() {
        let report = analyze(&fixture("healthy-pod"));
        assert!(report.healthy, "{:#?}", report.findings);
        assert_eq!(report.ib_core.flavor, Flavor::Upstream);
        let net1 = report.netdevs.iter().find(|n| n.name == "net1").unwrap();
        assert_eq!(net1.rail.as_deref(), Some("rdma0"));
        assert_eq!(net1.rdma_port.as_deref(), Some("rxe0 port 1"));
        assert_eq!(net1.recommended_gid_index, Some(1));
        assert_eq!(net1.ifalias.as_ref().map(|r| r.gid_index), Some(1));
        let rxe0 = &report.ports[0];
        assert_eq!(rxe0.netdevs_here, ["net1"]);
        // The host rail's link-local GID is visible on upstream but not ours.
        assert_eq!(rxe0.gids[0].class, GidClass::Foreign);
        assert_eq!(rxe0.gids[1].class, GidClass::Usable);
        assert_eq!(rxe0.gids[2].class, GidClass::Empty);
        // The other rail is merely not attached: info, not a problem.
        let other = message(&report, "no-rail-netdev");
        assert_eq!(other.severity, Severity::Info);
        assert!(
            other.message.contains("rail rdma1 (rxe1 port 1)"),
            "{other:?}"
        );
        assert!(message(&report, "gid-index")
            .message
            .starts_with("GID index for UCX/NCCL should be 1"));
    }

    #[test]
    fn ofed_pod_without_rail_netdev_sees_hidden_gids() {
        let report = analyze(&fixture("ofed-pod-no-rail-netdev"));
        assert!(!report.healthy);
        assert_eq!(report.ib_core.flavor, Flavor::Ofed);
        assert!(
            report
                .ib_core
                .evidence
                .iter()
                .any(|e| e.contains("mlx_compat")),
            "{:?}",
            report.ib_core.evidence
        );
        let port = &report.ports[0];
        // Host view: slots 0..3 are the rail's, so zeros there are hidden, with their owner.
        assert_eq!(port.gids[3].class, GidClass::Hidden);
        assert_eq!(port.gids[3].host_ndev.as_deref(), Some("rdma6"));
        assert_eq!(
            port.gids[3].host_gid,
            Some("::ffff:10.224.12.143".parse().unwrap())
        );
        // Zero from both views: unused, or a third namespace's; nothing tells them apart.
        assert_eq!(port.gids[4].class, GidClass::EmptyOrHidden);
        let f = report
            .findings
            .iter()
            .find(|f| f.code == "no-rail-netdev")
            .unwrap();
        assert_eq!(f.severity, Severity::Error);
        assert!(
            f.message.starts_with(
                "RDMA devices present but no netdev on rail rdma6 (mlx5_6 port 1) in this \
                 namespace: its GIDs are hidden by the OFED GID check"
            ),
            "{}",
            f.message
        );
        assert!(f
            .fix
            .as_deref()
            .unwrap()
            .contains("attach a roce-ipvlan network"));
        assert!(codes(&report, Severity::Error).contains(&"no-netdev-on-any-rail"));
    }

    /// A live snapshot, not a hand-made one: `roce-ipvlan diagnose --netns <pod> --json` (its
    /// "snapshot") in the test VM on the OFED view (VM_RDMA=ofed, Debian 6.1 with
    /// tests/vm/ofed/ib_core-gid-netns-check.patch), from a netns with no netdev on any rail,
    /// the rail rdma0 holding 10.30.0.1. Trimmed to rxe0 and rxe1 and their first 4 GID slots
    /// of 1024 (the rest read zero from both views).
    #[test]
    fn ofed_vm_pod_without_attachment_from_live_snapshot() {
        let report = analyze(&fixture("ofed-vm-pod-no-attachment"));
        assert!(!report.healthy);
        // No mlx_compat or version here: the out-of-tree taint alone tells the OFED build.
        assert_eq!(report.ib_core.flavor, Flavor::Ofed);
        let port = &report.ports[0];
        assert_eq!(port.rail.as_deref(), Some("rdma0"));
        assert_eq!(port.gids[0].class, GidClass::Hidden);
        assert_eq!(port.gids[1].class, GidClass::Hidden);
        assert_eq!(port.gids[1].host_ndev.as_deref(), Some("rdma0"));
        assert_eq!(
            port.gids[1].host_gid,
            Some("::ffff:10.30.0.1".parse().unwrap())
        );
        assert_eq!(port.gids[2].class, GidClass::EmptyOrHidden);
        let f = message(&report, "no-rail-netdev");
        assert_eq!(f.severity, Severity::Error);
        assert!(
            f.message.starts_with(
                "RDMA devices present but no netdev on rail rdma0 (rxe0 port 1) in this \
                 namespace: its GIDs are hidden by the OFED GID check (2 slots read zero here"
            ),
            "{}",
            f.message
        );
        assert!(codes(&report, Severity::Error).contains(&"no-netdev-on-any-rail"));
    }

    #[test]
    fn ofed_pod_without_host_view_infers_hidden_default_gid() {
        let mut snap = fixture("ofed-pod-no-rail-netdev");
        snap.host = None;
        snap.host_unavailable = Some("inside a pod".into());
        let report = analyze(&snap);
        let port = &report.ports[0];
        assert_eq!(port.rail, None);
        assert_eq!(port.gids[0].class, GidClass::Hidden);
        assert_eq!(port.gids[3].class, GidClass::EmptyOrHidden);
        let f = message(&report, "no-rail-netdev");
        assert!(
            f.message.contains("no netdev on mlx5_6 port 1 in"),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("hidden by the OFED GID check"),
            "{}",
            f.message
        );
    }

    #[test]
    fn exclusive_mode_without_device() {
        let report = analyze(&fixture("exclusive-no-device"));
        assert!(!report.healthy);
        let f = message(&report, "exclusive-no-device");
        assert_eq!(f.severity, Severity::Error);
        assert!(
            f.message.starts_with(
                "exclusive mode and no RDMA device in this namespace (the node has 2)"
            ),
            "{}",
            f.message
        );
        assert!(f.fix.as_deref().unwrap().contains("netns_mode=1"));
        assert_eq!(codes(&report, Severity::Error), ["exclusive-no-device"]);
    }

    #[test]
    fn ipv6_placeholder_before_slaac_gid_is_flagged() {
        let report = analyze(&fixture("ipv6-placeholder"));
        assert!(!report.healthy);
        let net1 = report.netdevs.iter().find(|n| n.name == "net1").unwrap();
        // fd01:0:0:100::5/112 got GID 5, the SLAAC address GID 9.
        assert_eq!(net1.recommended_gid_index, Some(9));
        let placeholder = net1
            .addresses
            .iter()
            .find(|a| a.address == "fd01:0:0:100::5/112")
            .unwrap();
        assert!(placeholder.placeholder);
        assert_eq!(placeholder.roce_v2_gid_index, Some(5));
        let f = message(&report, "placeholder-gid-first");
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.message.contains("index 5"), "{}", f.message);
        assert!(f.fix.as_deref().unwrap().contains("UCX_IB_GID_INDEX=9"));
        assert!(message(&report, "gid-index")
            .message
            .contains("should be 9"));
        assert_eq!(codes(&report, Severity::Error), Vec::<&str>::new());
    }

    #[test]
    fn tentative_address_has_no_gid_yet() {
        let report = analyze(&fixture("tentative-address"));
        assert!(!report.healthy);
        let f = message(&report, "tentative-address");
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.message.contains("2001:db8:6::10/64 on net1"),
            "{}",
            f.message
        );
        // Its only routable address has no GID yet.
        assert_eq!(
            message(&report, "no-usable-gid").message,
            "net1 (ipvlan of rail rdma0, rxe0 port 1) has no usable routable RoCE v2 GID: it \
             has no address past DAD"
        );
    }

    #[test]
    fn ib_core_detection() {
        let upstream = IbCoreFacts {
            present: true,
            loadable: true,
            srcversion: Some("ABC".into()),
            taint: Some(String::new()),
            ..IbCoreFacts::default()
        };
        assert_eq!(classify_ib_core(&upstream, true).flavor, Flavor::Upstream);
        let builtin = IbCoreFacts {
            present: true,
            ..IbCoreFacts::default()
        };
        let c = classify_ib_core(&builtin, true);
        assert_eq!(c.flavor, Flavor::Upstream);
        assert!(c.evidence[0].contains("built into"));
        let dkms = IbCoreFacts {
            taint: Some("OE".into()),
            ..upstream.clone()
        };
        assert_eq!(classify_ib_core(&dkms, true).flavor, Flavor::Ofed);
        let versioned = IbCoreFacts {
            version: Some("25.07-0.9.7".into()),
            ..upstream
        };
        assert_eq!(classify_ib_core(&versioned, true).flavor, Flavor::Ofed);
        let absent = IbCoreFacts::default();
        assert_eq!(classify_ib_core(&absent, false).flavor, Flavor::NotLoaded);
        assert_eq!(classify_ib_core(&absent, true).flavor, Flavor::Unknown);
    }

    #[test]
    fn node_view_is_healthy_without_children() {
        // The healthy pod's host view, seen as the target itself.
        let pod = fixture("healthy-pod");
        let host = pod.host.clone().unwrap();
        let snap = Snapshot {
            target: "this process".into(),
            target_is_pid1_netns: true,
            devices: host.devices,
            host: None,
            host_unavailable: None,
            netdevs: vec![
                Netdev {
                    index: 2,
                    name: "rdma0".into(),
                    kind: None,
                    parent_index: None,
                    parent_elsewhere: false,
                    alias: None,
                    up: true,
                    addresses: vec![],
                },
                Netdev {
                    index: 3,
                    name: "rdma1".into(),
                    kind: None,
                    parent_index: None,
                    parent_elsewhere: false,
                    alias: None,
                    up: true,
                    addresses: vec![],
                },
            ],
            ..pod
        };
        let report = analyze(&snap);
        assert!(report.healthy, "{:#?}", report.findings);
        assert_eq!(report.ports[0].netdevs_here, ["rdma0"]);
        assert_eq!(report.ports[1].rail.as_deref(), Some("rdma1"));
        assert!(report.findings.iter().all(|f| f.code != "gid-index"));
    }
}
