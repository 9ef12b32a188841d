//! The route netlink reply parsers (kernel/netlink.rs): links, addresses, routes and rules as
//! lookups and dumps read them, the SLAAC wait's address events, and a dump's answer over
//! several datagrams. The kernel is trusted to send well-formed replies, but a reader that
//! panics aborts ADD with nothing undone (panic = "abort"), so none may, whatever the bytes;
//! and what they accept must be usable as it is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_ipvlan::fuzzing::route;

fuzz_target!(|data: &[u8]| {
    // First byte: which parser; the rest: its input.
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 6 {
        0 => {
            if let Some(link) = route::link(rest) {
                assert!(!link.name.contains('\0'), "{link:?}");
            }
        }
        1 => {
            if let Some(addr) = route::address(rest) {
                let bits = if addr.ip.is_ipv4() { 32 } else { 128 };
                assert!(addr.prefix <= bits, "{addr:?}");
            }
        }
        2 => {
            let _ = route::route(rest);
        }
        3 => {
            let _ = route::rule(rest);
        }
        4 => {
            // As sent by the kernel (port 0): every event is an IPv6 address with a prefix
            // of at most 128 bits. From any other sender: none.
            for event in route::address_events(0, rest) {
                use roce_ipvlan::fuzzing::route::AddrEvent;
                if let AddrEvent::New(a) | AddrEvent::Del(a) = event {
                    assert!(a.prefix <= 128, "{a:?}");
                }
            }
            assert!(route::address_events(1, rest).is_empty());
        }
        _ => {
            // A dump over up to four datagrams (split at 0xff 0xfe), request 1, RTM_NEWLINK.
            let parts: Vec<&[u8]> = split(rest);
            if let Some(Ok(payloads)) = route::answer(&parts, 1, 16) {
                for p in payloads {
                    let _ = route::link(&p);
                }
            }
        }
    }
});

fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while parts.len() < 3 {
        match rest.windows(2).position(|w| w == [0xff, 0xfe]) {
            Some(at) => {
                parts.push(&rest[..at]);
                rest = &rest[at + 2..];
            }
            None => break,
        }
    }
    parts.push(rest);
    parts
}
