//! `roce-ipvlan env`: run inside a pod (or any netns), find the pod's roce-ipvlan rails, check
//! each against the GID table as this netns sees it, and print NCCL/UCX settings under which
//! both libraries use exactly those rails and GIDs.
//!
//! libcni and Multus drop the `roce` result extension, so the rails are found by the interface
//! alias ADD writes on each child (`rdma_dev=… port=… gid_index=… gid=…`). The alias is a
//! claim, not proof: the GID at that index must still be that value with type RoCE v2.
//!
//! When every rail's GID sits at the same index the settings are NCCL_IB_GID_INDEX and
//! UCX_IB_GID_INDEX. Otherwise (indexes are first-free slots, so they can differ) the libraries'
//! own selection is steered by family/range (NCCL) and subnets (UCX), and the models in
//! [`select`] must pick the reported GID on every rail, or nothing is printed.
//!
//! This file holds the command line, the errors and the types the parts share; `discover`
//! finds and checks the rails, `plan` chooses the settings, `render` prints them, `exec` works
//! out the environment for `--exec`.

mod discover;
pub mod exec;
mod plan;
mod render;
pub mod select;

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::kernel::rdma::{Gid, RdmaPort};
use crate::protocol::cni::Roce;
use crate::tools::cli::{self, Long, Parsed, Short};
use exec::{Conflict, OnConflict};

use discover::discover;
use plan::plan;
use render::{render, shell_quote};

const USAGE: &str = "\
usage: roce-ipvlan env [--format shell|json|nccl-conf] [--output FILE] [--sys DIR]
       roce-ipvlan env [--on-conflict replace|refuse] [--sys DIR] --exec [--] CMD [ARGS...]

Prints NCCL/UCX settings for this network namespace's roce-ipvlan rails:
  shell      (default) unset/export lines, for: eval \"$(roce-ipvlan env)\"
  json       rails, settings and notes
  nccl-conf  KEY=VALUE lines for /etc/nccl.conf (NCCL settings only)
--output FILE writes FILE (atomically) instead of stdout: for init containers without a shell.
--exec runs CMD (no shell) with the settings in its environment. A variable already set to
  another value, or set when the settings need it unset, is a conflict:
  --on-conflict replace  (default) the settings win; a warning on stderr names each variable
  --on-conflict refuse   CMD is not started, exit status 1
--sys DIR reads DIR instead of /sys (recorded trees, debugging).
Exit status: 0 printed, 1 no rails / stale GID / no correct settings / refused conflict,
2 usage, 126/127 CMD could not be run; otherwise CMD's own (it replaces this process).
";

/// Why `env` printed no settings.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
    #[error(
        "no roce-ipvlan rails in this network namespace: none of the {scanned} interfaces under \
         {dir} has an alias of the form 'rdma_dev=<dev> port=<port> gid_index=<n> gid=<gid>'. \
         Run this inside the pod (or `ip netns exec <pod> roce-ipvlan env`), after its \
         roce-ipvlan attachments were added"
    )]
    NoRails { scanned: usize, dir: String },
    #[error(
        "rail {ifname} ({port}): its alias says GID {gid} at index {index}, but {found}. The GID \
         is gone or moved (address removed, interface re-addressed, or the pod cannot see it); \
         not trusting it. Recreate the pod, or check `roce-ipvlan diagnose`"
    )]
    StaleGid {
        ifname: String,
        port: RdmaPort,
        gid: std::net::Ipv6Addr,
        index: u32,
        found: String,
    },
    #[error("cannot read {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("no NCCL/UCX settings select the right GID on every rail: {0}")]
    Unexpressible(String),
    #[error(
        "not starting {command:?}: the environment already sets {}, which would override the \
         GID selection for this pod's rails. Remove them from the container's environment, or \
         run with --on-conflict replace to let env's settings win",
        .conflicts.iter().map(Conflict::to_string).collect::<Vec<_>>().join(", ")
    )]
    Conflicts {
        command: String,
        conflicts: Vec<Conflict>,
    },
    #[error("cannot run {command:?}: {source}")]
    Exec {
        command: String,
        #[source]
        source: io::Error,
    },
}

impl EnvError {
    fn exit_code(&self) -> i32 {
        match self {
            EnvError::Usage(_) => 2,
            // As env(1) and POSIX shells: 127 not found, 126 found but not runnable.
            EnvError::Exec { source, .. } if source.kind() == io::ErrorKind::NotFound => 127,
            EnvError::Exec { .. } => 126,
            _ => 1,
        }
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Shell,
    Json,
    NcclConf,
}

/// One rail of the pod: its interface, what the alias says, and the port's GID table as this
/// netns sees it (indexed by GID index).
#[derive(Debug, Clone)]
pub struct Rail {
    pub ifname: String,
    pub roce: Roce,
    pub table: Vec<Gid>,
}

/// What `env` prints, in any format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Settings in output order.
    pub env: Vec<(&'static str, String)>,
    /// Variables that must not be set: they would override or conflict with `env`.
    pub unset: Vec<&'static str>,
    /// Facts the user should know (version requirements).
    pub notes: Vec<String>,
}

/// Entry point of the subcommand; returns the exit code.
pub fn main(args: &[String]) -> i32 {
    match run(args) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(err) => {
            eprintln!("roce-ipvlan env: {err}");
            err.exit_code()
        }
    }
}

/// The parsed command line.
#[derive(Debug)]
struct Args {
    format: Option<Format>,
    sys: PathBuf,
    output: Option<PathBuf>,
    on_conflict: Option<OnConflict>,
    /// `--exec`: the command and its arguments.
    exec: Option<Vec<String>>,
}

fn parse(args: &[String]) -> cli::Outcome<Args> {
    let parsed = cli::parse(args, |p| {
        let mut parsed = Args {
            format: None,
            sys: PathBuf::from("/sys"),
            output: None,
            on_conflict: None,
            exec: None,
        };
        while let Some(arg) = p.next()? {
            match arg {
                Long("format") | Short('f') => {
                    parsed.format = Some(cli::choice(
                        p,
                        "--format",
                        &[
                            ("shell", Format::Shell),
                            ("json", Format::Json),
                            ("nccl-conf", Format::NcclConf),
                        ],
                    )?)
                }
                Long("sys") => parsed.sys = PathBuf::from(cli::string(p)?),
                Long("output") | Short('o') => parsed.output = Some(PathBuf::from(cli::string(p)?)),
                Long("on-conflict") => {
                    parsed.on_conflict = Some(cli::choice(
                        p,
                        "--on-conflict",
                        &[
                            ("replace", OnConflict::Replace),
                            ("refuse", OnConflict::Refuse),
                        ],
                    )?)
                }
                // The rest of the command line is the command's, its options included.
                Long("exec") => {
                    let command = cli::rest(p)?;
                    if command.is_empty() {
                        return Err(cli::Error::new("--exec needs a command"));
                    }
                    parsed.exec = Some(command);
                }
                Short('h') | Long("help") => return Ok(Parsed::Help),
                arg => return Err(cli::unexpected(arg)),
            }
        }
        Ok(Parsed::Run(parsed))
    })?;
    let Parsed::Run(parsed) = parsed else {
        return Ok(Parsed::Help);
    };
    if parsed.exec.is_some() && (parsed.format.is_some() || parsed.output.is_some()) {
        return Err(cli::Error::new(
            "--exec prints nothing: it cannot be combined with --format or --output",
        ));
    }
    if parsed.exec.is_none() && parsed.on_conflict.is_some() {
        return Err(cli::Error::new(
            "--on-conflict applies to --exec only (the shell format unsets and exports \
             every variable itself)",
        ));
    }
    Ok(Parsed::Run(parsed))
}

fn run(args: &[String]) -> Result<String, EnvError> {
    let args = match parse(args).map_err(|e| EnvError::Usage(e.to_string()))? {
        Parsed::Run(args) => args,
        Parsed::Help => return Ok(USAGE.to_string()),
    };
    let rails = discover(&args.sys)?;
    let plan = plan(&rails)?;
    if let Some(command) = &args.exec {
        let mode = args.on_conflict.unwrap_or(OnConflict::Replace);
        return Err(exec_with(&plan, command, mode));
    }
    let text = render(args.format.unwrap_or(Format::Shell), &rails, &plan);
    match args.output {
        None => Ok(text),
        Some(path) => write_atomically(&path, &text).map(|()| String::new()),
    }
}

/// Replaces this process with `command` under the plan's settings; returns only on failure.
fn exec_with(plan: &Plan, command: &[String], mode: OnConflict) -> EnvError {
    let current = |key: &str| -> Option<OsString> { std::env::var_os(key) };
    let changes = match exec::changes(plan, current, mode) {
        Ok(changes) => changes,
        Err(conflicts) => {
            return EnvError::Conflicts {
                command: command[0].clone(),
                conflicts,
            }
        }
    };
    for conflict in &changes.replaced {
        eprintln!("roce-ipvlan env: warning: replacing {conflict}");
    }
    for note in &plan.notes {
        eprintln!("roce-ipvlan env: note: {note}");
    }
    let settings: Vec<String> = changes
        .set
        .iter()
        .map(|(k, v)| format!("{k}={}", shell_quote(v)))
        .collect();
    eprintln!(
        "roce-ipvlan env: exec {:?} with {}{}",
        command[0],
        settings.join(" "),
        if changes.remove.is_empty() {
            String::new()
        } else {
            format!(", without {}", changes.remove.join(" "))
        }
    );
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    for key in &changes.remove {
        cmd.env_remove(key);
    }
    for (key, value) in &changes.set {
        cmd.env(key, value);
    }
    EnvError::Exec {
        command: command[0].clone(),
        source: cmd.exec(),
    }
}

/// Writes atomically, so a reader never sees half a file.
fn write_atomically(path: &Path, text: &str) -> Result<(), EnvError> {
    crate::kernel::atomic_file::write(path, text.as_bytes(), 0o644).map_err(|source| EnvError::Io {
        what: format!("{} (--output)", path.display()),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::net::Ipv6Addr;

    #[test]
    fn discovers_rails_from_a_recorded_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        let net = |name: &str, index: u32, alias: &str| {
            let d = sys.join("class/net").join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("ifindex"), format!("{index}\n")).unwrap();
            fs::write(d.join("ifalias"), format!("{alias}\n")).unwrap();
        };
        net("lo", 1, "");
        net("eth0", 2, "something else");
        net(
            "net2",
            4,
            "rdma_dev=rxe1 port=1 gid_index=1 gid=::ffff:10.9.1.7",
        );
        net(
            "net1",
            3,
            "rdma_dev=rxe0 port=1 gid_index=1 gid=::ffff:10.9.0.7",
        );
        let port = |dev: &str, gids: &[(&str, Option<&str>)]| {
            let p = sys.join("class/infiniband").join(dev).join("ports/1");
            fs::create_dir_all(p.join("gids")).unwrap();
            fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
            fs::create_dir_all(p.join("gid_attrs/ndevs")).unwrap();
            for (i, (gid, t)) in gids.iter().enumerate() {
                let long = gid.parse::<Ipv6Addr>().unwrap().segments();
                let text: Vec<String> = long.iter().map(|x| format!("{x:04x}")).collect();
                fs::write(p.join(format!("gids/{i}")), text.join(":") + "\n").unwrap();
                if let Some(t) = t {
                    fs::write(p.join(format!("gid_attrs/types/{i}")), format!("{t}\n")).unwrap();
                    fs::write(p.join(format!("gid_attrs/ndevs/{i}")), "net1\n").unwrap();
                }
            }
        };
        port(
            "rxe0",
            &[
                ("fe80::1", Some("RoCE v2")),
                ("::ffff:10.9.0.7", Some("RoCE v2")),
            ],
        );
        port(
            "rxe1",
            &[
                ("fe80::2", Some("RoCE v2")),
                ("::ffff:10.9.1.7", Some("RoCE v2")),
            ],
        );
        let rails = discover(sys).unwrap();
        let names: Vec<&str> = rails.iter().map(|r| r.ifname.as_str()).collect();
        assert_eq!(names, ["net1", "net2"]);
        let out = run(&[
            "--format".into(),
            "nccl-conf".into(),
            "--sys".into(),
            sys.display().to_string(),
        ])
        .unwrap();
        assert!(out.contains("NCCL_IB_HCA==rxe0:1,rxe1:1\n"), "{out}");
        let file = sys.join("nccl.conf");
        let args = [
            "-o",
            file.to_str().unwrap(),
            "--format=nccl-conf",
            "--sys",
            sys.to_str().unwrap(),
        ];
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        assert_eq!(run(&args).unwrap(), "");
        assert_eq!(fs::read_to_string(&file).unwrap(), out);

        // The GID disappears: an error naming the rail, not settings.
        fs::write(
            sys.join("class/infiniband/rxe1/ports/1/gids/1"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        )
        .unwrap();
        let err = discover(sys).unwrap_err();
        assert!(err.to_string().contains("rail net2"), "{err}");

        let empty = tempfile::tempdir().unwrap();
        fs::create_dir_all(empty.path().join("class/net/lo")).unwrap();
        assert!(matches!(
            discover(empty.path()),
            Err(EnvError::NoRails { scanned: 1, .. })
        ));
    }

    #[test]
    fn exec_takes_the_rest_of_the_command_line() {
        let args = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let run = |v: &[&str]| match parse(&args(v)).unwrap() {
            Parsed::Run(p) => p,
            Parsed::Help => panic!("{v:?} is not a help request"),
        };
        let p = run(&["--sys", "/x", "--exec", "--", "cmd", "--on-conflict", "-f"]);
        assert_eq!(p.sys, PathBuf::from("/x"));
        assert_eq!(
            p.exec.unwrap(),
            ["cmd", "--on-conflict", "-f"],
            "flags after --exec are the command's"
        );
        assert_eq!(p.on_conflict, None);
        let p = run(&["--on-conflict=refuse", "--exec", "cmd", "--", "x"]);
        assert_eq!(
            p.exec.unwrap(),
            ["cmd", "--", "x"],
            "only a leading -- is dropped"
        );
        assert_eq!(p.on_conflict, Some(OnConflict::Refuse));
        assert_eq!(run(&["--exec", "cmd", "-h"]).exec.unwrap(), ["cmd", "-h"]);
        for bad in [
            &["--exec"][..],
            &["--exec", "--"],
            &["--output", "f", "--exec", "cmd"],
            &["--on-conflict", "replace"],
            &["--on-conflict", "ignore", "--exec", "cmd"],
            &["--exec=cmd"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn usage_errors_exit_2() {
        let err = run(&["--format".into(), "yaml".into()]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert_eq!(run(&["--bogus".into()]).unwrap_err().exit_code(), 2);
    }
}
