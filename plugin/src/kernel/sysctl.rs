//! Sysctls of the pod's network namespace: reading and writing them. Which keys a configuration
//! may set is protocol/sysctl_keys.rs. Writes go through /proc/sys from a thread inside the pod's
//! netns (see netns.rs): /proc/sys/net resolves against the calling thread's network namespace.

use crate::protocol::error::{Error, Result};
use crate::protocol::sysctl_keys::Sysctl;

/// Reads a sysctl; call from a thread inside the pod's netns.
pub fn read(s: &Sysctl) -> Result<String> {
    std::fs::read_to_string(s.proc_path())
        .map(|v| v.trim().to_string())
        .map_err(|e| Error::Sysctl(format!("cannot read {}: {e}", s.key)))
}

/// Writes a sysctl; call from a thread inside the pod's netns.
pub fn write(s: &Sysctl) -> Result<()> {
    std::fs::write(s.proc_path(), &s.value).map_err(|e| {
        Error::Sysctl(format!(
            "cannot set {} = {:?} ({}): {e}; check that the key exists on this kernel",
            s.key,
            s.value,
            s.proc_path().display()
        ))
    })
}

/// The value a pod-wide sysctl had before ADD wrote it, with its /proc/sys file, opened from
/// inside the pod's netns. A /proc/sys/net file stays bound to the namespace it was opened in,
/// so the undo of a failed ADD can write through it from any thread, and needs no new one
/// (none may be creatable: pids.max).
#[derive(Debug)]
pub struct Saved {
    pub old: Sysctl,
    /// The value ADD wrote.
    wrote: String,
    file: std::fs::File,
}

impl Saved {
    /// Whether the sysctl still holds the value ADD wrote (nobody changed it since).
    pub fn still_ours(&self) -> Result<bool> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 512];
        let n = self
            .file
            .read_at(&mut buf, 0)
            .map_err(|e| Error::Sysctl(format!("cannot read {}: {e}", self.old.key)))?;
        Ok(String::from_utf8_lossy(&buf[..n]).trim() == self.wrote)
    }

    /// Writes the old value back (at offset 0: with kernel.sysctl_writes_strict, a write
    /// further on is ignored).
    pub fn restore(&self) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_at(self.old.value.as_bytes(), 0)
            .map(drop)
            .map_err(|e| {
                Error::Sysctl(format!(
                    "cannot restore {} = {:?}: {e}",
                    self.old.key, self.old.value
                ))
            })
    }
}

/// Writes `list` in order, from a thread inside the pod's netns (one thread for all of them:
/// entering a netns costs a thread), and returns the previous value of each pod-wide key it
/// got to, so that a failed ADD can restore them: on an error too, with the error.
pub fn apply(list: &[Sysctl]) -> (Vec<Saved>, Result<()>) {
    use std::os::unix::fs::FileExt;
    let mut saved = Vec::new();
    for s in list {
        if s.pod_wide {
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(s.proc_path())
                .map_err(|e| Error::Sysctl(format!("cannot open {}: {e}", s.key)));
            let file = match opened {
                Ok(f) => f,
                Err(e) => return (saved, Err(e)),
            };
            let mut buf = [0u8; 512];
            let old = match file.read_at(&mut buf, 0) {
                Ok(n) => String::from_utf8_lossy(&buf[..n]).trim().to_string(),
                Err(e) => {
                    return (
                        saved,
                        Err(Error::Sysctl(format!("cannot read {}: {e}", s.key))),
                    )
                }
            };
            saved.push(Saved {
                old: Sysctl {
                    value: old,
                    ..s.clone()
                },
                wrote: s.value.clone(),
                file,
            });
        }
        if let Err(e) = write(s) {
            return (saved, Err(e));
        }
    }
    (saved, Ok(()))
}
