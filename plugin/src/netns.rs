//! Network namespaces. The only module that calls `setns`.
//!
//! Rules (the same as containernetworking/plugins' pkg/ns, for the same reasons):
//! - a namespace is entered only on a fresh thread that ends right after the work is done, never
//!   on the main thread or a runtime worker: a thread left in the wrong namespace would make
//!   every later netlink socket, /proc/sys write or sysfs read land in the wrong place;
//! - a path is trusted as a namespace only after fstatfs says it is nsfs;
//! - netlink sockets keep the namespace they were created in, so a socket opened on such a
//!   thread can be used from anywhere afterwards (see netlink.rs).

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};
use nix::sys::statfs::{fstatfs, NSFS_MAGIC};

use crate::error::{Error, Result};

/// An open network namespace.
#[derive(Debug)]
pub struct Netns {
    fd: OwnedFd,
    path: PathBuf,
}

impl Netns {
    /// Opens `path` and checks that it is a network namespace.
    pub fn open(path: &Path) -> Result<Netns> {
        let file = File::open(path).map_err(|e| {
            Error::Netns(format!(
                "cannot open CNI_NETNS {}: {e}; expected a network namespace path such as \
                 /var/run/netns/<name> or /proc/<pid>/ns/net",
                path.display()
            ))
        })?;
        let fd = OwnedFd::from(file);
        let fs = fstatfs(&fd)
            .map_err(|e| Error::Netns(format!("cannot stat CNI_NETNS {}: {e}", path.display())))?;
        if fs.filesystem_type() != NSFS_MAGIC {
            return Err(Error::Netns(format!(
                "CNI_NETNS {} is not a namespace (its filesystem is not nsfs): expected a \
                 bind-mounted network namespace or /proc/<pid>/ns/net",
                path.display()
            )));
        }
        Ok(Netns {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens the namespace, or `None` if the path no longer exists (DEL after teardown).
    pub fn open_if_exists(path: &Path) -> Result<Option<Netns>> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            _ => Netns::open(path).map(Some),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Runs `f` on a fresh thread that has entered this namespace; the thread ends with `f`.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| {
                        Error::Netns(format!(
                            "cannot enter network namespace {}: {e}",
                            self.path.display()
                        ))
                    })?;
                    Ok(f())
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_not_a_namespace() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let err = Netns::open(f.path()).unwrap_err();
        assert_eq!(err.code(), 105);
        assert!(err.to_string().contains("not a namespace"), "{err}");
    }

    #[test]
    fn a_missing_path_is_reported_or_skipped() {
        let p = Path::new("/nonexistent/netns/x");
        assert_eq!(Netns::open(p).unwrap_err().code(), 105);
        assert!(Netns::open_if_exists(p).unwrap().is_none());
    }

    #[test]
    fn own_namespace_opens_and_run_returns_the_value() {
        let ns = Netns::open(Path::new("/proc/self/ns/net")).unwrap();
        assert_eq!(ns.run(|| 41 + 1).unwrap(), 42);
    }
}
