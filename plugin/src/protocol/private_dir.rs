//! The directories the plugin, as root, writes in: its log directory (logging.rs), its locks
//! (kernel/lock.rs) and its attachment records (attach/pod_record.rs). Whoever could put
//! something in their place could make a root process create, append to or remove files where
//! it chose, so each is opened under one rule (docs/security.md):
//! - created with `mkdir` and the caller's mode when missing, one component at a time; never
//!   `create_dir_all`, which follows a symbolic link in the way and creates inside its target;
//! - opened with `O_NOFOLLOW | O_DIRECTORY` relative to its parent's descriptor: a symbolic link
//!   or a file in its place is refused, and the parent is not looked up again by name;
//! - owned by the plugin's effective user and writable by nobody else (no group or other write
//!   bit): otherwise another user could swap what is inside after the check.
//!
//! The caller gets the directory's descriptor; a path below it stays what was checked because
//! nobody else may write the checked directories. Cheap enough for ADD: a directory that
//! exists costs an `openat` and an `fstat` (it is opened first and created only when missing,
//! the same outcome as mkdir-then-open with one syscall less).

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode};

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// `dir` under the rules above, created with `mode` when missing. Its parent is the system's
/// (/var/log, /run) and is taken as it is.
pub fn open_dir(dir: &Path, mode: u32) -> io::Result<OwnedFd> {
    let (parent, name) = split(dir)?;
    let parent = open(
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| with_kind(e, format!("cannot open {}: {e}", parent.display())))?;
    open_in(&parent, dir, name, mode)
}

/// `dir` and its parent, each under the rules above and created with `mode` when missing: the
/// plugin's /run/roce-ipvlan and its `locks` or `attachments`.
pub fn open_dir_and_parent(dir: &Path, mode: u32) -> io::Result<OwnedFd> {
    let (parent, name) = split(dir)?;
    let parent = open_dir(parent, mode)?;
    open_in(&parent, dir, name, mode)
}

fn split(dir: &Path) -> io::Result<(&Path, &OsStr)> {
    match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            Ok((parent, name))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no directory to create", dir.display()),
        )),
    }
}

/// `name` in `parent` (whose path is `dir`'s parent), checked.
fn open_in(parent: &OwnedFd, dir: &Path, name: &OsStr, mode: u32) -> io::Result<OwnedFd> {
    let fd = match openat(parent, name, DIR_FLAGS, Mode::empty()) {
        Err(Errno::ENOENT) => {
            match mkdirat(parent, name, Mode::from_bits_truncate(mode)) {
                // Another invocation made it meanwhile: checked below like any other.
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => {
                    return Err(with_kind(
                        e,
                        format!("cannot create {}: {e}", dir.display()),
                    ))
                }
            }
            openat(parent, name, DIR_FLAGS, Mode::empty())
        }
        other => other,
    }
    .map_err(|e| not_opened(dir, mode, e))?;
    let meta =
        fstat(&fd).map_err(|e| with_kind(e, format!("cannot stat {}: {e}", dir.display())))?;
    check(
        dir,
        meta.st_uid,
        meta.st_mode,
        nix::unistd::geteuid().as_raw(),
        mode,
    )?;
    Ok(fd)
}

/// The owner and mode rule, on what fstat found (`uid`, `st_mode`) for the plugin's `euid`.
fn check(dir: &Path, uid: u32, st_mode: u32, euid: u32, mode: u32) -> io::Result<()> {
    if uid != euid || st_mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is owned by uid {} with mode {:o}: expected it owned by uid {euid} (the \
                 plugin's user) and writable by nobody else, or another user could replace \
                 what the plugin keeps there; `chown {euid} {dir}; chmod go-w {dir}`, or remove \
                 it and the plugin creates it anew (mode {mode:o})",
                dir.display(),
                uid,
                st_mode & 0o7777,
                dir = dir.display(),
            ),
        ));
    }
    Ok(())
}

fn not_opened(dir: &Path, mode: u32, e: Errno) -> io::Error {
    let message = match e {
        // O_NOFOLLOW's ELOOP; O_DIRECTORY's ENOTDIR (also for a symbolic link to a file).
        Errno::ELOOP | Errno::ENOTDIR => format!(
            "{} is not a directory (a symbolic link or a file is in its place): expected a \
             directory of the plugin's own; look at it (`ls -ld {}`) and remove it, the plugin \
             then creates it (mode {mode:o})",
            dir.display(),
            dir.display()
        ),
        e => format!("cannot open {}: {e}", dir.display()),
    };
    with_kind(e, message)
}

/// An error of `e`'s kind (NotFound, PermissionDenied, …) with the whole story as its message.
fn with_kind(e: Errno, message: String) -> io::Error {
    io::Error::new(io::Error::from(e).kind(), message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn missing_directories_are_created_with_the_mode_and_existing_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("roce-ipvlan/locks");
        open_dir_and_parent(&dir, 0o700).unwrap();
        for d in [dir.parent().unwrap(), &dir] {
            let meta = fs::metadata(d).unwrap();
            assert_eq!(meta.mode() & 0o777, 0o700, "{}", d.display());
            assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
        }
        // As kubelet's hostPath DirectoryOrCreate makes them: 0755, kept as they are.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        open_dir_and_parent(&dir, 0o700).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o755);
        assert!(open_dir(Path::new("/"), 0o700).is_err());
    }

    #[test]
    fn a_symlink_or_a_file_in_the_way_is_refused_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("roce-ipvlan");
        fs::create_dir(&state).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, state.join("attachments")).unwrap();
        let err = open_dir_and_parent(&state.join("attachments"), 0o700).unwrap_err();
        let m = err.to_string();
        assert!(
            m.contains("not a directory") && m.contains("symbolic link"),
            "{m}"
        );
        assert!(m.contains("remove it"), "{m}");
        // The parent a symlink: refused too, nothing created in its target.
        let linked = tmp.path().join("linked");
        std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
        assert!(open_dir_and_parent(&linked.join("locks"), 0o700).is_err());
        assert!(!elsewhere.join("locks").exists());
        fs::write(state.join("locks"), "").unwrap();
        let m = open_dir_and_parent(&state.join("locks"), 0o700)
            .unwrap_err()
            .to_string();
        assert!(m.contains("not a directory"), "{m}");
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("roce-ipvlan/attachments");
        open_dir_and_parent(&dir, 0o700).unwrap();
        for (which, mode) in [
            (&dir, 0o770),
            (&dir, 0o1777),
            (&dir.parent().unwrap().to_path_buf(), 0o722),
        ] {
            fs::set_permissions(which, fs::Permissions::from_mode(mode)).unwrap();
            let err = open_dir_and_parent(&dir, 0o700).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
            let m = err.to_string();
            assert!(m.contains(&format!("mode {mode:o}")), "{m}");
            assert!(
                m.contains("writable by nobody else") && m.contains("chmod go-w"),
                "{m}"
            );
            fs::set_permissions(which, fs::Permissions::from_mode(0o700)).unwrap();
        }
        open_dir_and_parent(&dir, 0o700).unwrap();
    }

    /// Pure, so that it runs without root (a test cannot chown to another user otherwise).
    #[test]
    fn a_directory_of_another_user_is_refused() {
        let dir = Path::new("/run/roce-ipvlan/locks");
        check(dir, 0, 0o40700, 0, 0o700).unwrap();
        check(dir, 0, 0o40755, 0, 0o700).unwrap();
        check(dir, 1000, 0o40755, 1000, 0o700).unwrap();
        let m = check(dir, 1000, 0o40700, 0, 0o700).unwrap_err().to_string();
        assert!(m.contains("owned by uid 1000 with mode 700"), "{m}");
        assert!(m.contains("expected it owned by uid 0"), "{m}");
        assert!(m.contains("chown 0 /run/roce-ipvlan/locks"), "{m}");
        assert!(check(dir, 0, 0o40720, 0, 0o700).is_err());
        assert!(check(dir, 0, 0o40702, 0, 0o700).is_err());
    }
}
