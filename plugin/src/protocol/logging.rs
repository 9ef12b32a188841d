//! Logs go through `tracing` to stderr and, when `logFile` is set, to that file (appended).
//! stdout is reserved for the one JSON document the runtime reads.
//!
//! Every line is written through [`Escaped`]: control characters anywhere in an event (a
//! network name, a container id, an error message quoting the configuration) are written as
//! `\n`, `\u{1b}` and so on, so that one event is always one line. Without it a NAD with
//! `"name": "x\n<a line of its choosing>"` forges log records.
//!
//! The plugin runs as root, and `logFile` comes from a NetworkAttachmentDefinition, which a
//! namespace's own users may write. So the file is confined to the plugin's own directory
//! [`LOG_DIR`] and never opened through a trick (docs/security.md):
//! - a file directly in `/var/log/roce-ipvlan/`, by a plain absolute path (no `.`, `..`, no
//!   sub-directory): anywhere else under /var/log a NAD could append records to an audit log
//!   or another pod's `/var/log/pods` file. Anything else is refused at parse time (code 7);
//! - the directory is created `0755` if missing, then opened with `O_NOFOLLOW | O_DIRECTORY`
//!   (a symlink in its place is refused) and must be owned by the plugin's user and writable
//!   by nobody else (private_dir.rs, the rule of every directory the plugin writes in);
//! - the file is opened relative to that directory with `O_NOFOLLOW` (a symlink is refused,
//!   not followed) and `O_NONBLOCK` (a FIFO planted there cannot hang the plugin), must be a
//!   regular file, and is created `0600` if new.
//!
//! A file that passes the parse-time rule but cannot be opened is reported on stderr and
//! logging goes on to stderr only: the file system of a node never fails an ADD through a log
//! option.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing_subscriber::fmt::writer::{MakeWriter, MakeWriterExt};

/// The configuration's `logFile` and `logLevel`, as parsed (config.rs).
#[derive(Debug, Clone, Default)]
pub struct LogConf {
    pub file: Option<PathBuf>,
    pub level: Option<String>,
}

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
        .and_then(|path| match open_log_file(path, Path::new(LOG_DIR)) {
            Ok(f) => Some(f),
            Err(e) => {
                use std::io::Write;
                // Not eprintln!, which panics when stderr is a broken pipe; Debug-quoted: the
                // path comes from the NAD.
                let _ = writeln!(
                    std::io::stderr(),
                    "roce-ipvlan: not logging to logFile {path:?}: {e}"
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
            .with_writer(Escaped(stderr.and(Mutex::new(Lenient(f)))))
            .try_init(),
        None => builder.with_writer(Escaped(stderr)).try_init(),
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

/// The plugin's own log directory: the only place `logFile` may be.
pub const LOG_DIR: &str = "/var/log/roce-ipvlan";

/// Whether `path` may be a `logFile` at all (its shape; the file system is looked at only
/// when it is opened).
pub fn check_path(path: &Path) -> Result<(), String> {
    check_path_in(path, Path::new(LOG_DIR))
}

fn check_path_in(path: &Path, dir: &Path) -> Result<(), String> {
    // On the string, not on Path::components(), which drops a "." in the middle (so
    // "/var/log/roce-ipvlan/./x" would compare equal to "/var/log/roce-ipvlan/x").
    let name = path
        .to_str()
        .zip(dir.to_str())
        .and_then(|(p, d)| p.strip_prefix(d))
        .and_then(|rest| rest.strip_prefix('/'));
    match name {
        Some(name) if !name.is_empty() && !name.contains('/') && name != "." && name != ".." => {
            Ok(())
        }
        _ => Err(format!(
            "expected a file directly in {}/ (the plugin's own log directory), by a plain path \
             without '.', '..' or a sub-directory, e.g. {}/roce-ipvlan.log",
            dir.display(),
            dir.display()
        )),
    }
}

/// Opens `path` (a file directly in `dir`) for appending under the rules of the module
/// documentation.
pub fn open_log_file(path: &Path, dir: &Path) -> Result<File, String> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    check_path_in(path, dir)?;
    let name = path.file_name().expect("check_path_in: a file in dir");
    // 0755 as before: a log directory others may read is what operators expect; the file
    // itself is 0600.
    let dir_fd = crate::protocol::private_dir::open_dir(dir, 0o755).map_err(|e| e.to_string())?;
    let fd = openat(
        &dir_fd,
        name,
        OFlag::O_WRONLY
            | OFlag::O_APPEND
            | OFlag::O_CREAT
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| match e {
        nix::Error::ELOOP => "it is a symbolic link".to_string(),
        e => e.to_string(),
    })?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    Ok(file)
}

/// A writer (and maker of writers) that escapes control characters, keeping only the newline
/// that ends an event. tracing-subscriber formats each event into one buffer and hands it over
/// in a single `write_all`, so `write` sees whole events.
pub struct Escaped<W>(pub W);

impl<W: Write> Write for Escaped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_all(escape_controls(buf).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Escaped<M> {
    type Writer = Escaped<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Escaped(self.0.make_writer())
    }
}

/// `buf` with every control character (C0, DEL, C1) written as an escape, except one trailing
/// newline.
pub fn escape_controls(buf: &[u8]) -> String {
    let text = String::from_utf8_lossy(buf);
    let (body, end) = match text.strip_suffix('\n') {
        Some(body) => (body, "\n"),
        None => (&*text, ""),
    };
    let mut out = String::with_capacity(text.len());
    for c in body.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push_str(end);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A private log directory that does not exist yet, inside a temporary directory.
    fn dir() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let logs = d.path().join("roce-ipvlan");
        (d, logs)
    }

    #[test]
    fn the_directory_and_a_new_file_are_created_private_and_appended() {
        let (_d, logs) = dir();
        let p = logs.join("x.log");
        open_log_file(&p, &logs).unwrap().write_all(b"a\n").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&logs).unwrap().mode() & 0o777, 0o755);
        open_log_file(&p, &logs).unwrap().write_all(b"b\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
    }

    #[test]
    fn only_files_directly_in_the_plugins_directory() {
        let dir = Path::new(LOG_DIR);
        check_path(&dir.join("roce-ipvlan.log")).unwrap();
        for bad in [
            "/var/log/roce-ipvlan.log",
            "/var/log/audit/audit.log",
            "/var/log/pods/ns_pod_uid/c/0.log",
            "/var/log/roce-ipvlan",
            "/var/log/roce-ipvlan/",
            "/var/log/roce-ipvlan/sub/x.log",
            "/var/log/roce-ipvlan/../audit/audit.log",
            "/var/log/roce-ipvlan/./x.log",
            "/etc/roce.log",
            "rel.log",
        ] {
            let err = check_path(Path::new(bad)).unwrap_err();
            assert!(err.contains("/var/log/roce-ipvlan/"), "{bad}: {err}");
        }
    }

    #[test]
    fn symlinks_fifos_and_foreign_directories_are_refused() {
        let (d, logs) = dir();
        // The directory itself a symlink (to a directory the NAD's victim owns).
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &logs).unwrap();
        let err = open_log_file(&logs.join("x.log"), &logs).unwrap_err();
        assert!(err.contains("not a directory"), "{err}");
        assert!(!elsewhere.join("x.log").exists());
        std::fs::remove_file(&logs).unwrap();

        std::fs::create_dir(&logs).unwrap();
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", logs.join("link.log")).unwrap();
        assert_eq!(
            open_log_file(&logs.join("link.log"), &logs).unwrap_err(),
            "it is a symbolic link"
        );
        nix::unistd::mkfifo(&logs.join("fifo.log"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(open_log_file(&logs.join("fifo.log"), &logs).is_err());
        std::fs::create_dir(logs.join("d.log")).unwrap();
        assert!(open_log_file(&logs.join("d.log"), &logs).is_err());

        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let err = open_log_file(&logs.join("x.log"), &logs).unwrap_err();
        assert!(err.contains("writable by nobody else"), "{err}");
    }

    #[test]
    fn control_characters_are_escaped_and_one_event_stays_one_line() {
        assert_eq!(escape_controls(b"plain line\n"), "plain line\n");
        assert_eq!(
            escape_controls(b"network=x\n2026-01-01T00:00:00Z  INFO forged\n"),
            "network=x\\n2026-01-01T00:00:00Z  INFO forged\n"
        );
        assert_eq!(
            escape_controls("a\rb\tc\u{1b}[31md\u{7f}\u{85}e".as_bytes()),
            "a\\rb\\tc\\u{1b}[31md\\u{7f}\\u{85}e"
        );
        let mut out = Escaped(Vec::new());
        out.write_all(b"x\ny\n").unwrap();
        assert_eq!(out.0, b"x\\ny\n");
    }
}
