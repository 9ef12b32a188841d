//! The plugin's command counts: how many ADDs and DELs ended with which CNI code, per network,
//! and how long they took, for the installer's `/metrics` (tools/metrics.rs). Nothing else
//! records a failed ADD: it leaves no attachment record, and the log file is optional and
//! free text.
//!
//! One small JSON file, [`FILE`] in [`DIR`] (tmpfs: a node restart starts the counts afresh,
//! which Prometheus takes as a counter reset), rewritten by every ADD and DEL as its last step:
//! under an `flock` of the directory, read, count the command, write atomically (atomic_file.rs),
//! so a reader never sees half a file and needs no lock. Bounded by construction, not by a
//! rotation: one series per command, network and code ([`MAX_SERIES`]; beyond, the network is
//! counted as [`OTHER`]), each a fixed set of histogram buckets. A file that cannot be read,
//! or of another version, starts the counts afresh. Best-effort: a count that cannot be written
//! is a line in the log, never a failed command.
//!
//! [`DIR`] and its parent are under private_dir.rs's rule, as the attachment records are.

use std::fs;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where the plugin keeps the counts on the node (the installer sees it under /host).
pub const DIR: &str = "/run/roce-ipvlan/metrics";

/// The counts' file in [`DIR`].
pub const FILE: &str = "commands.json";

/// The file's format version; another one is started afresh (plugin) or skipped (reader).
pub const VERSION: u32 = 1;

/// The histogram's upper bounds, in seconds: an ADD takes 50 ms to a few seconds (the GID wait
/// dominates), its default budget is 60 s, the runtime's own timeout a few minutes.
pub const BUCKETS: [f64; 12] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// The most series the file holds: commands x networks x codes. About 150 bytes each, so the
/// file stays under 40 KiB.
pub const MAX_SERIES: usize = 256;

/// Series kept for [`OTHER`]: named networks take at most `MAX_SERIES - OTHER_SERIES`, and a
/// count that would need a series more (more than 32 command and code pairs beyond that) is
/// dropped rather than let the file grow.
pub const OTHER_SERIES: usize = 32;

/// The network of the series counted once the named ones are [`MAX_SERIES`] less
/// [`OTHER_SERIES`], and of a command whose configuration has no readable name.
pub const OTHER: &str = "(other)";

/// A file larger than this is not ours: started afresh, or skipped by a reader.
pub const MAX_BYTES: u64 = 64 * 1024;

/// All the counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub version: u32,
    pub series: Vec<Series>,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            version: VERSION,
            series: Vec::new(),
        }
    }
}

/// One command, network and code: a histogram of its durations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// `ADD` or `DEL`.
    pub command: String,
    pub network: String,
    /// The CNI code, 0 for a success.
    pub code: u32,
    pub count: u64,
    pub sum_seconds: f64,
    /// How many took at most each of [`BUCKETS`] and more than the one before (not
    /// cumulative); those longer than the last are `count` less their sum.
    pub buckets: Vec<u64>,
}

impl Stats {
    /// Counts one command that took `took`.
    pub fn count(&mut self, command: &str, network: &str, code: u32, took: Duration) {
        // What libcni accepts as a network name; anything else (a refused configuration may
        // carry any string, control characters too) is counted as OTHER, never a label.
        let named = (1..=253).contains(&network.len())
            && network
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        let network = if named { network } else { OTHER };
        let find = |s: &Series, network: &str| {
            s.command == command && s.network == network && s.code == code
        };
        let index = match self.series.iter().position(|s| find(s, network)) {
            Some(i) => i,
            None => {
                let network = if self.series.len() >= MAX_SERIES - OTHER_SERIES {
                    OTHER
                } else {
                    network
                };
                match self.series.iter().position(|s| find(s, network)) {
                    Some(i) => i,
                    None if self.series.len() >= MAX_SERIES => return,
                    None => {
                        self.series.push(Series {
                            command: command.to_string(),
                            network: network.to_string(),
                            code,
                            count: 0,
                            sum_seconds: 0.0,
                            buckets: vec![0; BUCKETS.len()],
                        });
                        self.series.len() - 1
                    }
                }
            }
        };
        let series = &mut self.series[index];
        let seconds = took.as_secs_f64();
        series.count += 1;
        series.sum_seconds += seconds;
        series.buckets.resize(BUCKETS.len(), 0);
        if let Some(b) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            series.buckets[b] += 1;
        }
    }
}

/// Reads the counts in `dir`: None when there is no file (no command ran since the node
/// started); an error for a file that is not ours.
pub fn read(dir: &Path) -> io::Result<Option<Stats>> {
    let mut file = match fs::File::open(dir.join(FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut text = Vec::new();
    file.by_ref().take(MAX_BYTES + 1).read_to_end(&mut text)?;
    if text.len() as u64 > MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {MAX_BYTES} bytes: not the plugin's counts"),
        ));
    }
    let stats: Stats = serde_json::from_slice(&text)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    if stats.version != VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("version {}, expected {VERSION}", stats.version),
        ));
    }
    Ok(Some(stats))
}

/// Counts one command in `dir`'s file (see above): the plugin's last step of ADD and DEL.
pub fn record(
    dir: &Path,
    command: &str,
    network: &str,
    code: u32,
    took: Duration,
) -> io::Result<()> {
    let fd = crate::protocol::private_dir::open_dir_and_parent(dir, 0o700)?;
    // The directory's lock serialises the read-modify-write of concurrent commands; it is
    // released when `fd` closes. Held for a read and a write of a few KiB on tmpfs.
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stats = read(dir).ok().flatten().unwrap_or_default();
    stats.count(command, network, code, took);
    let text = serde_json::to_vec(&stats).expect("the counts always serialize");
    crate::kernel::atomic_file::write(&dir.join(FILE), &text, 0o600)
}

/// The network's name in a configuration the plugin may have refused, for the count of its
/// failure.
pub fn peek_network(stdin: &[u8]) -> String {
    #[derive(Deserialize)]
    struct N {
        name: String,
    }
    serde_json::from_slice::<N>(stdin)
        .map(|n| n.name)
        .unwrap_or_else(|_| OTHER.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn counts_land_in_their_series_and_bucket() {
        let mut s = Stats::default();
        s.count("ADD", "rail0", 0, ms(40));
        s.count("ADD", "rail0", 0, ms(700));
        s.count("ADD", "rail0", 0, Duration::from_secs(500));
        s.count("ADD", "broken", 7, ms(3));
        s.count("DEL", "rail0", 0, ms(60));
        assert_eq!(s.series.len(), 3);
        let add = &s.series[0];
        assert_eq!((add.count, add.code), (3, 0));
        assert!((add.sum_seconds - 500.74).abs() < 1e-9);
        assert_eq!(add.buckets[0], 1, "40 ms <= 0.05");
        assert_eq!(add.buckets[4], 1, "700 ms <= 1");
        assert_eq!(add.buckets.iter().sum::<u64>(), 2, "500 s is only in +Inf");
        assert_eq!(s.series[1].network, "broken");
        assert_eq!(s.series[2].buckets[1], 1);
    }

    #[test]
    fn series_are_bounded_and_unnamed_networks_are_other() {
        let mut s = Stats::default();
        for n in 0..(MAX_SERIES + 50) {
            s.count("ADD", &format!("net{n}"), 0, ms(1));
        }
        let named = MAX_SERIES - OTHER_SERIES;
        assert_eq!(s.series.len(), named + 1);
        let other = s.series.iter().find(|x| x.network == OTHER).unwrap();
        assert_eq!(other.count as usize, MAX_SERIES + 50 - named);
        // Other codes get OTHER series of their own, up to MAX_SERIES; then counts are dropped.
        for code in 0..100 {
            s.count("DEL", "", code, ms(1));
        }
        assert_eq!(s.series.len(), MAX_SERIES);
        let mut t = Stats::default();
        t.count("ADD", "x\n2026-01-01T00:00:00Z INFO FORGED", 7, ms(1));
        t.count("ADD", "rail-0.a_b", 0, ms(1));
        let names: Vec<&str> = t.series.iter().map(|x| x.network.as_str()).collect();
        assert_eq!(names, [OTHER, "rail-0.a_b"]);
        let text = serde_json::to_vec(&s).unwrap();
        assert!((text.len() as u64) < MAX_BYTES, "{}", text.len());
        assert_eq!(peek_network(br#"{"name":"rail3","x":1}"#), "rail3");
        assert_eq!(peek_network(b"not json"), OTHER);
    }

    #[test]
    fn record_and_read_round_trip_and_a_foreign_file_starts_afresh() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run").join("metrics");
        assert_eq!(read(&dir).unwrap(), None);
        record(&dir, "ADD", "rail0", 0, ms(10)).unwrap();
        record(&dir, "ADD", "rail0", 110, ms(20)).unwrap();
        let stats = read(&dir).unwrap().unwrap();
        assert_eq!(stats.series.len(), 2);
        assert_eq!(stats.series[1].code, 110);
        fs::write(dir.join(FILE), br#"{"version":9,"series":[]}"#).unwrap();
        assert!(read(&dir).is_err());
        record(&dir, "DEL", "rail0", 0, ms(10)).unwrap();
        let stats = read(&dir).unwrap().unwrap();
        assert_eq!(stats.series.len(), 1, "{stats:?}");
    }
}
