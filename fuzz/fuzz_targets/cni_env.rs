//! The CNI environment (protocol/cni.rs): `Env::parse` over CNI_COMMAND, CNI_CONTAINERID,
//! CNI_NETNS, CNI_IFNAME, CNI_PATH and CNI_ARGS, and the CNI_ARGS that DEL passes on to IPAM.
//! What is accepted must hold: an interface name and a container id that follow their rules
//! (except at DEL, which takes any), a CNI_ARGS of KEY=VALUE entries (except at DEL), and the
//! entries passed to IPAM at DEL are all KEY=VALUE.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_ipvlan::protocol::cni::{
    is_valid_name, validate_ifname, well_formed_cni_args, Command, Env,
};

const COMMANDS: [&str; 7] = ["ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC", ""];

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    // CONTAINERID \0 NETNS \0 IFNAME \0 PATH \0 ARGS
    let mut fields = text.split('\0');
    let mut next = || fields.next().map(str::to_string);
    let vars = [
        (
            "CNI_COMMAND",
            Some(COMMANDS[usize::from(which) % COMMANDS.len()].to_string()),
        ),
        ("CNI_CONTAINERID", next()),
        ("CNI_NETNS", next()),
        ("CNI_IFNAME", next()),
        ("CNI_PATH", next()),
        ("CNI_ARGS", next()),
    ];
    let get = |k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .and_then(|(_, v)| v.clone())
    };
    let args = get("CNI_ARGS").unwrap_or_default();
    for kv in well_formed_cni_args(&args)
        .split(';')
        .filter(|kv| !kv.is_empty())
    {
        let (k, _) = kv.split_once('=').expect("a passed-on entry is KEY=VALUE");
        assert!(!k.is_empty(), "{kv:?}");
    }
    let Ok(env) = Env::parse(get) else {
        return;
    };
    if matches!(env.command, Command::Add | Command::Check) {
        assert!(validate_ifname(&env.ifname).is_ok(), "{env:?}");
        assert!(is_valid_name(&env.container_id), "{env:?}");
        assert!(env.netns.is_some(), "{env:?}");
        // A CNI_ARGS accepted here loses nothing on its way to IPAM.
        let entries: Vec<&str> = args.split(';').filter(|kv| !kv.is_empty()).collect();
        assert_eq!(well_formed_cni_args(&args), entries.join(";"));
    }
});
