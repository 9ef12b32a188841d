//! The RDMA netlink reply parser (kernel/rdma/nldev.rs): one datagram answering request 1 of
//! RDMA_NLDEV_CMD_GET, PORT_GET or SYS_GET, each reply read as a device, a port and the netns
//! mode. None may panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_ipvlan::fuzzing::nldev;

/// RDMA_NL_NLDEV (5) << 10 | the command: GET 1, PORT_GET 5, SYS_GET 6.
const TYPES: [u16; 3] = [(5 << 10) | 1, (5 << 10) | 5, (5 << 10) | 6];

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let _ = nldev::replies(rest, 1, TYPES[usize::from(which) % TYPES.len()]);
});
