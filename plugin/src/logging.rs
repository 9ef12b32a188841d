//! Logs go through `tracing` to stderr and, when `logFile` is set, to that file (appended).
//! stdout is reserved for the one JSON document the runtime reads.

use std::fs::OpenOptions;
use std::sync::Mutex;

use tracing_subscriber::fmt::writer::MakeWriterExt;
use tracing_subscriber::EnvFilter;

use crate::config::LogConf;

/// Installs the subscriber; a log file that cannot be opened is reported on stderr, not fatal.
pub fn init(conf: &LogConf) {
    let level = conf.level.as_deref().unwrap_or("warn");
    let filter = EnvFilter::try_new(format!("roce_ipvlan={level}"))
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    let file = conf.file.as_ref().and_then(|path| {
        match OpenOptions::new().create(true).append(true).open(path) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("roce-ipvlan: cannot open logFile {}: {e}", path.display());
                None
            }
        }
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    let _ = match file {
        Some(f) => builder
            .with_writer(std::io::stderr.and(Mutex::new(f)))
            .try_init(),
        None => builder.with_writer(std::io::stderr).try_init(),
    };
}
