//! `prevResult` (and IPAM results): `CniResult::parse` must never panic, and a result it reads
//! must print in every supported version and read back with the same addresses and routes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_ipvlan::protocol::cni::{CniResult, SUPPORTED_VERSIONS};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(result) = CniResult::parse(&value) else {
        return;
    };
    for version in SUPPORTED_VERSIONS {
        let doc = result.to_json(version, None);
        let again = CniResult::parse(&doc).expect("a printed result reads back");
        assert_eq!(again.ips.len(), result.ips.len());
        for (a, b) in again.ips.iter().zip(&result.ips) {
            assert_eq!(a.address, b.address);
            assert_eq!(a.gateway, b.gateway);
        }
        assert_eq!(again.routes, result.routes);
    }
});
