//! The network configuration on stdin: `NetConf::parse` must never panic, and whatever it
//! accepts must keep its promises: sysctls confined to the attachment's subtree, a
//! device-info path that is absolute and has no `..`, an IPAM type that is a plain name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_ipvlan::protocol::config::NetConf;

fuzz_target!(|data: &[u8]| {
    // The first byte picks CNI_IFNAME, so that IFNAME replacement and literal names are both
    // exercised; STATUS and GC parse with no interface name at all.
    let (ifname, conf) = match data.split_first() {
        Some((b, rest)) => (["net1", "eth0.100", "rdma-x", ""][(*b % 4) as usize], rest),
        None => ("net1", data),
    };
    let Ok(c) = NetConf::parse(conf, ifname) else {
        return;
    };
    for s in &c.sysctls {
        assert_eq!(s.path.len(), 5, "{s:?}");
        assert_eq!(s.path[0], "net");
        assert!(s.path[1] == "ipv4" || s.path[1] == "ipv6", "{s:?}");
        assert!(s.path[2] == "conf" || s.path[2] == "neigh", "{s:?}");
        assert!(
            s.path[3] == ifname
                || (s.path[2] == "conf" && (s.path[3] == "all" || s.path[3] == "default")),
            "{s:?}"
        );
        assert!(
            !s.path[4].is_empty() && !s.path[4].contains(['/', '.']),
            "{s:?}"
        );
        assert!(s.proc_path().starts_with("/proc/sys/net/"));
    }
    if let Some(ipam) = &c.ipam {
        assert!(!ipam.kind.is_empty() && !ipam.kind.contains('/') && ipam.kind != "..");
    }
    if let Some(p) = &c.device_info_file {
        assert!(p.is_absolute());
        assert!(!p.components().any(|c| c == std::path::Component::ParentDir));
        // Directly in Multus's per-attachment directory, never the device plugins' dp/.
        let dir = p.parent().and_then(|d| d.to_str()).unwrap_or_default();
        assert!(
            dir == "/var/run/k8s.cni.cncf.io/devinfo/cni" || dir == "/run/k8s.cni.cncf.io/devinfo/cni",
            "{p:?}"
        );
    }
    if let Some(d) = &c.rdma.device {
        assert!(!d.contains('/') && !d.starts_with('.'));
    }
    if let Some(f) = &c.log.file {
        assert_eq!(
            f.parent(),
            Some(std::path::Path::new(roce_ipvlan::protocol::logging::LOG_DIR))
        );
    }
    assert!(roce_ipvlan::protocol::cni::is_valid_name(&c.name));
});
