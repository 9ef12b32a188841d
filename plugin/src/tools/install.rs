//! `roce-ipvlan install`: copies this binary into a node's CNI directory, for the DaemonSet in
//! deploy/. The image is a static binary on an empty base, so there is no shell to do it.
//!
//! The copy must never be seen half-written: Multus may exec the plugin at any moment. So the
//! binary is written with `atomic_file::write` (a temporary file in the target directory,
//! fsynced, renamed over the target, the directory fsynced): a reader opens either the old
//! file or the new one, and the rename survives a crash of the node. A target with the same content is left alone, so a
//! restarted pod does not rewrite it; a new image has a new binary, and the rollout of the
//! DaemonSet reinstalls it.
//!
//! `roce-ipvlan uninstall` removes the installed binary: the DaemonSet's uninstall mode
//! (docs/deploy.md#uninstall), rolled out on purpose before the DaemonSet is deleted. A plain
//! restart or rolling update of the installer never removes anything: pods attached on the
//! node need the plugin for their DEL.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::tools::cli::{self, Long, Parsed, Short};
use crate::tools::ready::{self, DEFAULT_DIR, DEFAULT_NAME};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    /// The target was missing or different and now holds the new binary.
    Replaced,
    /// The target already had this content.
    UpToDate,
}

/// Installs `source` as `dir/name` atomically, mode 0755.
pub fn install(source: &Path, dir: &Path, name: &str) -> io::Result<Installed> {
    check_name(name)?;
    let content =
        fs::read(source).map_err(|e| annotate(e, &format!("cannot read {}", source.display())))?;
    let target = dir.join(name);
    if same_content(&target, &content)? {
        return Ok(Installed::UpToDate);
    }
    // Executable whatever the umask: the runtime execs it.
    crate::kernel::atomic_file::write(&target, &content, 0o755)?;
    Ok(Installed::Replaced)
}

fn same_content(target: &Path, content: &[u8]) -> io::Result<bool> {
    let mut file = match File::open(target) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(annotate(e, &format!("cannot read {}", target.display()))),
    };
    let meta = file.metadata()?;
    // A copy that lost its mode is rewritten too: Multus could not exec it.
    if meta.len() != content.len() as u64
        || std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777 != 0o755
    {
        return Ok(false);
    }
    let mut existing = Vec::with_capacity(content.len());
    file.read_to_end(&mut existing)?;
    Ok(existing == content)
}

fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    Removed,
    /// There was nothing to remove.
    Absent,
}

/// Removes `dir/name` (a regular file or a symlink, never a directory) and syncs the
/// directory, so that the removal survives a crash of the node.
pub fn uninstall(dir: &Path, name: &str) -> io::Result<Removed> {
    check_name(name)?;
    let target = dir.join(name);
    match fs::symlink_metadata(&target) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removed::Absent),
        Err(e) => return Err(annotate(e, &format!("cannot read {}", target.display()))),
        Ok(m) if m.is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a directory, not the plugin: left alone",
                    target.display()
                ),
            ))
        }
        Ok(_) => {}
    }
    match fs::remove_file(&target) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removed::Absent),
        Err(e) => return Err(annotate(e, &format!("cannot remove {}", target.display()))),
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| annotate(e, &format!("cannot sync {}", dir.display())))?;
    Ok(Removed::Removed)
}

fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ));
    }
    Ok(())
}

/// How often `--wait` checks the installed binary by default.
const DEFAULT_INTERVAL_SECS: u64 = 60;

/// `roce-ipvlan install [--to DIR] [--name NAME] [--from FILE] [--wait [--interval SECS]]`;
/// returns the exit status. With `--wait` it stays up until SIGTERM/SIGINT (the DaemonSet's
/// container; a new image is installed by the next rollout) and checks the installed binary
/// every `--interval` seconds and on SIGHUP: a binary deleted or changed on the host (a node
/// clean-up, another installer) is restored without waiting for the pod to restart.
pub fn main(args: &[String]) -> i32 {
    const USAGE: &str =
        "usage: roce-ipvlan install [--to DIR] [--name NAME] [--from FILE] [--wait \
                 [--interval SECS] [--rails LIST]]\n\
                 Copies the plugin into DIR (default /host/opt/cni/bin) atomically; --wait then \
                 stays up until SIGTERM, restoring the binary if it is deleted or changed \
                 (checked every SECS seconds, default 60, and on SIGHUP), and logs the node's \
                 readiness (`roce-ipvlan ready`) when it changes.";
    let Args {
        dir,
        name,
        from,
        wait,
        interval,
        rails,
    } = match cli::args_or_exit("install", USAGE, parse_args(args)) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let source = match from.map_or_else(std::env::current_exe, Ok) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("roce-ipvlan install: cannot find this binary: {e}");
            return 1;
        }
    };
    // Signals are blocked before anything is printed, so that whoever reads the first line
    // may signal the process (SIGHUP would otherwise kill it).
    let signals = if wait { block_signals() } else { None };
    match install(&source, &dir, &name) {
        Ok(Installed::Replaced) => println!("installed {}", dir.join(&name).display()),
        Ok(Installed::UpToDate) => println!("{} is up to date", dir.join(&name).display()),
        Err(e) => {
            eprintln!("roce-ipvlan install: {e}");
            return 1;
        }
    }
    if wait {
        // The node's readiness (ready.rs) goes to the log when it changes: the probe's output
        // reaches only the pod's events.
        let target = dir.join(&name);
        let mut last_ready = String::new();
        let mut log_ready = move || {
            let (_, text) =
                ready::report(&ready::gather(rails.as_deref(), &target), rails.is_some());
            if text != last_ready {
                println!("{text}");
                last_ready = text;
            }
        };
        log_ready();
        keep_installed(signals, interval, || {
            match install(&source, &dir, &name) {
                Ok(Installed::Replaced) => println!(
                    "restored {}: it was missing or changed",
                    dir.join(&name).display()
                ),
                Ok(Installed::UpToDate) => {}
                // Kept running: the next check may succeed (a remounted or full filesystem).
                Err(e) => eprintln!("roce-ipvlan install: re-check failed: {e}"),
            }
            log_ready();
        });
    }
    0
}

/// `roce-ipvlan uninstall [--to DIR] [--name NAME] [--wait [--interval SECS]] [--check]`;
/// returns the exit status. Removes DIR/NAME; with `--wait` it stays up until SIGTERM/SIGINT and
/// removes it again every `--interval` seconds (an installer pod of the previous mode may still
/// be terminating), so that the DaemonSet in uninstall mode keeps the node clean until it is
/// deleted. `--check` (its readiness probe) removes nothing: exit 0 when DIR/NAME is absent.
pub fn uninstall_main(args: &[String]) -> i32 {
    const USAGE: &str = "usage: roce-ipvlan uninstall [--to DIR] [--name NAME] [--wait \
                 [--interval SECS]] [--check]\n\
                 Removes DIR/NAME (default /host/opt/cni/bin/roce-ipvlan); --wait then stays up \
                 until SIGTERM, removing it again if it comes back (checked every SECS seconds, \
                 default 60). --check removes nothing: exit 0 when it is absent, 1 when not. \
                 Pods still attached through roce-ipvlan on the node need the plugin for their \
                 DEL: delete them first (docs/deploy.md#uninstall).";
    let (args, check) = match cli::args_or_exit("uninstall", USAGE, parse_uninstall_args(args)) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let target = args.dir.join(&args.name);
    if check {
        return match fs::symlink_metadata(&target) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                println!("uninstalled: {} is absent", target.display());
                0
            }
            Ok(_) => {
                println!("not uninstalled: {} is still there", target.display());
                1
            }
            Err(e) => {
                println!("not uninstalled: cannot read {}: {e}", target.display());
                1
            }
        };
    }
    let signals = if args.wait { block_signals() } else { None };
    let remove = |quiet: bool| match uninstall(&args.dir, &args.name) {
        Ok(Removed::Removed) => {
            println!("removed {}", target.display());
            true
        }
        Ok(Removed::Absent) => {
            if !quiet {
                println!("{} is absent: nothing to remove", target.display());
            }
            true
        }
        Err(e) => {
            eprintln!("roce-ipvlan uninstall: {e}");
            false
        }
    };
    if !remove(false) {
        return 1;
    }
    if args.wait {
        keep_installed(signals, args.interval, || {
            remove(true);
        });
    }
    0
}

/// Parsed `uninstall` arguments: `install`'s, without `--from` and `--rails`, with `--check`.
fn parse_uninstall_args(args: &[String]) -> cli::Outcome<(Args, bool)> {
    cli::parse(args, |p| {
        let mut parsed = Args::defaults();
        let mut check = false;
        while let Some(arg) = p.next()? {
            match arg {
                Long("to") => parsed.dir = PathBuf::from(cli::string(p)?),
                Long("name") => parsed.name = cli::string(p)?,
                Long("wait") => parsed.wait = true,
                Long("check") => check = true,
                Long("interval") => parsed.interval = interval(p)?,
                Short('h') | Long("help") => return Ok(Parsed::Help),
                arg => return Err(cli::unexpected(arg)),
            }
        }
        Ok(Parsed::Run((parsed, check)))
    })
}

fn block_signals() -> Option<nix::sys::signal::SigSet> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(sig);
    }
    match set.thread_block() {
        Ok(()) => Some(set),
        Err(e) => {
            eprintln!("roce-ipvlan install: cannot block signals ({e}); running without them");
            None
        }
    }
}

/// Runs `check` every `interval` and on SIGHUP until SIGTERM or SIGINT. As PID 1 of a
/// container the process has no default action for these signals (the kernel ignores them for
/// PID 1), so it must wait for them itself or every pod deletion would wait out the grace
/// period. A thread sigwait()s (the signals are blocked in every thread: the mask is
/// inherited) and hands each one to this loop, which waits on it with a timeout.
fn keep_installed(
    signals: Option<nix::sys::signal::SigSet>,
    interval: std::time::Duration,
    mut check: impl FnMut(),
) {
    use nix::sys::signal::Signal;
    use std::sync::mpsc;
    let (tx, rx) = mpsc::channel();
    if let Some(set) = signals {
        std::thread::spawn(move || loop {
            match set.wait() {
                Ok(sig) if tx.send(sig).is_ok() => {}
                Ok(_) => return,
                Err(e) => {
                    eprintln!("roce-ipvlan install: waiting for signals failed: {e}");
                    return;
                }
            }
        });
    } else {
        // Without signals the loop only re-checks; keep the sender so that it never ends.
        std::mem::forget(tx);
    }
    loop {
        match rx.recv_timeout(interval) {
            Ok(Signal::SIGHUP) | Err(mpsc::RecvTimeoutError::Timeout) => check(),
            Ok(sig) => {
                println!("{sig}: exiting");
                return;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The signal thread failed: keep the plugin installed until the pod is killed.
                loop {
                    std::thread::sleep(interval);
                    check();
                }
            }
        }
    }
}

/// Parsed `install` arguments.
#[derive(Debug, PartialEq)]
struct Args {
    dir: PathBuf,
    name: String,
    from: Option<PathBuf>,
    wait: bool,
    interval: std::time::Duration,
    rails: Option<Vec<String>>,
}

impl Args {
    fn defaults() -> Args {
        Args {
            dir: PathBuf::from(DEFAULT_DIR),
            name: DEFAULT_NAME.to_string(),
            from: None,
            wait: false,
            interval: std::time::Duration::from_secs(DEFAULT_INTERVAL_SECS),
            rails: None,
        }
    }
}

fn interval(p: &mut lexopt::Parser) -> Result<std::time::Duration, cli::Error> {
    match cli::parsed::<u64>(p, "--interval")? {
        0 => Err(cli::Error::new("--interval needs at least 1 second")),
        secs => Ok(std::time::Duration::from_secs(secs)),
    }
}

fn parse_args(args: &[String]) -> cli::Outcome<Args> {
    cli::parse(args, |p| {
        let mut parsed = Args::defaults();
        while let Some(arg) = p.next()? {
            match arg {
                Long("to") => parsed.dir = PathBuf::from(cli::string(p)?),
                Long("name") => parsed.name = cli::string(p)?,
                Long("from") => parsed.from = Some(PathBuf::from(cli::string(p)?)),
                Long("wait") => parsed.wait = true,
                Long("rails") => parsed.rails = Some(ready::rail_list(&cli::string(p)?)?),
                Long("interval") => parsed.interval = interval(p)?,
                Short('h') | Long("help") => return Ok(Parsed::Help),
                arg => return Err(cli::unexpected(arg)),
            }
        }
        Ok(Parsed::Run(parsed))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn file_with(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn arguments() {
        let args = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let Ok(Parsed::Run(a)) = parse_args(&args(&["--to=/x", "--wait", "--interval", "5"]))
        else {
            panic!("valid arguments");
        };
        assert_eq!(a.dir, PathBuf::from("/x"));
        assert!(a.wait);
        assert_eq!(a.interval, std::time::Duration::from_secs(5));
        assert_eq!(
            parse_args(&args(&["--wait", "--help"])).unwrap(),
            Parsed::Help
        );
        for bad in [
            &["--to"][..],
            &["--interval", "0"],
            &["--interval=x"],
            &["--rails", ","],
            &["--bogus"],
            &["dir"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn uninstall_arguments() {
        let args = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let Ok(Parsed::Run((a, check))) =
            parse_uninstall_args(&args(&["--to=/x", "--wait", "--interval", "5"]))
        else {
            panic!("valid arguments");
        };
        assert_eq!(
            (a.dir, a.wait, a.interval, check),
            (
                PathBuf::from("/x"),
                true,
                std::time::Duration::from_secs(5),
                false
            )
        );
        assert!(matches!(
            parse_uninstall_args(&args(&["--check"])),
            Ok(Parsed::Run((_, true)))
        ));
        for bad in [
            &["--from", "/y"][..],
            &["--rails", "rdma0"],
            &["--interval", "0"],
        ] {
            assert!(parse_uninstall_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn uninstall_removes_the_binary_and_nothing_else() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let a = file_with(src.path(), "a", b"version a");
        file_with(dst.path(), "bridge", b"another plugin");
        install(&a, dst.path(), "roce-ipvlan").unwrap();
        assert_eq!(
            uninstall(dst.path(), "roce-ipvlan").unwrap(),
            Removed::Removed
        );
        assert!(!dst.path().join("roce-ipvlan").exists());
        assert_eq!(
            uninstall(dst.path(), "roce-ipvlan").unwrap(),
            Removed::Absent
        );
        assert_eq!(
            fs::read(dst.path().join("bridge")).unwrap(),
            b"another plugin"
        );
        fs::create_dir(dst.path().join("dir")).unwrap();
        let err = uninstall(dst.path(), "dir").unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
        assert!(uninstall(dst.path(), "../bridge").is_err());
    }

    #[test]
    fn a_copy_that_lost_its_mode_is_rewritten() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let a = file_with(src.path(), "a", b"version a");
        install(&a, dst.path(), "roce-ipvlan").unwrap();
        let target = dst.path().join("roce-ipvlan");
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            install(&a, dst.path(), "roce-ipvlan").unwrap(),
            Installed::Replaced
        );
        assert_eq!(
            fs::metadata(&target).unwrap().permissions().mode() & 0o7777,
            0o755
        );
    }

    #[test]
    fn installs_then_is_up_to_date_then_replaces() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let a = file_with(src.path(), "a", b"version a");
        let b = file_with(src.path(), "b", b"version b, longer");
        assert_eq!(
            install(&a, dst.path(), "roce-ipvlan").unwrap(),
            Installed::Replaced
        );
        let target = dst.path().join("roce-ipvlan");
        assert_eq!(fs::read(&target).unwrap(), b"version a");
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&target).unwrap());
        assert_eq!(
            install(&a, dst.path(), "roce-ipvlan").unwrap(),
            Installed::UpToDate
        );
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&fs::metadata(&target).unwrap()),
            inode,
            "an up-to-date target is not rewritten"
        );
        assert_eq!(
            install(&b, dst.path(), "roce-ipvlan").unwrap(),
            Installed::Replaced
        );
        assert_eq!(fs::read(&target).unwrap(), b"version b, longer");
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dst.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("roce-ipvlan")]);
    }

    #[test]
    fn failures_say_what_and_leave_nothing() {
        let dst = tempfile::tempdir().unwrap();
        let err = install(Path::new("/nonexistent/x"), dst.path(), "p").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x"), "{err}");
        let src = tempfile::tempdir().unwrap();
        let a = file_with(src.path(), "a", b"x");
        let err = install(&a, &dst.path().join("missing"), "p").unwrap_err();
        assert!(err.to_string().contains("cannot create"), "{err}");
        assert!(install(&a, dst.path(), "../p").is_err());
        assert_eq!(fs::read_dir(dst.path()).unwrap().count(), 0);
    }

    /// A reader that opens the target in a loop while it is replaced over and over must only
    /// ever see one whole version, never a mix, a truncated file or a missing one.
    #[test]
    fn a_concurrent_reader_never_sees_a_partial_file() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        // Large enough that a plain write would be observed in pieces.
        let a = vec![b'a'; 4 << 20];
        let mut b = vec![b'b'; (4 << 20) + 4096];
        b[0] = b'B';
        let pa = file_with(src.path(), "a", &a);
        let pb = file_with(src.path(), "b", &b);
        install(&pa, dst.path(), "plugin").unwrap();

        let target = dst.path().join("plugin");
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stop, target, a, b) = (stop.clone(), target.clone(), a.clone(), b.clone());
            std::thread::spawn(move || {
                let mut reads = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let got = fs::read(&target).expect("the target always exists");
                    assert!(
                        got == a || got == b,
                        "read a partial or mixed file of {} bytes",
                        got.len()
                    );
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..40 {
            let src = if i % 2 == 0 { &pb } else { &pa };
            assert_eq!(
                install(src, dst.path(), "plugin").unwrap(),
                Installed::Replaced
            );
        }
        stop.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("the reader saw only whole files");
        assert!(reads > 0);
    }
}
