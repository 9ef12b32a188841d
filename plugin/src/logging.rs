//! Logs go through `tracing` to stderr and, when `logFile` is set, to that file (appended).
//! stdout is reserved for the one JSON document the runtime reads.
//!
//! The plugin runs as root, and `logFile` comes from a NetworkAttachmentDefinition, which a
//! namespace's own users may write. So the file is opened only where a log belongs, and never
//! through a trick (docs/security.md):
//! - only under `/var/log/`, with no `..` in the path: otherwise a NAD could make root append
//!   lines it partly controls (network name, messages) to `/root/.ssh/authorized_keys` or
//!   `/etc/...`;
//! - the final component is opened with `O_NOFOLLOW` (a symlink is refused, not followed), and
//!   `O_NONBLOCK` so that a FIFO planted there cannot hang the plugin;
//! - it must be a regular file, created `0600` if new;
//! - no directory on the way may be world-writable without the sticky bit (anyone could swap
//!   the file there between checks).
//!
//! A refused or unopenable file is reported on stderr and logging goes on to stderr only: a log
//! option never fails an ADD.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path};
use std::sync::Mutex;

use tracing_subscriber::fmt::writer::MakeWriterExt;

use crate::config::LogConf;

/// Installs the subscriber; a log file that cannot be opened is reported on stderr, not fatal.
pub fn init(conf: &LogConf) {
    // A plain level, not an EnvFilter: the plugin's dependencies log through `log`, not
    // `tracing`, so only the plugin's own events arrive here, and EnvFilter's regex engine
    // would add a fifth to the binary's size.
    let level = conf
        .level
        .as_deref()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::WARN);
    let file = conf
        .file
        .as_ref()
        .and_then(|path| match open_log_file(path, LOG_DIR) {
            Ok(f) => Some(f),
            Err(e) => {
                use std::io::Write;
                // Not eprintln!, which panics when stderr is a broken pipe.
                let _ = writeln!(
                    std::io::stderr(),
                    "roce-ipvlan: not logging to logFile {}: {e}",
                    path.display()
                );
                None
            }
        });
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        // Its report of a failed write is an eprintln!, a panic on a broken stderr.
        .log_internal_errors(false);
    let stderr = || Lenient(std::io::stderr());
    let _ = match file {
        Some(f) => builder
            .with_writer(stderr.and(Mutex::new(Lenient(f))))
            .try_init(),
        None => builder.with_writer(stderr).try_init(),
    };
}

/// A log destination whose failures are dropped: an orphaned plugin (its Multus was killed)
/// writes into a pipe nobody reads (EPIPE), and a log line must never stop an ADD half-way,
/// before its undo; nor keep the other destination from getting the line.
struct Lenient<W>(W);

impl<W: std::io::Write> std::io::Write for Lenient<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(self.0.write(buf).unwrap_or(buf.len()))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

/// Where `logFile` may be.
pub const LOG_DIR: &str = "/var/log";

/// Opens `path` for appending under the rules of the module documentation.
pub fn open_log_file(path: &Path, allowed_dir: &str) -> Result<File, String> {
    if !path.starts_with(allowed_dir) || path == Path::new(allowed_dir) {
        return Err(format!("expected a file under {allowed_dir}/"));
    }
    if path
        .components()
        .any(|c| !matches!(c, Component::RootDir | Component::Normal(_)))
    {
        return Err("expected a plain absolute path without '.' or '..'".into());
    }
    let mut dir = path.parent();
    while let Some(d) = dir {
        if let Ok(m) = d.metadata() {
            if m.mode() & 0o002 != 0 && m.mode() & 0o1000 == 0 {
                return Err(format!(
                    "{} is world-writable without the sticky bit",
                    d.display()
                ));
            }
        }
        dir = d.parent();
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "it is a symbolic link".to_string(),
            _ => e.to_string(),
        })?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir() -> (tempfile::TempDir, String) {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = d.path().to_str().unwrap().to_string();
        (d, s)
    }

    #[test]
    fn a_new_file_is_created_private_and_appended() {
        let (_d, base) = dir();
        let p = Path::new(&base).join("sub.log");
        open_log_file(&p, &base).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        open_log_file(&p, &base).unwrap();
    }

    #[test]
    fn refused_paths() {
        let (_d, base) = dir();
        let b = Path::new(&base);
        assert!(open_log_file(Path::new("/etc/roce.log"), &base)
            .unwrap_err()
            .contains("under"));
        assert!(open_log_file(&b.join("../x.log"), &base)
            .unwrap_err()
            .contains(".."));
        std::os::unix::fs::symlink("/etc/passwd", b.join("link.log")).unwrap();
        assert_eq!(
            open_log_file(&b.join("link.log"), &base).unwrap_err(),
            "it is a symbolic link"
        );
        nix::unistd::mkfifo(&b.join("fifo.log"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(open_log_file(&b.join("fifo.log"), &base).is_err());
        std::fs::create_dir(b.join("d.log")).unwrap();
        assert!(open_log_file(&b.join("d.log"), &base).is_err());
        let open = b.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(open_log_file(&open.join("x.log"), &base)
            .unwrap_err()
            .contains("sticky"));
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        open_log_file(&open.join("x.log"), &base).unwrap();
    }
}
