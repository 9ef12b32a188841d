//! Writing a file so that no reader ever sees it half-written: the one helper used by `install`
//! (the plugin binary in the node's CNI directory, which Multus may exec at any moment), the
//! Multus device-info file (device_info.rs, read by Multus after ADD) and `env --output`
//! (workload_env.rs, read by the workload).
//!
//! The content goes to a temporary file in the same directory (so the rename stays on one
//! filesystem), which is fsynced, renamed over the target (rename(2) replaces the name
//! atomically: a reader opens the old file or the new one), and then the directory is fsynced
//! so the rename survives a crash of the node. The temporary name is
//! `.<file name>.<pid>.<counter>.tmp`, created with `O_EXCL`: distinct for distinct targets
//! (the whole file name is kept: `with_extension` used to turn `pod-rail.v1` and `pod-rail.v2`
//! into the same `pod-rail.roce-ipvlan.tmp`), for concurrent writers of one target (pid and a
//! per-process counter), and never an existing file (a leftover of a killed writer is not
//! reused: `O_EXCL` makes the next counter value be tried).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many temporary names are tried before giving up (each attempt that finds its name taken
/// moves on to the next counter value).
const ATTEMPTS: u64 = 16;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to `path` atomically, with permissions `mode` (not filtered by the umask).
pub fn write(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let (temp, mut file) = create_temp(&dir, &name, mode)?;
    let written = file
        .set_permissions(fs::Permissions::from_mode(mode))
        .and_then(|()| file.write_all(content))
        .and_then(|()| file.sync_all())
        .map_err(|e| annotate(e, &format!("cannot write {}", temp.display())))
        .and_then(|()| {
            fs::rename(&temp, path).map_err(|e| {
                annotate(
                    e,
                    &format!("cannot rename {} to {}", temp.display(), path.display()),
                )
            })
        });
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| annotate(e, &format!("cannot sync directory {}", dir.display())))
}

/// The temporary name for `name`, the `n`-th of this process.
pub(crate) fn temp_name(name: &str, n: u64) -> String {
    format!(".{name}.{}.{n}.tmp", std::process::id())
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name.to_string()))
}

fn create_temp(dir: &Path, name: &str, mode: u32) -> io::Result<(PathBuf, File)> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let temp = dir.join(temp_name(name, COUNTER.fetch_add(1, Ordering::Relaxed)));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&temp)
        {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(annotate(e, &format!("cannot create {}", temp.display()))),
        }
    }
    Err(annotate(
        last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
        &format!("no free temporary name for {name} in {}", dir.display()),
    ))
}

fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_replaces_and_leaves_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        write(&path, b"one", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        write(&path, b"two", 0o755).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(entries(dir.path()), vec!["f.json"]);
    }

    /// Names that differ only after their last dot got one temporary name from
    /// `with_extension`: two pods of networks `rail.v1` and `rail.v2` wrote the same file.
    #[test]
    fn distinct_targets_and_writers_never_share_a_temporary_name() {
        assert_eq!(
            Path::new("p-rail.v1").with_extension("roce-ipvlan.tmp"),
            Path::new("p-rail.v2").with_extension("roce-ipvlan.tmp"),
            "the old scheme collided"
        );
        assert_ne!(temp_name("p-rail.v1", 0), temp_name("p-rail.v2", 0));
        assert_ne!(temp_name("p-rail.v1", 0), temp_name("p-rail.v1", 1));
        // Concurrent writers of many dotted names in one directory: each target ends up with
        // its own content, and no temporary file is left.
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|s| {
            for i in 0..8 {
                let dir = dir.path();
                s.spawn(move || {
                    for round in 0..20 {
                        let path = dir.join(format!("pod-rail.v{i}"));
                        write(&path, format!("{i} {round}").as_bytes(), 0o644).unwrap();
                    }
                });
            }
        });
        for i in 0..8 {
            let text = fs::read_to_string(dir.path().join(format!("pod-rail.v{i}"))).unwrap();
            assert_eq!(text, format!("{i} 19"));
        }
        assert_eq!(entries(dir.path()).len(), 8, "{:?}", entries(dir.path()));
    }

    #[test]
    fn a_taken_temporary_name_is_skipped_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let next = COUNTER.load(Ordering::Relaxed);
        // Plant the next few names (a killed writer's leftovers, or a symlink to elsewhere).
        for n in next..next + 4 {
            std::os::unix::fs::symlink("/etc/passwd", dir.path().join(temp_name("f", n))).unwrap();
        }
        write(&dir.path().join("f"), b"x", 0o644).unwrap();
        assert_eq!(fs::read(dir.path().join("f")).unwrap(), b"x");
        assert!(fs::read_link(dir.path().join(temp_name("f", next))).is_ok());
    }

    #[test]
    fn a_failed_rename_removes_the_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("d");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), b"").unwrap();
        assert!(write(&target, b"x", 0o644).is_err());
        assert_eq!(entries(dir.path()), vec!["d"]);
    }
}
