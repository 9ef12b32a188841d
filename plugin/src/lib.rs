//! roce-ipvlan: a CNI plugin that gives a pod its own IPvlan L2 netdev on a RoCE rail, so that
//! the pod sees, and may use, that netdev's RoCE v2 GID (DOCA-OFED/MLNX_OFED kernels hide GIDs
//! of netdevs in other network namespaces).
//!
//! `run` is the one entry point: it reads the CNI environment and stdin, runs one command, and
//! prints exactly one JSON document (a result or a CNI error) on stdout.

/// The CNI protocol: the environment, the configuration, the result, the errors, the log.
pub mod protocol {
    pub mod cni;
    pub mod config;
    pub(crate) mod error;
    pub mod logging;
    pub(crate) mod private_dir;
    pub(crate) mod rail_inputs;
    pub mod sysctl_keys;
}
/// Kernel adapters: the only code that talks to netlink, namespaces, sysctls, RDMA sysfs and
/// netlink, locks and files.
pub mod kernel {
    pub(crate) mod atomic_file;
    pub(crate) mod lock;
    pub(crate) mod netlink;
    pub(crate) mod netns;
    pub(crate) mod rdma;
    pub(crate) mod sysctl;
}
/// The attachment's steps, which the commands orchestrate: rail, child link, IPAM, routing,
/// IPv6, device-info, the deadline, the undo stack and its test-only failpoints.
pub(crate) mod attach {
    pub(crate) mod budget;
    pub(crate) mod command_stats;
    pub(crate) mod device_info;
    pub(crate) mod failpoint;
    pub(crate) mod gid_capacity;
    pub(crate) mod ipam;
    pub(crate) mod ipv6;
    pub(crate) mod ipvlan;
    pub(crate) mod pod_record;
    pub(crate) mod rail;
    pub(crate) mod routing;
    pub(crate) mod undo;
}
/// The CNI commands: each orchestrates the attachment's steps; none imports another.
pub(crate) mod commands {
    pub(crate) mod add;
    pub(crate) mod check;
    pub(crate) mod del;
    pub(crate) mod gc;
    pub(crate) mod status;
}
/// The operator subcommands (`roce-ipvlan <subcommand>`).
pub(crate) mod tools {
    pub(crate) mod annotate;
    pub(crate) mod cli;
    pub(crate) mod diagnose;
    pub(crate) mod fabric_check;
    pub(crate) mod install;
    pub(crate) mod kube;
    pub(crate) mod metrics;
    pub(crate) mod ready;
    pub(crate) mod validate;
    pub(crate) mod workload_env;
}

/// The private reply parsers, for the fuzz targets (fuzz/, docs/fuzzing.md): only with the
/// `fuzzing` feature, which no shipped build has.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::kernel::netlink::fuzzing as route;
    pub use crate::kernel::rdma::nldev_fuzzing as nldev;
}

/// The operator subcommands' entry points, for main.rs: each takes the arguments after its name
/// and returns the exit status.
pub mod subcommand {
    pub use crate::tools::annotate::main as annotate;
    pub use crate::tools::diagnose::main as diagnose;
    pub use crate::tools::fabric_check::main as fabric_check;
    pub use crate::tools::install::main as install;
    pub use crate::tools::install::uninstall_main as uninstall;
    pub use crate::tools::ready::main as ready;
    pub use crate::tools::validate::main as validate;
    pub use crate::tools::workload_env::main as env;
}

use std::io::Read;

use serde_json::Value;

use crate::commands::{add, check, del, gc, status};
use crate::protocol::cni::{Command, Env};
use crate::protocol::config::NetConf;
use crate::protocol::error::{Error, Result};
use crate::protocol::{cni, config, error, logging};

/// Runs the plugin; returns the process exit code.
pub fn run() -> i32 {
    use std::io::IsTerminal;
    let started = std::time::Instant::now();
    install_panic_hook();
    one_malloc_arena();
    // Read stdin even when the environment is wrong, so that the error is reported in the
    // configuration's cniVersion; but never wait on a terminal (someone ran it by hand).
    let mut stdin = Vec::new();
    let read = if std::io::stdin().is_terminal() {
        Ok(())
    } else {
        std::io::stdin().read_to_end(&mut stdin).map(drop)
    };
    let version = config::peek_version(&stdin).unwrap_or_else(|| "1.1.0".to_string());
    let _ = PANIC_VERSION.set(version.clone());
    let env = read
        .map_err(|e| Error::io("cannot read stdin", e))
        .and_then(|()| Env::from_process());
    let command = env.as_ref().ok().map(|env| env.command);
    let outcome = env.and_then(|env| dispatch(&env, &stdin));
    let code = match outcome {
        Ok(doc) => {
            if let Some(doc) = doc {
                print_document(&doc.to_string());
            }
            0
        }
        Err(err) => {
            tracing::error!(code = err.code(), error = %err, "failed");
            let doc = serde_json::to_string(&err.to_cni(&version))
                .expect("a CNI error always serializes");
            print_document(&doc);
            err.code()
        }
    };
    // After the result is out, so that counting never delays it.
    count_command(command, &stdin, code, started.elapsed());
    i32::from(code != 0)
}

/// Counts an ADD or DEL for the installer's `/metrics` (attach/command_stats.rs); best-effort.
fn count_command(command: Option<Command>, stdin: &[u8], code: u32, took: std::time::Duration) {
    use crate::attach::command_stats;
    let name = match command {
        Some(Command::Add) => "ADD",
        Some(Command::Del) => "DEL",
        _ => return,
    };
    let network = command_stats::peek_network(stdin);
    let dir = std::path::Path::new(command_stats::DIR);
    if let Err(e) = command_stats::record(dir, name, &network, code, took) {
        // Not root (a test, a dry run by hand): nothing to count for a node.
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            tracing::debug!(error = %e, "command not counted");
        } else {
            tracing::warn!(error = %e, dir = %dir.display(), "command not counted for the installer's metrics");
        }
    }
}

/// Prints the one document of stdout. A runtime that went away (a killed Multus leaves its
/// plugins orphaned, writing into a pipe nobody reads: EPIPE) cannot read it anyway, so a
/// failed write is not worth a panic; ADD has already finished or undone its work by now.
fn print_document(doc: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{doc}").and_then(|()| out.flush());
}

/// glibc gives every thread that allocates a malloc arena of its own, reserving 64 MiB of
/// address space for it (an mmap, two munmaps and an mprotect). The plugin's threads (one per
/// entry into the pod's namespace) allocate a few bytes and end; the one arena they then share
/// with the main thread costs them nothing, which matters under emulation, where every
/// syscall and page fault of an ADD counts.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator; called before any other thread
    // exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The cniVersion for the panic hook's error document.
static PANIC_VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// CNI code of a panic: a bug in the plugin, not a condition an operator caused.
pub const INTERNAL_ERROR: u32 = 999;

/// A panic still answers with a CNI error on stdout, so that the runtime logs why. (Release
/// builds abort on panic, so the undo of a half-done ADD does not run: every failure that
/// can happen mid-ADD, such as a thread that cannot be created, is an error instead, and
/// this is only for bugs.)
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let doc = error::CniError {
            cni_version: PANIC_VERSION
                .get()
                .cloned()
                .unwrap_or_else(|| "1.1.0".into()),
            code: INTERNAL_ERROR,
            msg: format!(
                "internal error in roce-ipvlan: {}; please report it with the plugin's log. \
                 Run DEL for this attachment to remove what it may have left",
                info
            ),
            details: String::new(),
        };
        if let Ok(doc) = serde_json::to_string(&doc) {
            // Straight to fd 1: the panic may have happened while stdout's lock was held.
            let line = format!("{doc}\n");
            // SAFETY: writes a buffer that lives for the whole call to fd 1; a closed or
            // broken fd only makes write fail, which is ignored.
            let _ = unsafe { libc::write(1, line.as_ptr().cast(), line.len()) };
        }
        default(info);
    }));
}

fn dispatch(env: &Env, stdin: &[u8]) -> Result<Option<Value>> {
    if env.command == Command::Version {
        // Answered whatever the request says: VERSION is how a runtime finds out which versions
        // to use, so refusing one it does not know would leave it nothing to go on (libcni's
        // skel does not even read stdin for VERSION).
        return Ok(Some(cni::version_reply(
            config::peek_version(stdin).as_deref(),
        )));
    }
    // DEL and GC read only what they need and tolerate the rest (NetConf::parse_teardown):
    // a configuration refused there would strand the attachment.
    let (conf, ignored) = match env.command {
        Command::Del | Command::Gc => {
            let t = NetConf::parse_teardown(stdin)?;
            (t.conf, t.ignored)
        }
        _ => (NetConf::parse(stdin, &env.ifname)?, Vec::new()),
    };
    logging::init(&conf.log);
    let span = tracing::info_span!(
        "cni",
        command = ?env.command,
        container = %env.container_id,
        ifname = %env.ifname,
        netns = %env.netns.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
        network = %conf.name,
    );
    let _entered = span.enter();
    tracing::debug!("configuration read");
    for field in &ignored {
        tracing::warn!(field = %field, "ignored a field of the configuration");
    }
    match env.command {
        Command::Add => add::add(env, &conf).map(Some),
        Command::Del => del::del(env, &conf).map(|()| None),
        Command::Check => check::check(env, &conf).map(|()| None),
        Command::Status => status::status(env, &conf).map(|()| None),
        Command::Gc => gc::gc(env, &conf).map(|()| None),
        Command::Version => unreachable!("handled above"),
    }
}
