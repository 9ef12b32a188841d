//! Network namespaces. The only module that calls `setns`.
//!
//! Rules (the same as containernetworking/plugins' pkg/ns, for the same reasons):
//! - a namespace is entered only on a fresh thread that ends right after the work is done, never
//!   on the main thread or a runtime worker: a thread left in the wrong namespace would make
//!   every later netlink socket, /proc/sys write or sysfs read land in the wrong place. The
//!   one other case is a thread spawned for one rail of a multi-rail ADD, which enters the pod
//!   for the rest of its work and then ends ([`Netns::enter_for_rest_of_thread`]);
//! - a path is trusted as a namespace only after fstatfs says it is nsfs;
//! - netlink sockets keep the namespace they were created in, so a socket opened on such a
//!   thread can be used from anywhere afterwards (see netlink.rs).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};
use nix::sys::statfs::{fstatfs, NSFS_MAGIC};

use crate::protocol::error::{Error, Result};

thread_local! {
    /// The namespace (device, inode) this thread has entered for the rest of its life
    /// ([`Netns::enter_for_rest_of_thread`]); None on a thread still in its first namespace.
    static ENTERED: std::cell::Cell<Option<(u64, u64)>> = const { std::cell::Cell::new(None) };
}

/// `_IO(0xb7, 0x3)` from linux/nsfs.h: the CLONE_NEW* flag of a namespace fd.
const NS_GET_NSTYPE: libc::Ioctl = 0xb703;

/// An open network namespace.
#[derive(Debug)]
pub struct Netns {
    fd: OwnedFd,
    path: PathBuf,
}

impl Netns {
    /// Opens `path` and checks that it is a network namespace. The errors name the path and
    /// keep the errno's kind; what they mean for the caller (CNI_NETNS for a command, a pid
    /// or path for `diagnose`) is the caller's to say.
    pub fn open(path: &Path) -> io::Result<Netns> {
        let named = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("cannot {what} {}: {e}", path.display()))
        };
        let fd = OwnedFd::from(File::open(path).map_err(|e| named("open", e))?);
        let fs = fstatfs(&fd).map_err(|e| named("stat", e.into()))?;
        if fs.filesystem_type() != NSFS_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a namespace (its filesystem is not nsfs)",
                    path.display()
                ),
            ));
        }
        // nsfs holds every kind of namespace; setns(CLONE_NEWNET) would refuse a mount or PID
        // namespace only later, with a bare EINVAL. NS_GET_NSTYPE (Linux 4.11) tells the kind;
        // a kernel without it (ENOTTY) is left to setns.
        // SAFETY: NS_GET_NSTYPE takes no argument and only queries the namespace behind `fd`,
        // which stays open for the whole call.
        let kind = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE) };
        if kind >= 0 && kind != libc::CLONE_NEWNET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a network namespace (it is a namespace of another kind, CLONE \
                     flag {kind:#x})",
                    path.display()
                ),
            ));
        }
        Ok(Netns {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens the namespace, or `None` if the path no longer exists (DEL after teardown).
    pub fn open_if_exists(path: &Path) -> io::Result<Option<Netns>> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            _ => Netns::open(path).map(Some),
        }
    }

    /// Whether the path still names this namespace. The open fd keeps a namespace alive after
    /// the runtime unmounted and removed its path (pod deleted during ADD); then it is no
    /// longer the pod's.
    pub fn still_at_path(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let ours = std::fs::metadata(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        let there = std::fs::metadata(&self.path);
        match (ours, there) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }

    /// Whether this is the plugin's own network namespace (the host's, for a plugin run by the
    /// kubelet): the same device and inode as /proc/self/ns/net.
    pub fn is_own(&self) -> io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let own = std::fs::metadata("/proc/self/ns/net")?;
        Ok(self.id()? == (own.dev(), own.ino()))
    }

    /// The namespace's device and inode: the same for every path and fd that names it.
    pub fn id(&self) -> io::Result<(u64, u64)> {
        let st = nix::sys::stat::fstat(&self.fd).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot stat {}: {e}", self.path.display()),
            )
        })?;
        Ok((st.st_dev, st.st_ino))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Moves the calling thread into this namespace for good, so that [`Netns::run`] on it
    /// runs `f` right there instead of on a thread of its own (each costs a thread start).
    /// Only for a thread spawned for one piece of pod-side work that ends with it (one rail of
    /// a multi-rail ADD, after its IPAM call): nothing that must happen in the plugin's own
    /// namespace (an IPAM plugin's exec, a host socket) may follow on that thread.
    pub fn enter_for_rest_of_thread(&self) -> Result<()> {
        let id = self
            .id()
            .map_err(|e| Error::io("cannot identify the pod's network namespace", e))?;
        self.enter()?;
        ENTERED.with(|entered| entered.set(Some(id)));
        Ok(())
    }

    /// setns(2) of the calling thread into this namespace.
    fn enter(&self) -> Result<()> {
        setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| {
            Error::Netns(format!(
                "cannot enter network namespace {}: {e}",
                self.path.display()
            ))
        })
    }

    /// Runs `f` on a fresh thread that has entered this namespace; the thread ends with `f`.
    /// On a thread already inside for good (`enter_for_rest_of_thread`), runs `f` there.
    ///
    /// A thread that cannot be created (EAGAIN: the pod sandbox's or the runtime's `pids.max`)
    /// is an error, not a panic: ADD is then mid-way and its undo must still run.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        if let Some(entered) = ENTERED.with(|entered| entered.get()) {
            if self.id().is_ok_and(|id| id == entered) {
                return Ok(f());
            }
        }
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("netns".into())
                .spawn_scoped(scope, || {
                    self.enter()?;
                    Ok(f())
                })
                .map_err(|e| {
                    Error::io(
                        format!(
                            "cannot start a thread to enter network namespace {} (a pids \
                             limit of the plugin's cgroup?)",
                            self.path.display()
                        ),
                        e,
                    )
                })?
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
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("not a namespace"), "{err}");
    }

    #[test]
    fn another_kind_of_namespace_is_not_a_network_namespace() {
        let err = Netns::open(Path::new("/proc/self/ns/mnt")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("not a network namespace"), "{err}");
    }

    #[test]
    fn a_missing_path_is_reported_or_skipped() {
        let p = Path::new("/nonexistent/netns/x");
        let err = Netns::open(p).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("/nonexistent/netns/x"), "{err}");
        assert!(Netns::open_if_exists(p).unwrap().is_none());
    }

    #[test]
    fn a_namespace_is_at_its_path_until_the_path_goes() {
        let ns = Netns::open(Path::new("/proc/self/ns/net")).unwrap();
        assert!(ns.still_at_path());
        let other = Netns {
            fd: ns.fd.try_clone().unwrap(),
            path: PathBuf::from("/nonexistent/netns/x"),
        };
        assert!(!other.still_at_path());
    }

    #[test]
    fn own_namespace_is_recognised_by_device_and_inode() {
        // Another path to the same namespace is still the plugin's own.
        for path in ["/proc/self/ns/net", "/proc/thread-self/ns/net"] {
            let ns = Netns::open(Path::new(path)).unwrap();
            assert!(ns.is_own().unwrap(), "{path}");
        }
    }

    #[test]
    fn own_namespace_opens_and_run_returns_the_value() {
        let ns = Netns::open(Path::new("/proc/self/ns/net")).unwrap();
        assert_eq!(ns.run(|| 41 + 1).unwrap(), 42);
    }

    /// The namespace of the calling thread, by inode: /proc/thread-self, not /proc/self (the
    /// main thread's).
    fn thread_ns() -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
    }

    /// Privileged (a namespace of its own; `make vm-rust` runs it in the VM): `run` executes
    /// the closure in the namespace, on another thread, and the caller's namespace never
    /// changes, also when the closure panics.
    #[test]
    #[ignore = "privileged: run in the VM by make vm-rust"]
    fn run_enters_the_namespace_on_its_own_thread_only() {
        use std::process::Command;
        let name = "nsenter1";
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        let added = Command::new("ip").args(["netns", "add", name]).status();
        assert!(added.unwrap().success(), "ip netns add {name}");
        let ns = Netns::open(Path::new(&format!("/run/netns/{name}"))).unwrap();
        let (_, pod_ino) = ns.id().unwrap();
        let before = thread_ns();
        assert_ne!(before, pod_ino);
        assert!(!ns.is_own().unwrap());

        let caller = std::thread::current().id();
        let (inside, thread) = ns
            .run(|| (thread_ns(), std::thread::current().id()))
            .unwrap();
        assert_eq!(inside, pod_ino, "the closure ran in the pod");
        assert_ne!(thread, caller, "on a thread of its own");
        assert_eq!(thread_ns(), before, "the caller's namespace is unchanged");

        // What the kernel resolves per thread follows: the pod's /proc/sys/net and links.
        let lo_only = ns
            .run(|| {
                std::fs::read_dir("/proc/sys/net/ipv4/conf")
                    .unwrap()
                    .count()
            })
            .unwrap();
        assert_eq!(lo_only, 3, "all, default, lo");

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ns.run(|| panic!("inside")).unwrap();
        }));
        assert!(panicked.is_err(), "the panic reaches the caller");
        assert_eq!(thread_ns(), before, "and the caller is still at home");

        let _ = Command::new("ip").args(["netns", "del", name]).output();
        // The open fd keeps the namespace; the path no longer names it.
        assert!(!ns.still_at_path());
        assert_eq!(ns.run(thread_ns).unwrap(), pod_ino);
    }

    /// Privileged (`make vm-rust`): a thread that entered a namespace for good runs `run`'s
    /// closures for that namespace itself, and still hands those for another one to a thread
    /// of their own; the thread that spawned it stays where it was.
    #[test]
    #[ignore = "privileged: run in the VM by make vm-rust"]
    fn a_thread_inside_for_good_runs_closures_itself() {
        use std::process::Command;
        let names = ["nsenter2", "nsenter3"];
        for name in names {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
            let added = Command::new("ip").args(["netns", "add", name]).status();
            assert!(added.unwrap().success(), "ip netns add {name}");
        }
        let open = |name: &str| Netns::open(Path::new(&format!("/run/netns/{name}"))).unwrap();
        let (pod, other) = (open(names[0]), open(names[1]));
        let (_, pod_ino) = pod.id().unwrap();
        let (_, other_ino) = other.id().unwrap();
        let before = thread_ns();

        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    pod.enter_for_rest_of_thread().unwrap();
                    assert_eq!(thread_ns(), pod_ino, "the thread moved");
                    let me = std::thread::current().id();
                    let (inside, thread) = pod
                        .run(|| (thread_ns(), std::thread::current().id()))
                        .unwrap();
                    assert_eq!((inside, thread), (pod_ino, me), "ran here, in the pod");
                    let (inside, thread) = other
                        .run(|| (thread_ns(), std::thread::current().id()))
                        .unwrap();
                    assert_eq!(inside, other_ino);
                    assert_ne!(
                        thread, me,
                        "another namespace still gets a thread of its own"
                    );
                    assert_eq!(thread_ns(), pod_ino, "and this one stays in the pod");
                })
                .join()
                .unwrap();
        });
        assert_eq!(thread_ns(), before, "the spawning thread never moved");
        let (inside, thread) = pod
            .run(|| (thread_ns(), std::thread::current().id()))
            .unwrap();
        assert_eq!(inside, pod_ino);
        assert_ne!(
            thread,
            std::thread::current().id(),
            "outside, a thread of its own"
        );
        for name in names {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}
