//! Invocations that must not overlap, serialised with `flock` on files under [`LOCK_DIR`]:
//! - ADD and DEL of one attachment (container id + ifname): the runtime gives up on an ADD
//!   (Multus killed, a kubelet timeout) and sends DEL while that ADD, orphaned, still runs; the
//!   DEL must not clean up half of it and leave the other half to be built after it;
//! - the pod-wide sysctls of one pod: an ADD saves and writes them (`all.rp_filter`), and a
//!   failed ADD puts back what it found unless another IPvlan child of the pod relies on the
//!   new value (add.rs, `restore_pod_wide`). Both are short steps under this lock, and an ADD
//!   creates its child before its sysctl step, so an undo either sees that child or runs
//!   before the other ADD saves (and then writes the value itself). The lock is not held over
//!   the GID wait, so the ADDs of one pod still overlap (a first version held it to the end of
//!   the ADD and serialised them: 80-concurrency's 4 parallel ADDs per pod timed out).
//!
//! A lock is a file per hash bucket, not per attachment or pod, so that their number stays
//! bounded without ever deleting a lock file (which would race with its next user); two keys
//! in one bucket only wait for each other. The kernel releases a lock when its holder dies, so
//! a killed invocation never blocks the next. Order, which rules out a deadlock: the attachment
//! lock first, then the pod lock, and DEL takes only the first.
//!
//! The lock directory and its parent, /run/roce-ipvlan, are the plugin's own
//! (protocol/private_dir.rs: created 0700, no symbolic link, owned by the plugin's user and
//! writable by nobody else), checked once per process; a lock file is opened relative to the
//! checked directory without following a symbolic link.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::protocol::error::{Error, Result};
use crate::protocol::private_dir;

pub const LOCK_DIR: &str = "/run/roce-ipvlan/locks";
const BUCKETS: u64 = 1024;

/// A held lock, released when dropped (or when the process ends).
#[derive(Debug)]
pub struct Held {
    _file: File,
}

/// What a lock serialises, for its file name and for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    kind: &'static str,
    what: String,
    hash: u64,
}

impl Key {
    pub fn attachment(container_id: &str, ifname: &str) -> Key {
        Key {
            kind: "attachment",
            what: format!("attachment {container_id}/{ifname}"),
            hash: fnv1a(&[container_id.as_bytes(), b"\0", ifname.as_bytes()]),
        }
    }

    /// A pod, by its network namespace's device and inode (the same for every path to it).
    pub fn pod(dev: u64, ino: u64) -> Key {
        Key {
            kind: "pod",
            what: format!("pod network namespace {dev}:{ino}"),
            hash: fnv1a(&[&dev.to_le_bytes(), &ino.to_le_bytes()]),
        }
    }

    fn file_name(&self) -> String {
        format!("{}-{:03x}", self.kind, self.hash % BUCKETS)
    }
}

/// FNV-1a (64 bit): fixed, so that every release of the plugin agrees on the bucket of a key.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Takes the lock of `key` in [`LOCK_DIR`], waiting at most `limit`.
pub fn acquire(key: &Key, limit: Duration) -> Result<Held> {
    // Checked once: an ADD with 16 rails takes the pod lock once per rail.
    static DIR: OnceLock<OwnedFd> = OnceLock::new();
    let dir = match DIR.get() {
        Some(fd) => fd,
        None => {
            let fd = open_dir(Path::new(LOCK_DIR))?;
            DIR.get_or_init(|| fd)
        }
    };
    acquire_at(dir, Path::new(LOCK_DIR), key, limit)
}

/// [`acquire`] in another directory, checked on every call (the tests' temporary ones).
#[cfg(test)]
pub fn acquire_in(dir: &Path, key: &Key, limit: Duration) -> Result<Held> {
    acquire_at(&open_dir(dir)?, dir, key, limit)
}

/// The lock directory `dir` and its parent, created 0700 when missing, under private_dir.rs's
/// rule; 108 with what was found and what to do otherwise.
fn open_dir(dir: &Path) -> Result<OwnedFd> {
    private_dir::open_dir_and_parent(dir, 0o700)
        .map_err(|e| Error::io("cannot use the lock directory", e))
}

/// The lock of `key` in the directory `dir_fd` (at `dir`, for messages).
fn acquire_at(dir_fd: &OwnedFd, dir: &Path, key: &Key, limit: Duration) -> Result<Held> {
    let path = dir.join(key.file_name());
    let file = open(dir_fd, &key.file_name())
        .map_err(|e| Error::io(format!("cannot open lock file {}", path.display()), e))?;
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    let mut warned = false;
    loop {
        // SAFETY: flock on an fd this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Held { _file: file });
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::io(format!("cannot lock {}", path.display()), err));
        }
        if !warned {
            tracing::warn!(
                lock = %path.display(),
                "another invocation for this {} is running; waiting for it (at most {} ms)",
                key.kind,
                limit.as_millis()
            );
            warned = true;
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::TryAgainLater(format!(
                "another ADD or DEL for {} (or a key sharing its lock {}) was still running after \
                 {} ms: expected it to end within its own time limits; the runtime may retry, \
                 and `ps` on the node shows the roce-ipvlan process holding it",
                key.what,
                path.display(),
                limit.as_millis()
            )));
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn open(dir: &OwnedFd, name: &str) -> std::io::Result<File> {
    use nix::fcntl::{openat, OFlag};
    let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(
        dir,
        name,
        flags,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_fixed_and_bounded() {
        // Pinned: a change would let two releases of the plugin take different locks for one
        // attachment during an upgrade.
        assert_eq!(
            Key::attachment("abc", "net1").file_name(),
            format!("attachment-{:03x}", fnv1a(&[b"abc\0net1"]) % BUCKETS)
        );
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(
            Key::attachment("abc", "net1"),
            Key::attachment("abc", "net2")
        );
        assert!(Key::pod(3, 4026532000).file_name().starts_with("pod-"));
    }

    #[test]
    fn a_held_lock_makes_the_next_wait_and_time_out_then_frees_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("locks");
        let key = Key::attachment("c1", "net1");
        let held = acquire_in(&dir, &key, Duration::from_millis(10)).unwrap();
        let err = acquire_in(&dir, &key, Duration::from_millis(30)).unwrap_err();
        assert_eq!(err.code(), 11, "{err}");
        assert!(err.to_string().contains("attachment c1/net1"), "{err}");
        drop(held);
        acquire_in(&dir, &key, Duration::from_millis(10)).unwrap();
    }

    /// The mechanism of issue #25, item 7: a lock that another holder keeps for a short while
    /// cannot be had with no time left (as the undo of an ADD that spent its budget asked for
    /// it), and can with a wait of its own.
    #[test]
    fn a_briefly_held_lock_needs_a_wait_of_its_own() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("locks");
        let key = Key::pod(3, 4026532000);
        let held = acquire_in(&dir, &key, Duration::ZERO).unwrap();
        let err = acquire_in(&dir, &key, Duration::ZERO).unwrap_err();
        assert_eq!(err.code(), 11, "{err}");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        acquire_in(&dir, &key, Duration::from_secs(5)).unwrap();
        release.join().unwrap();
    }

    /// The lock directory of the plugin's own only: a symbolic link in its place (to a
    /// directory where root's lock files would land), or one others may write, fails the
    /// invocation with 108 saying what was found and what to do; a lock file that is a
    /// symbolic link is not followed.
    #[test]
    fn a_lock_directory_in_the_wrong_hands_is_refused_with_what_to_do() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("roce-ipvlan");
        let dir = state.join("locks");
        let key = Key::attachment("c1", "net1");
        acquire_in(&dir, &key, Duration::ZERO).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);

        std::fs::remove_dir_all(&dir).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        let err = acquire_in(&dir, &key, Duration::ZERO).unwrap_err();
        assert_eq!(err.code(), 108, "{err}");
        let m = err.to_string();
        assert!(m.starts_with("cannot use the lock directory: "), "{m}");
        assert!(
            m.contains("not a directory") && m.contains("remove it"),
            "{m}"
        );
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

        std::fs::remove_file(&dir).unwrap();
        acquire_in(&dir, &key, Duration::ZERO).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = acquire_in(&dir, &key, Duration::ZERO).unwrap_err();
        assert_eq!(err.code(), 108, "{err}");
        assert!(err.to_string().contains("writable by nobody else"), "{err}");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();

        std::fs::remove_file(dir.join(key.file_name())).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("x"), dir.join(key.file_name())).unwrap();
        assert!(acquire_in(&dir, &key, Duration::ZERO).is_err());
        assert!(!elsewhere.join("x").exists());
    }
}
