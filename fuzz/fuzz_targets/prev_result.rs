//! `prevResult` (and IPAM results): `CniResult::parse` must never panic, and a result it reads
//! must print in every supported version and read back with the same addresses and routes (in a
//! version before 1.1.0, the routes without the fields 1.1.0 added).
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
        if *version == "1.1.0" {
            assert_eq!(again.routes, result.routes);
        } else {
            assert_eq!(again.routes.len(), result.routes.len());
            for (a, b) in again.routes.iter().zip(&result.routes) {
                assert_eq!((a.dst, a.gw), (b.dst, b.gw));
                assert!(
                    a.extra.is_empty(),
                    "{version} result says 1.1.0 route fields"
                );
            }
        }
    }
});
