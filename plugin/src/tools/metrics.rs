//! The installer's `/metrics` and `/healthz`, served by `roce-ipvlan-annotate` (never by the
//! plugin, which stays small: docs/design.md#one-binary-or-two) on the node's network
//! (the DaemonSet is hostNetwork), default port [`DEFAULT_PORT`].
//!
//! Prometheus' text exposition format 0.0.4, written by hand ([`Exposition`]: a few dozen
//! lines, where a client crate would add a registry the annotator does not need). Read at each
//! scrape, nothing cached:
//! - per rail (every RDMA port with an Ethernet link layer whose netdev is on the node, as
//!   `ready` finds them): the netdev up, the port ACTIVE, the GID table's entries used and free
//!   counted as ADD counts them (attach/gid_capacity.rs, with the attachment records for the
//!   GIDs DOCA-OFED hides from the node), and the attachments' children on it;
//! - the plugin's ADDs and DELs by network and CNI code, with their durations
//!   (attach/command_stats.rs: the file the plugin rewrites after each);
//! - the annotator's own patches and Events, by result ([`Counters`]).
//!
//! No pod names in labels: the series stay bounded by the node's rails, networks and codes.
//! One thread serves the requests one after the other, each under a read and write timeout,
//! so a stuck client holds it for at most [`IO_TIMEOUT`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::attach::command_stats::{self, Stats};
use crate::attach::gid_capacity::Usage;
use crate::attach::pod_record::{self, Record};
use crate::kernel::rdma;
use crate::tools::ready::{self, RailFacts};

/// The port `/metrics` and `/healthz` listen on by default (docs/deploy.md#metrics).
pub const DEFAULT_PORT: u16 = 9740;

/// The environment variable that sets the listen address (as `--metrics-address` does).
pub const ADDRESS_ENV: &str = "ROCE_IPVLAN_METRICS_ADDRESS";

/// How long one request may take to arrive and its answer to leave.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric family this module exports, in order: the tests hold `render` and the
/// dashboard (charts/roce-ipvlan/dashboards/) to it.
#[cfg(test)]
pub const NAMES: &[&str] = &[
    "roce_ipvlan_build_info",
    "roce_ipvlan_rail_up",
    "roce_ipvlan_rail_port_active",
    "roce_ipvlan_rail_gid_entries_used",
    "roce_ipvlan_rail_gid_entries_free",
    "roce_ipvlan_rail_attachments",
    "roce_ipvlan_attachment_records",
    "roce_ipvlan_cni_command_duration_seconds",
    "roce_ipvlan_annotation_patches_total",
    "roce_ipvlan_annotation_pods_pending",
    "roce_ipvlan_pod_events_total",
    "roce_ipvlan_scrape_errors",
];

/// The annotator's own counts, shared with the serving thread.
#[derive(Debug, Default)]
pub struct Counters {
    /// Patches the API server took.
    pub patches_done: AtomicU64,
    /// Patches of pods gone or recreated (404, or another UID).
    pub patches_gone: AtomicU64,
    /// Patches that got no answer or a failure (tried again after a backoff).
    pub patches_failed: AtomicU64,
    /// Patches refused as invalid (422; tried again when the pod's list changes).
    pub patches_refused: AtomicU64,
    /// Pods whose annotation is not what their records say, waiting for a retry.
    pub pods_pending: AtomicU64,
    pub events_created: AtomicU64,
    pub events_failed: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    Histogram,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// A text exposition being written: each family's `# HELP` and `# TYPE`, then its samples.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts a family; its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.word());
    }

    /// One sample: `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape_label(val));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    /// A histogram's samples: the cumulative `_bucket`s (`counts` per bound, not cumulative;
    /// `+Inf` is `count`), `_sum` and `_count`.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        bounds: &[f64],
        counts: &[u64],
        count: u64,
        sum: f64,
    ) {
        let mut cumulative = 0u64;
        let bucket = format!("{name}_bucket");
        for (i, bound) in bounds.iter().enumerate() {
            cumulative = cumulative.saturating_add(counts.get(i).copied().unwrap_or(0));
            let le = number(*bound);
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            // A file edited by hand could say more below a bound than in all: never above count.
            self.sample(&bucket, &with_le, cumulative.min(count) as f64);
        }
        let mut with_le = labels.to_vec();
        with_le.push(("le", "+Inf"));
        self.sample(&bucket, &with_le, count as f64);
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, count as f64);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// A label value as the format escapes it: backslash, double quote and line feed.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A sample value: integers without a fraction, `+Inf`, `-Inf`, `NaN` as the format spells them.
pub fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// What one scrape read from the node: the input of [`render`].
#[derive(Debug, Default)]
pub struct NodeView {
    pub rails: Vec<RailFacts>,
    pub records: Vec<Record>,
    pub commands: Option<Stats>,
    /// What could not be read, by source (`rails`, `records`, `commands`), for
    /// `roce_ipvlan_scrape_errors`.
    pub errors: BTreeMap<&'static str, String>,
}

/// Reads the node: the rails (this namespace's, the node's with hostNetwork), the records in
/// `state_dir`/attachments and the command counts in `state_dir`/metrics.
pub fn gather(state_dir: &Path) -> NodeView {
    let mut view = NodeView::default();
    match pod_record::read_all(&state_dir.join("attachments")) {
        Ok(entries) => {
            view.records = entries.into_iter().filter_map(|(_, r)| r.ok()).collect();
            // The container sees the host's namespaces at /var/run/netns only (the DaemonSet's
            // mount; its image has no /run): a runtime that named /run/netns is read there.
            for record in &mut view.records {
                if let Some(name) = record
                    .netns
                    .as_deref()
                    .and_then(|p| p.strip_prefix("/run/netns/"))
                {
                    record.netns = Some(format!("/var/run/netns/{name}"));
                }
            }
        }
        Err(e) => {
            view.errors.insert("records", e.to_string());
        }
    }
    let (rails, _, ports_error) = ready::rail_facts(None, &view.records);
    view.rails = rails;
    if let Some(e) = ports_error {
        view.errors.insert("rails", e);
    }
    match command_stats::read(&state_dir.join("metrics")) {
        Ok(stats) => view.commands = stats,
        Err(e) => {
            view.errors.insert("commands", e.to_string());
        }
    }
    view
}

/// The exposition of a view and the annotator's counters.
pub fn render(view: &NodeView, counters: &Counters) -> String {
    let mut x = Exposition::default();
    x.family(
        "roce_ipvlan_build_info",
        Kind::Gauge,
        "The annotator's version; always 1.",
    );
    x.sample(
        "roce_ipvlan_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    render_rails(&mut x, view);
    render_commands(&mut x, view.commands.as_ref());
    render_counters(&mut x, counters);
    x.family(
        "roce_ipvlan_scrape_errors",
        Kind::Gauge,
        "1 when this scrape could not read a source (rails, records, commands; the annotate \
         container's log says why), else 0.",
    );
    for source in ["rails", "records", "commands"] {
        let failed = view.errors.contains_key(source);
        x.sample(
            "roce_ipvlan_scrape_errors",
            &[("source", source)],
            f64::from(u8::from(failed)),
        );
    }
    x.finish()
}

fn render_rails(x: &mut Exposition, view: &NodeView) {
    let port_text: Vec<String> = view.rails.iter().map(|r| r.port.port.to_string()).collect();
    let labels = |r: &RailFacts, i: usize| -> [(&str, String); 3] {
        [
            ("rail", r.netdev.clone()),
            ("device", r.port.device.clone()),
            ("port", port_text[i].clone()),
        ]
    };
    let each = |x: &mut Exposition, name: &str, value: &dyn Fn(&RailFacts) -> Option<f64>| {
        for (i, rail) in view.rails.iter().enumerate() {
            if let Some(v) = value(rail) {
                let owned = labels(rail, i);
                let borrowed: Vec<(&str, &str)> =
                    owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
                x.sample(name, &borrowed, v);
            }
        }
    };
    let flag = |b: bool| f64::from(u8::from(b));
    x.family(
        "roce_ipvlan_rail_up",
        Kind::Gauge,
        "1 when the rail's netdev is administratively up.",
    );
    each(x, "roce_ipvlan_rail_up", &|r| r.up.map(flag));
    x.family(
        "roce_ipvlan_rail_port_active",
        Kind::Gauge,
        "1 when the rail's RDMA port is ACTIVE, 0 in any other state.",
    );
    each(x, "roce_ipvlan_rail_port_active", &|r| {
        Some(flag(r.state.as_deref().is_ok_and(rdma::port_active)))
    });
    let usage = |r: &RailFacts| r.gids.as_ref().ok().cloned();
    x.family(
        "roce_ipvlan_rail_gid_entries_used",
        Kind::Gauge,
        "GID table entries in use on the rail's port, counted as ADD counts them (seen from \
         the node, plus the recorded entries of pods' children DOCA-OFED hides).",
    );
    each(x, "roce_ipvlan_rail_gid_entries_used", &|r| {
        usage(r).map(|u: Usage| u.used() as f64)
    });
    x.family(
        "roce_ipvlan_rail_gid_entries_free",
        Kind::Gauge,
        "GID table entries free on the rail's port; ADD fails with 110 when a child needs more.",
    );
    each(x, "roce_ipvlan_rail_gid_entries_free", &|r| {
        usage(r).map(|u: Usage| u.free() as f64)
    });
    // Children per rail from the records, including rails the node no longer shows.
    let mut children: BTreeMap<&str, usize> =
        view.rails.iter().map(|r| (r.netdev.as_str(), 0)).collect();
    for record in &view.records {
        for child in &record.rails {
            *children.entry(child.rail.as_str()).or_default() += 1;
        }
    }
    x.family(
        "roce_ipvlan_rail_attachments",
        Kind::Gauge,
        "Pods' children on the rail, from the plugin's attachment records.",
    );
    for (rail, count) in &children {
        x.sample(
            "roce_ipvlan_rail_attachments",
            &[("rail", rail)],
            *count as f64,
        );
    }
    x.family(
        "roce_ipvlan_attachment_records",
        Kind::Gauge,
        "Attachments (one per pod and network) the plugin recorded on the node.",
    );
    x.sample(
        "roce_ipvlan_attachment_records",
        &[],
        view.records.len() as f64,
    );
}

fn render_commands(x: &mut Exposition, stats: Option<&Stats>) {
    x.family(
        "roce_ipvlan_cni_command_duration_seconds",
        Kind::Histogram,
        "The plugin's ADDs and DELs by network and CNI code (0: success), and how long they \
         took; _count is the number of commands.",
    );
    for s in stats.map(|s| s.series.as_slice()).unwrap_or_default() {
        let code = s.code.to_string();
        x.histogram(
            "roce_ipvlan_cni_command_duration_seconds",
            &[
                ("command", &s.command),
                ("network", &s.network),
                ("code", &code),
            ],
            &command_stats::BUCKETS,
            &s.buckets,
            s.count,
            s.sum_seconds,
        );
    }
}

fn render_counters(x: &mut Exposition, c: &Counters) {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    x.family(
        "roce_ipvlan_annotation_patches_total",
        Kind::Counter,
        "Patches of pods' roce-ipvlan.io/gids annotation by result: done, gone (pod deleted or \
         recreated), failed (no answer or an error; retried after a backoff), refused (422).",
    );
    for (result, counter) in [
        ("done", &c.patches_done),
        ("gone", &c.patches_gone),
        ("failed", &c.patches_failed),
        ("refused", &c.patches_refused),
    ] {
        x.sample(
            "roce_ipvlan_annotation_patches_total",
            &[("result", result)],
            get(counter),
        );
    }
    x.family(
        "roce_ipvlan_annotation_pods_pending",
        Kind::Gauge,
        "Pods whose annotation could not be published yet (in backoff, or refused).",
    );
    x.sample(
        "roce_ipvlan_annotation_pods_pending",
        &[],
        get(&c.pods_pending),
    );
    x.family(
        "roce_ipvlan_pod_events_total",
        Kind::Counter,
        "Kubernetes Events the annotator posted on pods whose annotation it could not publish, \
         by result (created, failed).",
    );
    for (result, counter) in [("created", &c.events_created), ("failed", &c.events_failed)] {
        x.sample(
            "roce_ipvlan_pod_events_total",
            &[("result", result)],
            get(counter),
        );
    }
}

/// The answer to one request line (`GET /metrics HTTP/1.1`): status, content type, body.
/// `metrics` is called only for `/metrics`.
pub fn route(request_line: &str, metrics: impl FnOnce() -> String) -> (u16, &'static str, String) {
    let mut parts = request_line.split_ascii_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => (200, CONTENT_TYPE, metrics()),
        ("GET" | "HEAD", "/healthz") => (200, "text/plain; charset=utf-8", "ok\n".into()),
        ("GET" | "HEAD", _) => (
            404,
            "text/plain; charset=utf-8",
            "not found: try /metrics or /healthz\n".into(),
        ),
        _ => (405, "text/plain; charset=utf-8", "only GET\n".into()),
    }
}

/// Where to listen: `--metrics-address` or [`ADDRESS_ENV`]: `IP:PORT`, a port alone (every
/// address of the node: IPv6 and IPv4, or IPv4 alone on a node without IPv6), or `off` (or
/// empty: nowhere); by default every address on [`DEFAULT_PORT`].
pub fn listen(address: Option<&str>) -> Result<Option<TcpListener>, String> {
    let configured = address
        .map(str::to_string)
        .or_else(|| std::env::var(ADDRESS_ENV).ok());
    let any = |port: u16| {
        TcpListener::bind(("::", port))
            .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
            .map(Some)
            .map_err(|e| {
                format!(
                    "cannot listen on port {port} for /metrics: {e} (another process on the \
                     node has it? set --metrics-address or {ADDRESS_ENV})"
                )
            })
    };
    match configured.as_deref().map(str::trim) {
        Some("" | "off") => Ok(None),
        Some(text) if text.parse::<u16>().is_ok_and(|p| p > 0) => {
            any(text.parse().expect("checked just above"))
        }
        Some(text) => {
            let addr: SocketAddr = text.parse().map_err(|e| {
                format!(
                    "metrics address {text:?}: {e}: expected IP:PORT such as 0.0.0.0:{DEFAULT_PORT} \
                     or [::]:{DEFAULT_PORT}, a port alone, or off"
                )
            })?;
            TcpListener::bind(addr)
                .map(Some)
                .map_err(|e| format!("cannot listen on {addr} for /metrics: {e}"))
        }
        None => any(DEFAULT_PORT),
    }
}

/// Serves `/metrics` and `/healthz` on `listener` from a thread of its own, for as long as the
/// process lives.
pub fn serve(listener: TcpListener, state_dir: PathBuf, counters: Arc<Counters>) {
    let spawned = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        let _ = answer(stream, || render(&gather(&state_dir), &counters));
                    }
                    // EMFILE and the like: pause instead of spinning.
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("roce-ipvlan annotate: cannot start the /metrics thread: {e}");
    }
}

/// Reads one request's head (at most 8 KiB) and answers it; the connection is closed after.
fn answer(mut stream: TcpStream, metrics: impl FnOnce() -> String) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next().unwrap_or("");
    let (status, content_type, body) = route(line, metrics);
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Method Not Allowed",
    };
    let body = if line.starts_with("HEAD ") {
        String::new()
    } else {
        body
    };
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::pod_record::{PodRef, Rail};
    use crate::kernel::rdma::RdmaPort;

    fn rail(netdev: &str, device: &str, state: &str, used: usize) -> RailFacts {
        let port = RdmaPort {
            device: device.into(),
            port: 1,
        };
        RailFacts {
            netdev: netdev.into(),
            port: port.clone(),
            up: Some(true),
            state: Ok(state.into()),
            gids: Ok(Usage {
                port,
                slots: 256,
                visible: used,
                hidden: 0,
                hidden_children: 0,
                types: 2,
            }),
        }
    }

    fn record(pod: &str, rails: &[&str]) -> Record {
        Record {
            version: pod_record::VERSION,
            network: "rail0".into(),
            container_id: format!("c-{pod}"),
            ifname: "net1".into(),
            pod: PodRef {
                namespace: "ml".into(),
                name: pod.into(),
                uid: "u".into(),
            },
            rails: rails
                .iter()
                .map(|r| Rail {
                    interface: "net1".into(),
                    rail: (*r).into(),
                    device: "rxe0".into(),
                    port: 1,
                    gid_index: 3,
                    gid: "::".into(),
                    addresses: vec![],
                    gid_slots: Some(2),
                })
                .collect(),
            netns: None,
        }
    }

    /// The families' names in an exposition, from their `# TYPE` lines.
    fn families(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    }

    /// Checks the text against the format's grammar, line by line: comments, or
    /// `name{label="value",...} number`, each sample's family declared before it.
    fn check_format(text: &str) {
        assert!(text.ends_with('\n'));
        let declared = families(text);
        for line in text.lines() {
            if line.starts_with('#') {
                let mut w = line.split(' ');
                assert_eq!(w.next(), Some("#"));
                assert!(matches!(w.next(), Some("HELP" | "TYPE")), "{line}");
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(
                value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
                "{line}"
            );
            let name = series.split('{').next().unwrap();
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "{line}"
            );
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| declared.iter().any(|d| d == f))
                })
                .unwrap_or(name);
            assert!(declared.iter().any(|d| d == family), "undeclared: {line}");
            if let Some(labels) = series.strip_prefix(name) {
                if !labels.is_empty() {
                    assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                }
            }
        }
    }

    #[test]
    fn the_encoder_escapes_labels_and_spells_numbers_as_the_format_does() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.05), "0.05");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(1e20), "100000000000000000000");
        let mut x = Exposition::default();
        x.family("t_total", Kind::Counter, "a\\b\nc");
        x.sample("t_total", &[("net", "x\"y")], 2.0);
        x.sample("t_total", &[], 0.5);
        assert_eq!(
            x.finish(),
            "# HELP t_total a\\\\b\\nc\n# TYPE t_total counter\nt_total{net=\"x\\\"y\"} 2\nt_total 0.5\n"
        );
    }

    #[test]
    fn a_histogram_is_cumulative_and_ends_with_inf_sum_and_count() {
        let mut x = Exposition::default();
        x.family("d_seconds", Kind::Histogram, "h");
        x.histogram("d_seconds", &[("code", "0")], &[0.1, 1.0], &[2, 1], 5, 9.5);
        let text = x.finish();
        assert!(
            text.contains("d_seconds_bucket{code=\"0\",le=\"0.1\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("d_seconds_bucket{code=\"0\",le=\"1\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("d_seconds_bucket{code=\"0\",le=\"+Inf\"} 5\n"),
            "{text}"
        );
        assert!(text.contains("d_seconds_sum{code=\"0\"} 9.5\n"), "{text}");
        assert!(text.contains("d_seconds_count{code=\"0\"} 5\n"), "{text}");
        check_format(&text);
    }

    /// The collectors over a view of two rails, three records and the plugin's counts: every
    /// family of NAMES, each once, and the values the view holds.
    #[test]
    fn the_collectors_render_rails_attachments_commands_and_counters() {
        let mut stats = Stats::default();
        stats.count("ADD", "rail0", 0, Duration::from_millis(300));
        stats.count("ADD", "broken", 7, Duration::from_millis(2));
        stats.count("ADD", "broken", 7, Duration::from_millis(3));
        let mut errors = BTreeMap::new();
        errors.insert("commands", "no".to_string());
        let mut down = rail("rdma1", "rxe1", "1: DOWN", 10);
        down.gids = Err("gone".into());
        let view = NodeView {
            rails: vec![rail("rdma0", "rxe0", "4: ACTIVE", 6), down],
            records: vec![
                record("a", &["rdma0"]),
                record("b", &["rdma0", "rdma1"]),
                record("c", &["rdma9"]),
            ],
            commands: Some(stats),
            errors,
        };
        let counters = Counters::default();
        Counters::add(&counters.patches_failed);
        Counters::add(&counters.patches_failed);
        Counters::add(&counters.patches_done);
        let text = render(&view, &counters);
        check_format(&text);
        assert_eq!(
            families(&text),
            NAMES,
            "every exported family, in NAMES' order"
        );
        for line in [
            "roce_ipvlan_rail_port_active{rail=\"rdma0\",device=\"rxe0\",port=\"1\"} 1",
            "roce_ipvlan_rail_port_active{rail=\"rdma1\",device=\"rxe1\",port=\"1\"} 0",
            "roce_ipvlan_rail_gid_entries_used{rail=\"rdma0\",device=\"rxe0\",port=\"1\"} 6",
            "roce_ipvlan_rail_gid_entries_free{rail=\"rdma0\",device=\"rxe0\",port=\"1\"} 250",
            "roce_ipvlan_rail_attachments{rail=\"rdma0\"} 2",
            "roce_ipvlan_rail_attachments{rail=\"rdma1\"} 1",
            "roce_ipvlan_rail_attachments{rail=\"rdma9\"} 1",
            "roce_ipvlan_attachment_records 3",
            "roce_ipvlan_cni_command_duration_seconds_count{command=\"ADD\",network=\"broken\",code=\"7\"} 2",
            "roce_ipvlan_cni_command_duration_seconds_bucket{command=\"ADD\",network=\"rail0\",code=\"0\",le=\"0.25\"} 0",
            "roce_ipvlan_cni_command_duration_seconds_bucket{command=\"ADD\",network=\"rail0\",code=\"0\",le=\"0.5\"} 1",
            "roce_ipvlan_annotation_patches_total{result=\"failed\"} 2",
            "roce_ipvlan_annotation_patches_total{result=\"done\"} 1",
            "roce_ipvlan_scrape_errors{source=\"commands\"} 1",
            "roce_ipvlan_scrape_errors{source=\"rails\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
        }
        // An unreadable table has no used/free sample (not a made-up 0).
        assert!(!text.contains("gid_entries_used{rail=\"rdma1\""), "{text}");
    }

    #[test]
    fn routes_answer_metrics_healthz_and_nothing_else() {
        let m = || "x 1\n".to_string();
        assert_eq!(
            route("GET /metrics HTTP/1.1", m),
            (200, CONTENT_TYPE, "x 1\n".into())
        );
        assert_eq!(route("GET /metrics?x=1 HTTP/1.1", m).0, 200);
        assert_eq!(route("GET /healthz HTTP/1.1", m).0, 200);
        assert_eq!(route("GET / HTTP/1.1", m).0, 404);
        assert_eq!(route("POST /metrics HTTP/1.1", m).0, 405);
        assert_eq!(route("", m).0, 405);
    }

    /// The server end to end on a loopback port: a scrape gets the exposition.
    #[test]
    fn a_scrape_over_tcp_gets_the_exposition() {
        let tmp = tempfile::tempdir().unwrap();
        let listener = listen(Some("127.0.0.1:0")).unwrap().unwrap();
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new(Counters::default());
        Counters::add(&counters.events_created);
        serve(listener, tmp.path().to_path_buf(), counters);
        let get = |path: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let metrics = get("/metrics");
        assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
        assert!(metrics.contains("version=0.0.4"), "{metrics}");
        assert!(metrics.contains("roce_ipvlan_pod_events_total{result=\"created\"} 1\n"));
        assert!(metrics.contains("roce_ipvlan_attachment_records 0\n"));
        assert!(get("/healthz").ends_with("\r\n\r\nok\n"));
        assert!(listen(Some("off")).unwrap().is_none());
        assert!(listen(Some("nonsense")).unwrap_err().contains("IP:PORT"));
        assert!(
            listen(Some("0")).unwrap_err().contains("IP:PORT"),
            "port 0 is no port"
        );
        // A port alone: every address (here a free one, taken from the kernel first).
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let any = listen(Some(&free.to_string())).unwrap().unwrap();
        assert_eq!(any.local_addr().unwrap().port(), free);
        assert!(any.local_addr().unwrap().ip().is_unspecified());
    }

    /// The dashboard queries only what this module exports (a renamed metric fails here, not
    /// on an empty panel).
    #[test]
    fn the_dashboard_queries_only_exported_metrics() {
        let text = include_str!("../../../charts/roce-ipvlan/dashboards/roce-ipvlan.json");
        let dashboard: serde_json::Value = serde_json::from_str(text).unwrap();
        let mut exprs = Vec::new();
        fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        match (k.as_str(), v) {
                            ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                            _ => walk(v, out),
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        walk(&dashboard, &mut exprs);
        assert!(exprs.len() >= 5, "{exprs:?}");
        let mut used = 0;
        for expr in &exprs {
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if !word.starts_with("roce_ipvlan_") {
                    continue;
                }
                used += 1;
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s).filter(|f| NAMES.contains(f)))
                    .unwrap_or(word);
                assert!(
                    NAMES.contains(&family),
                    "{word} in {expr:?} is not exported"
                );
            }
        }
        assert!(used >= exprs.len());
    }
}
