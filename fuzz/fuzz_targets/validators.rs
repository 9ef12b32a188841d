//! The name validators: `validate_ifname` and `sysctl_keys::validate` must never panic, and what they
//! accept must stay inside its directory: an interface name is one path component, a sysctl is
//! a file under /proc/sys/net/ipv{4,6}/{conf,neigh}/<this interface|all|default>/.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_ipvlan::protocol::cni::validate_ifname;
use roce_ipvlan::protocol::sysctl_keys as sysctl;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // key \0 value \0 ifname
    let mut parts = text.splitn(3, '\0');
    let key = parts.next().unwrap_or_default();
    let value = parts.next().unwrap_or("1");
    let ifname = parts.next().unwrap_or("net1");

    if validate_ifname(key).is_ok() {
        assert!((1..=15).contains(&key.len()));
        assert!(key != "." && key != "..");
        assert!(!key.contains(['/', ':', '%', '\0']) && !key.chars().any(char::is_whitespace));
    }
    if validate_ifname(ifname).is_err() {
        return;
    }
    if let Ok(s) = sysctl::validate(key, value, ifname) {
        let path = s.proc_path();
        assert!(path.starts_with("/proc/sys/net/"), "{path:?}");
        assert_eq!(path.components().count(), 8, "{path:?}");
        assert!(path.components().all(|c| matches!(
            c,
            std::path::Component::RootDir | std::path::Component::Normal(_)
        )));
        assert!(s.path[3] == ifname || s.path[3] == "all" || s.path[3] == "default");
        assert!(!s.value.is_empty() && !s.value.contains('\n'));
    }
});
