//! `roce-ipvlan-annotate`, the installer DaemonSet's second container: every few seconds it
//! reads the attachment records the plugin leaves on the node (pod_record.rs) and publishes each
//! pod's RoCE GIDs in the pod's object, so that `kubectl get pod -o yaml` shows which GID index each rail got:
//!
//! ```text
//! roce-ipvlan.io/gids: '[{"interface":"net1","rail":"rdma0","device":"mlx5_0","port":1,"gidIndex":3,"gid":"0000:0000:0000:0000:0000:ffff:0a00:0005"}]'
//! ```
//!
//! One JSON list per pod, every attachment's children in interface order. A pod is patched only
//! when its list changed; a pod whose records are gone (DEL) gets the annotation removed. Each
//! patch carries the pod's UID: the API server refuses it for a pod recreated under the same
//! name (the UID is immutable), so a new pod never shows a dead sandbox's GIDs; the records of
//! such a pod, or of one deleted, are skipped until DEL or GC removes them. What was published
//! is kept on the node's disk, so a restarted annotator, or one on a restarted node (whose
//! tmpfs records are gone), still removes the annotation of a pod detached meanwhile.
//!
//! Failures (the API server unreachable, RBAC missing) go to the container's log with what to
//! do, once per pod and message, and never stop it. A failed pod is tried again after a
//! backoff of its own ([`backoff`]: from one pass, doubling, up to 5 minutes, with jitter, and
//! at least the server's `Retry-After`), so a node's pods do not hammer an API server that
//! refuses them every 3 s; a patch refused as invalid (422) is tried again only when the pod's
//! list changes. A success, or a new list for the pod, ends its backoff.
//!
//! A binary of its own (src/main_annotate.rs) rather than a subcommand of `roce-ipvlan`: the
//! HTTPS client (rustls and ring, about 1 MB) stays out of the plugin that Multus runs as root
//! on every attachment and that the 2 MB target is about (docs/design.md#one-binary-or-two).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::attach::pod_record::{self, PodRef, Record};
use crate::tools::cli::{self, Long, Parsed, Short};
use crate::tools::kube::{Client, Response};
use crate::tools::metrics::{self, Counters};

/// The annotation's key.
pub const ANNOTATION: &str = "roce-ipvlan.io/gids";

/// Where the installer sees the plugin's state directory (/run/roce-ipvlan on the host).
pub const DEFAULT_STATE_DIR: &str = "/host/run/roce-ipvlan";

/// What was published, on the node's disk (/var/lib/roce-ipvlan), so that it outlives a node
/// restart as the pods' annotations do.
pub const DEFAULT_PUBLISHED: &str = "/host/var/lib/roce-ipvlan/annotated.json";

/// The largest list published for one pod. Kubernetes allows 256 KiB for all of a pod's
/// annotations together (Multus' network-status among them); an entry takes about 170 bytes
/// with common names and at most 624 with the longest the kernel allows (the tests compute
/// both), so this holds 16 rails x 24 attachments of common names. A longer list is not
/// published: the patch would fail, or crowd out the other annotations.
pub const MAX_VALUE: usize = 64 * 1024;

/// How often the records are read.
pub const INTERVAL: Duration = Duration::from_secs(3);

/// The first wait after a failed patch of a pod: one pass.
pub const BACKOFF_MIN: Duration = INTERVAL;

/// The longest wait between two patches of one pod, also for a longer `Retry-After`.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// How long to wait before patching a pod again after its `failures`-th failure in a row (1
/// for the first): [`BACKOFF_MIN`] doubled each time up to [`BACKOFF_MAX`], less a random
/// part of up to half of it (`jitter`, 0 to 1), so that pods that failed together (the API
/// server was down) come back spread out; never less than one pass, and at least the server's
/// `Retry-After` (capped at [`BACKOFF_MAX`]: a wrong header must not stop the annotator).
pub fn backoff(failures: u32, jitter: f64, retry_after: Option<Duration>) -> Duration {
    let factor = 1u32
        .checked_shl(failures.saturating_sub(1))
        .unwrap_or(u32::MAX);
    let doubled = BACKOFF_MIN.saturating_mul(factor).min(BACKOFF_MAX);
    // NaN would make mul_f64 panic; taken as no jitter.
    let jitter = if jitter.is_nan() {
        0.0
    } else {
        jitter.clamp(0.0, 1.0)
    };
    let jittered = doubled.mul_f64(1.0 - jitter / 2.0).max(BACKOFF_MIN);
    jittered.max(retry_after.unwrap_or_default().min(BACKOFF_MAX))
}

/// One child of a pod's attachments, as the annotation lists it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Entry<'a> {
    interface: &'a str,
    rail: &'a str,
    device: &'a str,
    port: u32,
    gid_index: u32,
    gid: &'a str,
}

/// The annotation each pod should have: its records' children, in interface order.
pub fn desired(records: &[Record]) -> BTreeMap<PodRef, String> {
    let mut by_pod: BTreeMap<&PodRef, Vec<Entry<'_>>> = BTreeMap::new();
    for record in records {
        by_pod
            .entry(&record.pod)
            .or_default()
            .extend(record.rails.iter().map(|r| Entry {
                interface: &r.interface,
                rail: &r.rail,
                device: &r.device,
                port: r.port,
                gid_index: r.gid_index,
                gid: &r.gid,
            }));
    }
    by_pod
        .into_iter()
        .map(|(pod, mut entries)| {
            entries.sort_by(|a, b| a.interface.cmp(b.interface));
            let value = serde_json::to_string(&entries).expect("entries always serialize");
            (pod.clone(), value)
        })
        .collect()
}

/// What to patch: pods whose annotation differs from what was published (the value), and pods
/// published before whose records are gone (None: remove the annotation). Pods known to be
/// gone or recreated are left out.
pub fn plan(
    desired: &BTreeMap<PodRef, String>,
    published: &BTreeMap<PodRef, String>,
    gone: &BTreeSet<PodRef>,
) -> Vec<(PodRef, Option<String>)> {
    let mut changes: Vec<(PodRef, Option<String>)> = desired
        .iter()
        .filter(|(pod, value)| !gone.contains(*pod) && published.get(*pod) != Some(*value))
        .map(|(pod, value)| (pod.clone(), Some(value.clone())))
        .collect();
    changes.extend(
        published
            .keys()
            .filter(|pod| !desired.contains_key(*pod))
            .map(|pod| (pod.clone(), None)),
    );
    changes
}

/// The JSON merge patch (RFC 7386) that sets or removes the annotation, with the UID as a
/// precondition.
pub fn patch_body(pod: &PodRef, value: Option<&str>) -> String {
    serde_json::json!({
        "metadata": {
            "uid": pod.uid,
            "annotations": { ANNOTATION: value },
        }
    })
    .to_string()
}

/// The pod's API path; its names were checked (PodRef::is_valid), so they need no escaping.
pub fn pod_path(pod: &PodRef) -> String {
    format!("/api/v1/namespaces/{}/pods/{}", pod.namespace, pod.name)
}

/// How a patch went.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The pod no longer exists, or another pod has its name now.
    Gone,
    /// Tried again after a backoff, at least the server's `Retry-After`.
    Failed {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Refused for what the patch says (a 422 other than the UID's): the same patch would be
    /// refused again, so it is tried again only when the pod's list changes.
    Refused(String),
}

impl Outcome {
    fn failed(message: String) -> Outcome {
        Outcome::Failed {
            message,
            retry_after: None,
        }
    }
}

/// Judges the API server's answer to a patch of `pod`.
pub fn judge(pod: &PodRef, response: &Response) -> Outcome {
    let message = response.message();
    let failed = |message| Outcome::Failed {
        message,
        retry_after: response.retry_after,
    };
    match response.status {
        200..=299 => Outcome::Done,
        404 => Outcome::Gone,
        // Before the UID rule below: a policy's own message may say "uid". Not Refused as
        // other 422s are: the remedy is the token or the API server, not the patch.
        403 | 422 if message.contains("ValidatingAdmissionPolicy") => {
            failed(policy_refusal(pod, response.status, &message))
        }
        // The UID in the patch is immutable: another pod of that name answers 422
        // "metadata.uid: Invalid value: …: field is immutable" (kube-apiserver 1.36); a 409
        // "Precondition failed: UID in precondition" is the same refusal elsewhere.
        409 | 422 if message.to_ascii_lowercase().contains("uid") => Outcome::Gone,
        401 => failed(format!(
            "the API server refused the service account token (401 Unauthorized: {message}): \
             check that the annotate container mounts its pod's projected token (the \
             DaemonSet's volume \"token\") and that its service account exists"
        )),
        403 => failed(format!(
            "the installer may not patch pod {pod} (403 Forbidden: {message}): its service \
             account needs the verb \"patch\" on the resource \"pods\" (core API group); apply \
             the ClusterRole and ClusterRoleBinding roce-ipvlan-installer of deploy/ or the \
             chart (docs/deploy.md#gid-indexes-in-the-pod-object)"
        )),
        422 => Outcome::Refused(format!(
            "the API server refused the patch of pod {pod} as invalid (422: {message}): not \
             tried again until the pod's GIDs change (or the annotate container restarts); \
             a policy of the cluster may refuse the {ANNOTATION} annotation"
        )),
        status => failed(format!(
            "patching pod {pod} got HTTP {status}: {message}; tried again after a backoff \
             (at most {} s)",
            BACKOFF_MAX.as_secs()
        )),
    }
}

/// The message for a ValidatingAdmissionPolicy's refusal, which kube-apiserver words
/// `pods "x" is forbidden: ValidatingAdmissionPolicy 'P' with binding 'B' denied request: M`.
/// The installer's policy (roce-ipvlan-installer-own-node, docs/security.md) tells the pod's
/// node by the node name in the service account token, so a token without one (an old API
/// server, a long-lived token Secret) makes every patch fail this way.
fn policy_refusal(pod: &PodRef, status: u16, message: &str) -> String {
    let after = message
        .split_once("ValidatingAdmissionPolicy '")
        .and_then(|(_, rest)| rest.split_once('\''));
    let (policy, why) = match after {
        Some((policy, rest)) => (
            format!("'{policy}'"),
            rest.split_once("denied request: ")
                .map_or(message, |(_, why)| why.trim()),
        ),
        None => ("(unnamed)".to_string(), message),
    };
    format!(
        "the ValidatingAdmissionPolicy {policy} refused the patch of pod {pod} (HTTP {status}: \
         {why}): it lets the installer change only the {ANNOTATION} annotation, and only of \
         pods whose spec.nodeName is the node named in its service account token \
         (authentication.kubernetes.io/node-name). Check that the annotate container uses the \
         pod's projected service account token (the DaemonSet's volume \"token\", not a \
         token Secret), and the API server's version: kube-apiserver before 1.30, or 1.30 and 1.31 \
         with the feature gate ServiceAccountTokenPodNodeInfo off, puts no node name in the \
         token and every patch is refused (docs/security.md)"
    )
}

/// The reason of the Events posted on a pod whose annotation cannot be published.
pub const EVENT_REASON: &str = "GidAnnotationFailed";

/// The most of a message an Event carries (the API server allows 1 KiB for a legacy Event's
/// message; the whole one is in the annotate container's log).
const EVENT_MESSAGE_MAX: usize = 1000;

/// Why a patch the API server answered failed, in a word: one Event per pod and kind. None
/// when it is no failure, or when the server did not answer at all (an Event would not get
/// through either; the log and the counter say it).
pub fn failure_kind(answer: &Result<Response, String>) -> Option<&'static str> {
    let response = answer.as_ref().ok()?;
    let policy = || response.message().contains("ValidatingAdmissionPolicy");
    Some(match response.status {
        200..=299 | 404 => return None,
        403 | 422 if policy() => "admission-policy",
        401 => "unauthorized",
        403 => "forbidden",
        409 | 422 if response.message().to_ascii_lowercase().contains("uid") => return None,
        422 => "invalid",
        429 => "throttled",
        500..=599 => "server-error",
        _ => "http-error",
    })
}

/// `time` as RFC 3339 in UTC, to the second (what a legacy Event's timestamps take).
pub fn rfc3339(time: std::time::SystemTime) -> String {
    let secs = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The Event (core/v1) that tells `pod`'s owner why its annotation is not published: a
/// Warning on the pod, from `roce-ipvlan-annotate` on `node`.
pub fn event_body(
    pod: &PodRef,
    kind: &str,
    message: &str,
    node: &str,
    now: std::time::SystemTime,
) -> String {
    let mut text = format!("{ANNOTATION} not published ({kind}): {message}");
    if text.len() > EVENT_MESSAGE_MAX {
        let mut end = EVENT_MESSAGE_MAX - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    let time = rfc3339(now);
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{}.", pod.name), "namespace": pod.namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        },
        "reason": EVENT_REASON,
        "type": "Warning",
        "message": text,
        "source": {"component": "roce-ipvlan-annotate", "host": node},
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": 1,
    })
    .to_string()
}

/// The annotator's memory: what it published, what it found gone, what failed and when to
/// try it again, what it last logged.
pub struct Annotator {
    client: Client,
    records: PathBuf,
    state_file: PathBuf,
    published: BTreeMap<PodRef, String>,
    gone: BTreeSet<PodRef>,
    retries: BTreeMap<PodRef, Retry>,
    /// 0 to 1, for [`backoff`]; a fixed one in tests.
    jitter: Box<dyn FnMut() -> f64>,
    logged: BTreeMap<PodRef, String>,
    skipped: BTreeSet<PathBuf>,
    /// What `/metrics` reports of the patches (tools/metrics.rs).
    counters: Arc<Counters>,
    /// The Events posted: one per pod and failure kind, forgotten with the pod's records.
    evented: BTreeSet<(PodRef, &'static str)>,
    /// The node's name, the Events' source.
    node: String,
}

/// A pod whose last patch failed.
struct Retry {
    /// What that patch was to set (None: the removal); another value is sent at once.
    value: Option<String>,
    failures: u32,
    /// When to try again; None after a Refused patch, until the value changes.
    at: Option<Instant>,
}

/// Jitter for [`backoff`]: xorshift64 seeded from the clock and the PID. Not for secrets, only
/// to keep the annotators of many nodes (and the pods of one) from retrying in step.
fn jitter_source() -> Box<dyn FnMut() -> f64> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut state = (nanos ^ u64::from(std::process::id()).rotate_left(32)) | 1;
    Box::new(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[derive(Serialize, serde::Deserialize)]
struct Published {
    pod: PodRef,
    value: String,
}

impl Annotator {
    /// Reads what an earlier annotator published (`state_file`); the records are in
    /// `state_dir`/attachments.
    pub fn new(client: Client, state_dir: &Path, state_file: &Path) -> Annotator {
        let state_file = state_file.to_path_buf();
        let published = std::fs::read(&state_file)
            .ok()
            .and_then(|text| serde_json::from_slice::<Vec<Published>>(&text).ok())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.pod.is_valid())
            .map(|p| (p.pod, p.value))
            .collect();
        Annotator {
            client,
            records: state_dir.join("attachments"),
            state_file,
            published,
            gone: BTreeSet::new(),
            retries: BTreeMap::new(),
            jitter: jitter_source(),
            logged: BTreeMap::new(),
            skipped: BTreeSet::new(),
            counters: Arc::default(),
            evented: BTreeSet::new(),
            node: std::env::var("NODE_NAME").unwrap_or_default(),
        }
    }

    /// Counts into `counters` (the ones `/metrics` serves) instead of its own.
    pub fn with_counters(mut self, counters: Arc<Counters>) -> Annotator {
        self.counters = counters;
        self
    }

    /// One pass: read the records, patch what changed (unless its pod is in backoff),
    /// remember it.
    pub fn pass(&mut self) {
        self.pass_at(Instant::now());
    }

    fn pass_at(&mut self, now: Instant) {
        let entries = match pod_record::read_all(&self.records) {
            Ok(e) => e,
            Err(e) => {
                self.log_once(None, format!("cannot read {}: {e}", self.records.display()));
                return;
            }
        };
        // Bounded by the files there now: a skipped file that went is forgotten.
        self.skipped
            .retain(|skipped| entries.iter().any(|(path, _)| path == skipped));
        let mut records = Vec::with_capacity(entries.len());
        for (path, record) in entries {
            match record {
                Ok(r) => records.push(r),
                Err(why) => {
                    if self.skipped.insert(path.clone()) {
                        eprintln!("roce-ipvlan annotate: {} skipped: {why}", path.display());
                    }
                }
            }
        }
        let mut desired = desired(&records);
        // Forget what no record names any more: bounded by the node's records.
        self.gone.retain(|pod| desired.contains_key(pod));
        self.logged
            .retain(|pod, _| desired.contains_key(pod) || self.published.contains_key(pod));
        self.evented
            .retain(|(pod, _)| desired.contains_key(pod) || self.published.contains_key(pod));
        let too_long: Vec<PodRef> = desired
            .iter()
            .filter(|(_, value)| value.len() > MAX_VALUE)
            .map(|(pod, _)| pod.clone())
            .collect();
        for pod in too_long {
            let length = desired.remove(&pod).map_or(0, |v| v.len());
            let message = format!(
                "pod {pod}'s {ANNOTATION} list would be {length} bytes, more than the \
                 {MAX_VALUE} the annotator publishes (Kubernetes allows 256 KiB for all of a \
                 pod's annotations together): not published, and one published before is \
                 removed; its GIDs are in the records on the node (pod_record.rs)"
            );
            self.tell_pod(&pod, "too-long", &message);
            self.log_once(Some(&pod), message);
        }
        let changes = plan(&desired, &self.published, &self.gone);
        // Bounded by what is to be patched: a pod whose list is published meanwhile, or whose
        // records went, starts afresh.
        let pending: BTreeSet<&PodRef> = changes.iter().map(|(pod, _)| pod).collect();
        self.retries.retain(|pod, _| pending.contains(pod));
        // Saved only when it changed: a pod in backoff must not cost an fsync every pass.
        let mut published_changed = false;
        for (pod, value) in changes {
            if let Some(retry) = self.retries.get(&pod) {
                let waiting = retry.value == value && retry.at.is_none_or(|at| now < at);
                if waiting {
                    continue;
                }
            }
            let answer = self.client.patch(
                &pod_path(&pod),
                "application/merge-patch+json",
                patch_body(&pod, value.as_deref()).as_bytes(),
            );
            let kind = failure_kind(&answer);
            let outcome = match answer {
                Ok(response) => judge(&pod, &response),
                Err(e) => Outcome::failed(format!(
                    "cannot patch pod {pod}: {e}; tried again after a backoff (at most {} s)",
                    BACKOFF_MAX.as_secs()
                )),
            };
            let c = &self.counters;
            Counters::add(match outcome {
                Outcome::Done => &c.patches_done,
                Outcome::Gone => &c.patches_gone,
                Outcome::Failed { .. } => &c.patches_failed,
                Outcome::Refused(_) => &c.patches_refused,
            });
            match outcome {
                Outcome::Done => {
                    match &value {
                        Some(v) => {
                            println!("annotated pod {pod}: {ANNOTATION}={v}");
                            self.published.insert(pod.clone(), v.clone());
                        }
                        None => {
                            println!("removed {ANNOTATION} from pod {pod}: no attachment left");
                            self.published.remove(&pod);
                        }
                    }
                    self.logged.remove(&pod);
                    self.retries.remove(&pod);
                    published_changed = true;
                }
                Outcome::Gone => {
                    println!(
                        "pod {pod} is gone or was recreated: its attachment records are not \
                         published (DEL or GC removes them)"
                    );
                    published_changed |= self.published.remove(&pod).is_some();
                    self.retries.remove(&pod);
                    if value.is_some() {
                        self.gone.insert(pod);
                    }
                }
                Outcome::Failed {
                    message,
                    retry_after,
                } => {
                    if let Some(kind) = kind {
                        self.tell_pod(&pod, kind, &message);
                    }
                    self.log_once(Some(&pod), message);
                    let failures = match self.retries.get(&pod) {
                        Some(retry) if retry.value == value => retry.failures.saturating_add(1),
                        _ => 1,
                    };
                    let at = now + backoff(failures, (self.jitter)(), retry_after);
                    let retry = Retry {
                        value,
                        failures,
                        at: Some(at),
                    };
                    self.retries.insert(pod, retry);
                }
                Outcome::Refused(message) => {
                    self.tell_pod(&pod, kind.unwrap_or("invalid"), &message);
                    self.log_once(Some(&pod), message);
                    let retry = Retry {
                        value,
                        failures: 0,
                        at: None,
                    };
                    self.retries.insert(pod, retry);
                }
            }
        }
        if published_changed {
            self.save();
        }
        self.counters.pods_pending.store(
            self.retries.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Posts an Event on `pod` for a failure of `kind`, once per pod and kind (not per
    /// retry). The Event's own failure is counted and logged once, never retried.
    fn tell_pod(&mut self, pod: &PodRef, kind: &'static str, message: &str) {
        if !self.evented.insert((pod.clone(), kind)) {
            return;
        }
        let body = event_body(pod, kind, message, &self.node, std::time::SystemTime::now());
        let path = format!("/api/v1/namespaces/{}/events", pod.namespace);
        let failure = match self.client.post(&path, "application/json", body.as_bytes()) {
            Ok(r) if (200..300).contains(&r.status) => None,
            Ok(r) => Some(format!(
                "cannot post Events on pods (HTTP {}: {}): the service account needs the verb \
                 \"create\" on \"events\" (ClusterRole roce-ipvlan-installer of deploy/ or the \
                 chart); the failures are in this log",
                r.status,
                r.message()
            )),
            Err(e) => Some(format!("cannot post Events on pods: {e}")),
        };
        match failure {
            None => Counters::add(&self.counters.events_created),
            Some(message) => {
                Counters::add(&self.counters.events_failed);
                self.log_once(None, message);
            }
        }
    }

    fn log_once(&mut self, pod: Option<&PodRef>, message: String) {
        let key = pod.cloned().unwrap_or(PodRef {
            namespace: String::new(),
            name: String::new(),
            uid: String::new(),
        });
        if self.logged.get(&key) != Some(&message) {
            eprintln!("roce-ipvlan annotate: {message}");
            self.logged.insert(key, message);
        }
    }

    fn save(&mut self) {
        let list: Vec<Published> = self
            .published
            .iter()
            .map(|(pod, value)| Published {
                pod: pod.clone(),
                value: value.clone(),
            })
            .collect();
        let text = serde_json::to_vec(&list).expect("the published list always serializes");
        let written = match self.state_file.parent() {
            Some(dir) => std::fs::create_dir_all(dir),
            None => Ok(()),
        }
        // 0600: it names the node's pods; only the annotator (root) reads it back.
        .and_then(|()| crate::kernel::atomic_file::write(&self.state_file, &text, 0o600));
        if let Err(e) = written {
            self.log_once(
                None,
                format!(
                    "cannot save what was published to {}: {e} (a restarted annotator may leave \
                     an annotation of a pod detached meanwhile)",
                    self.state_file.display()
                ),
            );
        }
    }
}

/// Whether to run, and with which client: in a cluster (`KUBERNETES_SERVICE_HOST`) on a node
/// (`NODE_NAME`, the downward API), as the DaemonSet runs it. Otherwise it says why not.
fn client() -> Option<Client> {
    let node = std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty());
    match (Client::in_cluster(), node) {
        (Ok(Some(client)), Some(node)) => {
            println!(
                "publishing the GID indexes of node {node}'s pods as their {ANNOTATION} \
                 annotation (API server {})",
                client.endpoint()
            );
            Some(client)
        }
        (Ok(None), _) => {
            eprintln!(
                "roce-ipvlan annotate: not annotating pods: KUBERNETES_SERVICE_HOST is not set \
                 (not in a cluster)"
            );
            None
        }
        (Ok(Some(_)), None) => {
            eprintln!(
                "roce-ipvlan annotate: not annotating pods: NODE_NAME is not set (the DaemonSet \
                 sets it from spec.nodeName)"
            );
            None
        }
        (Err(e), _) => {
            eprintln!("roce-ipvlan annotate: not annotating pods: {e}");
            None
        }
    }
}

/// `roce-ipvlan-annotate [--state-dir DIR]`: the DaemonSet's `annotate` container. Publishes
/// the node's pods' GID indexes every few seconds until SIGTERM/SIGINT. It never exits on its
/// own, not even when it cannot annotate (outside a cluster, no NODE_NAME): an exit would
/// restart the container, and a crash loop would make the DaemonSet's pod unready.
pub fn main(args: &[String]) -> i32 {
    const USAGE: &str = "usage: roce-ipvlan-annotate [--state-dir DIR] [--published FILE] \
                 [--metrics-address IP:PORT|off]\n\
                 Publishes the GID indexes of this node's pods as their roce-ipvlan.io/gids \
                 annotation, from the plugin's records in DIR/attachments (default \
                 /host/run/roce-ipvlan), every 3 seconds, until SIGTERM; what it published is \
                 kept in FILE (default /host/var/lib/roce-ipvlan/annotated.json). Needs the \
                 service account's token (patch on pods) and NODE_NAME; docs/deploy.md. \
                 Serves /metrics and /healthz on IP:PORT (default port 9740 on every address; \
                 also ROCE_IPVLAN_METRICS_ADDRESS; off: not served).";
    let (state_dir, published, metrics_address) =
        match cli::args_or_exit("annotate", USAGE, parse_args(args)) {
            Ok(parsed) => parsed,
            Err(code) => return code,
        };
    let stop = wait_for_signal();
    let counters = Arc::new(Counters::default());
    match metrics::listen(metrics_address.as_deref()) {
        Ok(Some(listener)) => {
            if let Ok(addr) = listener.local_addr() {
                println!("serving /metrics and /healthz on {addr}");
            }
            metrics::serve(listener, state_dir.clone(), Arc::clone(&counters));
        }
        Ok(None) => println!("not serving /metrics (--metrics-address off)"),
        // Not fatal: the annotations matter more than the metrics; the liveness probe on
        // /healthz then restarts the container, which tries the port again.
        Err(e) => eprintln!("roce-ipvlan annotate: {e}"),
    }
    let Some(client) = client() else {
        // Nothing to do: stay up (see above) until told to stop.
        let _ = stop.recv();
        return 0;
    };
    println!("records in {}", state_dir.join("attachments").display());
    let mut annotator = Annotator::new(client, &state_dir, &published).with_counters(counters);
    loop {
        annotator.pass();
        match stop.recv_timeout(INTERVAL) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            _ => return 0,
        }
    }
}

type Args = (PathBuf, PathBuf, Option<String>);

fn parse_args(args: &[String]) -> cli::Outcome<Args> {
    cli::parse(args, |p| {
        let mut dir = PathBuf::from(DEFAULT_STATE_DIR);
        let mut published = PathBuf::from(DEFAULT_PUBLISHED);
        let mut metrics_address = None;
        while let Some(arg) = p.next()? {
            match arg {
                Long("state-dir") => dir = PathBuf::from(cli::string(p)?),
                Long("published") => published = PathBuf::from(cli::string(p)?),
                Long("metrics-address") => metrics_address = Some(cli::string(p)?),
                Short('h') | Long("help") => return Ok(Parsed::Help),
                arg => return Err(cli::unexpected(arg)),
            }
        }
        Ok(Parsed::Run((dir, published, metrics_address)))
    })
}

/// A channel that gets a message on SIGTERM or SIGINT. As PID 1 of its container the process
/// has no default action for them (the kernel ignores them for PID 1), so it waits for them
/// itself: blocked in every thread, sigwait()ed by one.
fn wait_for_signal() -> std::sync::mpsc::Receiver<()> {
    use nix::sys::signal::{SigSet, Signal};
    let (tx, rx) = std::sync::mpsc::channel();
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    if let Err(e) = set.thread_block() {
        eprintln!("roce-ipvlan annotate: cannot block signals ({e}): SIGTERM ends it abruptly");
        std::mem::forget(tx);
        return rx;
    }
    std::thread::spawn(move || match set.wait() {
        Ok(sig) => {
            println!("{sig}: exiting");
            let _ = tx.send(());
        }
        Err(e) => {
            eprintln!("roce-ipvlan annotate: waiting for signals failed: {e}");
            std::mem::forget(tx);
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::pod_record::Rail;
    use std::sync::atomic::Ordering;

    /// A client of the local HTTPS API server on `port` whose certificates are in `dir`.
    fn client_of(dir: &Path, port: u16) -> Client {
        Client::new("127.0.0.1", port, &dir.join("token"), &dir.join("ca.crt"))
    }

    /// A local HTTPS API server with its certificates in `dir` (kube.rs's test_server), and a
    /// client of it: the server (killed when dropped), its port, the client, the requests it
    /// received.
    fn api_server(
        dir: &Path,
    ) -> (
        crate::tools::kube::test_server::Server,
        u16,
        Client,
        std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    ) {
        let (server, port, requests) = crate::tools::kube::test_server::start(dir);
        (server, port, client_of(dir, port), requests)
    }

    fn pod(name: &str, uid: &str) -> PodRef {
        PodRef {
            namespace: "ml".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn record(p: &PodRef, ifname: &str, children: &[(&str, &str, u32)]) -> Record {
        Record {
            version: pod_record::VERSION,
            network: "rails".into(),
            container_id: "c1".into(),
            ifname: ifname.into(),
            pod: p.clone(),
            rails: children
                .iter()
                .map(|(child, rail, index)| Rail {
                    interface: child.to_string(),
                    rail: rail.to_string(),
                    device: format!("rxe_{rail}"),
                    port: 1,
                    gid_index: *index,
                    gid: "0000:0000:0000:0000:0000:ffff:0a00:0005".into(),
                    addresses: vec![],
                    gid_slots: None,
                })
                .collect(),
            netns: None,
        }
    }

    #[test]
    fn one_list_per_pod_in_interface_order() {
        let a = pod("a", "aa-1");
        let b = pod("b", "bb-2");
        let records = vec![
            record(&a, "net2", &[("net2", "rdma1", 4)]),
            record(&a, "net1", &[("net1", "rdma0", 3)]),
            record(&b, "roce", &[("roce0", "rdma0", 5), ("roce1", "rdma1", 2)]),
        ];
        let d = desired(&records);
        assert_eq!(d.len(), 2);
        assert_eq!(
            d[&a],
            r#"[{"interface":"net1","rail":"rdma0","device":"rxe_rdma0","port":1,"gidIndex":3,"gid":"0000:0000:0000:0000:0000:ffff:0a00:0005"},{"interface":"net2","rail":"rdma1","device":"rxe_rdma1","port":1,"gidIndex":4,"gid":"0000:0000:0000:0000:0000:ffff:0a00:0005"}]"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&d[&b]).unwrap();
        assert_eq!(parsed[1]["interface"], "roce1");
        assert_eq!(parsed[1]["gidIndex"], 2);
    }

    #[test]
    fn only_changes_are_patched() {
        let a = pod("a", "aa-1");
        let b = pod("b", "bb-2");
        let c = pod("c", "cc-3");
        let desired = BTreeMap::from([(a.clone(), "[1]".to_string()), (b.clone(), "[2]".into())]);
        let published = BTreeMap::from([
            (a.clone(), "[1]".to_string()),
            (c.clone(), "[3]".to_string()),
        ]);
        // a unchanged, b new, c detached.
        assert_eq!(
            plan(&desired, &published, &BTreeSet::new()),
            vec![(b.clone(), Some("[2]".into())), (c.clone(), None)]
        );
        // Nothing to do once published; a pod found gone is not retried.
        assert!(plan(&desired, &desired, &BTreeSet::new()).is_empty());
        assert!(plan(
            &desired,
            &BTreeMap::from([(a, "[1]".into())]),
            &BTreeSet::from([b])
        )
        .is_empty());
    }

    #[test]
    fn the_patch_sets_or_removes_the_annotation_under_the_pods_uid() {
        let a = pod("trainer-0", "0b6e2a3c-7d1f");
        let set: serde_json::Value =
            serde_json::from_str(&patch_body(&a, Some(r#"[{"gidIndex":3}]"#))).unwrap();
        assert_eq!(
            set,
            serde_json::json!({"metadata": {"uid": "0b6e2a3c-7d1f",
                "annotations": {"roce-ipvlan.io/gids": "[{\"gidIndex\":3}]"}}})
        );
        let unset: serde_json::Value = serde_json::from_str(&patch_body(&a, None)).unwrap();
        assert_eq!(
            unset["metadata"]["annotations"][ANNOTATION],
            serde_json::Value::Null
        );
        assert_eq!(pod_path(&a), "/api/v1/namespaces/ml/pods/trainer-0");
    }

    #[test]
    fn arguments() {
        let args = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_args(&args(&[])).unwrap(),
            Parsed::Run((
                PathBuf::from("/host/run/roce-ipvlan"),
                PathBuf::from("/host/var/lib/roce-ipvlan/annotated.json"),
                None
            ))
        );
        assert_eq!(
            parse_args(&args(&[
                "--state-dir=/x",
                "--published",
                "/y/p.json",
                "--metrics-address",
                "127.0.0.1:9"
            ]))
            .unwrap(),
            Parsed::Run((
                PathBuf::from("/x"),
                PathBuf::from("/y/p.json"),
                Some("127.0.0.1:9".into())
            ))
        );
        assert_eq!(parse_args(&args(&["--help"])).unwrap(), Parsed::Help);
        assert!(parse_args(&args(&["--bogus"])).is_err());
    }

    /// The loop against a local HTTPS API server: a new pod is patched once with its list, a
    /// pod gone (404) or recreated (409 on the UID) is not retried, a pod whose records went
    /// gets the annotation removed, and a restarted annotator remembers what it published.
    #[test]
    fn passes_patch_changes_only_and_remove_what_went() {
        let tmp = tempfile::tempdir().unwrap();
        let (_server, port, client, mut requests) = api_server(tmp.path());
        let state = tmp.path().join("state");
        let records = state.join("attachments");
        let live = pod("live", "aa-1");
        let mut r = record(&live, "net1", &[("net1", "rdma0", 3)]);
        pod_record::write(&records, &r).unwrap();
        for (name, cid) in [("gone", "c2"), ("recreated", "c3")] {
            let mut other = record(&pod(name, "bb-2"), "net1", &[("net1", "rdma1", 4)]);
            other.container_id = cid.into();
            pod_record::write(&records, &other).unwrap();
        }
        let mut next = || -> serde_json::Value {
            serde_json::from_str(&requests.next().unwrap().unwrap()).unwrap()
        };

        let published = tmp.path().join("var/lib/roce-ipvlan/annotated.json");
        let mut annotator = Annotator::new(client.clone(), &state, &published);
        annotator.pass();
        let mut got: Vec<serde_json::Value> = (0..3).map(|_| next()).collect();
        got.sort_by_key(|g| g["path"].as_str().unwrap().to_string());
        assert_eq!(got[0]["path"], "/api/v1/namespaces/ml/pods/gone");
        assert_eq!(got[1]["path"], "/api/v1/namespaces/ml/pods/live");
        assert_eq!(got[2]["path"], "/api/v1/namespaces/ml/pods/recreated");
        assert_eq!(
            got[1]["headers"]["content-type"],
            "application/merge-patch+json"
        );
        let body: serde_json::Value =
            serde_json::from_str(got[1]["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["metadata"]["uid"], "aa-1");
        let value: serde_json::Value = serde_json::from_str(
            body["metadata"]["annotations"][ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(value[0]["gidIndex"], 3);
        assert_eq!(value[0]["interface"], "net1");

        // Nothing changed: nothing is sent (the next request seen is the one below).
        annotator.pass();
        // The index changes (a new sandbox): patched again; then the attachment goes.
        r.rails[0].gid_index = 5;
        pod_record::write(&records, &r).unwrap();
        annotator.pass();
        let got = next();
        assert_eq!(got["path"], "/api/v1/namespaces/ml/pods/live");
        assert!(
            got["body"].as_str().unwrap().contains(r#"\"gidIndex\":5"#),
            "{got}"
        );

        // A restarted annotator knows what was published: the removal still happens. (It
        // tries the records of the gone and recreated pods once more: what it found gone is
        // not kept.)
        pod_record::remove(&records, "c1", "net1");
        let mut restarted = Annotator::new(client, &state, &published);
        restarted.pass();
        let mut got: Vec<serde_json::Value> = (0..3).map(|_| next()).collect();
        got.sort_by_key(|g| g["path"].as_str().unwrap().to_string());
        assert_eq!(got[1]["path"], "/api/v1/namespaces/ml/pods/live");
        let body: serde_json::Value =
            serde_json::from_str(got[1]["body"].as_str().unwrap()).unwrap();
        assert_eq!(
            body["metadata"]["annotations"][ANNOTATION],
            serde_json::Value::Null
        );
        assert!(restarted.published.is_empty());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&published).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "what was published is the annotator's own"
        );
        restarted.pass();
        // Only now a request of this test's own: had either pass sent one, it would be read here.
        let probe = client_of(tmp.path(), port);
        probe.patch("/probe", "application/json", b"{}").unwrap();
        assert_eq!(
            next()["path"],
            "/probe",
            "a pass with nothing changed sent a patch"
        );
    }

    /// The installer's own-node policy refusing a patch (as kube-apiserver 1.32 words it):
    /// the log names the policy and its message and says what to check, not RBAC's remedy;
    /// also as a 422 (a validation with reason Invalid), and with "uid" in the policy's
    /// message, which is not the UID refusal.
    #[test]
    fn an_admission_policys_refusal_names_the_policy_and_the_token() {
        let a = pod("a", "aa-1");
        let denied = |status, why: &str| Response {
            status,
            body: serde_json::json!({"kind": "Status", "reason": "Forbidden", "message": format!(
                "pods \"a\" is forbidden: ValidatingAdmissionPolicy \
                 'roce-ipvlan-installer-own-node' with binding 'roce-ipvlan-installer-own-node' \
                 denied request: {why}")})
            .to_string()
            .into_bytes(),
            retry_after: None,
        };
        for (status, why) in [
            (403, "only pods on the installer's own node"),
            (422, "only the roce-ipvlan.io/gids annotation"),
            (422, "the token names no node; see the uid of the pod"),
        ] {
            let Outcome::Failed { message: m, .. } = judge(&a, &denied(status, why)) else {
                panic!("{status} {why}: a failure");
            };
            assert!(
                m.contains("ValidatingAdmissionPolicy 'roce-ipvlan-installer-own-node'"),
                "{m}"
            );
            assert!(m.contains(&format!("HTTP {status}: {why})")), "{m}");
            for hint in [
                "spec.nodeName",
                "projected service account token",
                "ServiceAccountTokenPodNodeInfo",
                "1.30",
                "docs/security.md",
            ] {
                assert!(m.contains(hint), "{hint}: {m}");
            }
            assert!(!m.contains("ClusterRole"), "not RBAC's remedy: {m}");
        }
    }

    #[test]
    fn backoff_doubles_from_one_pass_to_five_minutes_with_jitter_and_retry_after() {
        let s = Duration::from_secs;
        let no_jitter: Vec<u64> = (1..=9).map(|n| backoff(n, 0.0, None).as_secs()).collect();
        assert_eq!(no_jitter, [3, 6, 12, 24, 48, 96, 192, 300, 300]);
        assert_eq!(backoff(0, 0.0, None), s(3));
        assert_eq!(backoff(u32::MAX, 0.0, None), BACKOFF_MAX);
        // Jitter takes up to half off, never below one pass.
        assert_eq!(backoff(5, 1.0, None), s(24));
        assert_eq!(backoff(5, 0.5, None), s(36));
        assert_eq!(backoff(1, 1.0, None), s(3));
        assert_eq!(backoff(9, 1.0, None), s(150));
        assert_eq!(backoff(5, f64::NAN, None), s(48));
        // Retry-After: at least that long, but never more than the cap.
        assert_eq!(backoff(1, 0.0, Some(s(20))), s(20));
        assert_eq!(backoff(1, 0.0, Some(s(3600))), BACKOFF_MAX);
        assert_eq!(backoff(6, 0.0, Some(s(1))), s(96));
        for n in 0..64 {
            for j in [0.0, 0.1, 0.5, 0.99, 1.0, -3.0, 7.0] {
                let d = backoff(n, j, None);
                assert!((BACKOFF_MIN..=BACKOFF_MAX).contains(&d), "{n} {j}: {d:?}");
            }
        }
    }

    /// Paths the test server got, in order, up to a probe of the test's own (so that "none"
    /// is known, not waited for).
    fn sent(
        requests: &mut impl Iterator<Item = std::io::Result<String>>,
        probe: &Client,
    ) -> Vec<String> {
        sent_all(requests, probe).0
    }

    /// The patched pods' names, and the Events posted (each body's involved pod's name and
    /// message).
    fn sent_all(
        requests: &mut impl Iterator<Item = std::io::Result<String>>,
        probe: &Client,
    ) -> (Vec<String>, Vec<(String, String)>) {
        probe.patch("/probe", "application/json", b"{}").unwrap();
        let (mut paths, mut events) = (Vec::new(), Vec::new());
        loop {
            let got: serde_json::Value =
                serde_json::from_str(&requests.next().unwrap().unwrap()).unwrap();
            let path = got["path"].as_str().unwrap().rsplit('/').next().unwrap();
            if path == "probe" {
                return (paths, events);
            }
            if got["method"] == "POST" {
                assert_eq!(path, "events");
                let body: serde_json::Value =
                    serde_json::from_str(got["body"].as_str().unwrap()).unwrap();
                let name = body["involvedObject"]["name"].as_str().unwrap().to_string();
                events.push((name, body["message"].as_str().unwrap().to_string()));
                continue;
            }
            paths.push(path.to_string());
        }
    }

    /// The loop's backoff, on a clock of the test's: a pod whose patch fails (500) is tried
    /// after 3 s, then 6 s, 12 s; one answered 429 with Retry-After: 20 not before 20 s; one
    /// refused as invalid (422) only once its list changes, and then at once.
    #[test]
    fn failed_pods_back_off_and_a_new_list_is_sent_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let (_server, _, client, mut requests) = api_server(tmp.path());
        let state = tmp.path().join("state");
        let records = state.join("attachments");
        let mut invalid = record(&pod("invalid", "cc-3"), "net1", &[("net1", "rdma0", 3)]);
        invalid.container_id = "c3".into();
        for (name, cid) in [("broken", "c1"), ("busy", "c2")] {
            let mut r = record(&pod(name, "aa-1"), "net1", &[("net1", "rdma0", 3)]);
            r.container_id = cid.into();
            pod_record::write(&records, &r).unwrap();
        }
        pod_record::write(&records, &invalid).unwrap();
        let mut annotator = Annotator::new(client.clone(), &state, &tmp.path().join("p.json"));
        annotator.jitter = Box::new(|| 0.0);
        let t0 = Instant::now();
        let at = |secs: f64| t0 + Duration::from_secs_f64(secs);
        let mut pass = |annotator: &mut Annotator, secs: f64| {
            annotator.pass_at(at(secs));
            sent(&mut requests, &client)
        };

        assert_eq!(pass(&mut annotator, 0.0), ["broken", "busy", "invalid"]);
        let c = Arc::clone(&annotator.counters);
        let get = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
        assert_eq!(
            (
                get(&c.patches_failed),
                get(&c.patches_refused),
                get(&c.patches_done)
            ),
            (2, 1, 0),
            "500 and 429 failed, 422 refused"
        );
        assert!(pass(&mut annotator, 2.9).is_empty());
        assert_eq!(pass(&mut annotator, 3.0), ["broken"]);
        assert!(pass(&mut annotator, 8.9).is_empty());
        assert_eq!(pass(&mut annotator, 9.0), ["broken"]);
        assert!(pass(&mut annotator, 19.9).is_empty());
        assert_eq!(pass(&mut annotator, 20.0), ["busy"]);
        assert_eq!(pass(&mut annotator, 21.0), ["broken"]);
        // The invalid pod's list changes: sent at once, then refused for good again.
        invalid.rails[0].gid_index = 4;
        pod_record::write(&records, &invalid).unwrap();
        assert_eq!(pass(&mut annotator, 21.5), ["invalid"]);
        assert!(pass(&mut annotator, 1000.0).contains(&"broken".to_string()));
        assert!(!pass(&mut annotator, 2000.0).contains(&"invalid".to_string()));
        // Nothing was published: nothing was written (no fsync every pass in backoff).
        assert!(!tmp.path().join("p.json").exists());
        // Bounded: the records gone, nothing is kept for them (none was ever published).
        for cid in ["c1", "c2", "c3"] {
            pod_record::remove(&records, cid, "net1");
        }
        assert!(pass(&mut annotator, 3000.0).is_empty());
        assert!(annotator.retries.is_empty());
    }

    /// The annotation's size from desired()'s format: one entry with the longest values the
    /// kernel and the plugin allow (interface and rail names of 15 bytes that JSON escapes
    /// the most, an RDMA device name of 63 control bytes, u32 port and index) and with common
    /// ones; a pod of 16 rails x 24 attachments of common names fits MAX_VALUE, and MAX_VALUE
    /// stays well below Kubernetes' 256 KiB for all of a pod's annotations.
    #[test]
    fn the_annotation_stays_well_below_the_api_servers_limit() {
        let p = pod("a", "aa-1");
        let one = |interface: &str, rail: &str, device: &str, port, index| {
            let mut r = record(&p, "net1", &[]);
            r.rails.push(Rail {
                interface: interface.into(),
                rail: rail.into(),
                device: device.into(),
                port,
                gid_index: index,
                gid: "fe80:0000:0000:0000:0000:0000:0000:0001".into(),
                addresses: vec![],
                gid_slots: None,
            });
            desired(&[r])[&p].len() - 2 // without the list's brackets
        };
        let worst = one(
            &"\"".repeat(15),
            &"\u{1}".repeat(15),
            &"\u{1}".repeat(63),
            u32::MAX,
            u32::MAX,
        );
        assert_eq!(worst, 624, "the module's MAX_VALUE comment quotes it");
        let common = one("net16", "ens1f1np1", "mlx5_15", 1, 131);
        assert!(common <= 170, "{common}");
        // 16 rails x 24 attachments of common names, one list: within MAX_VALUE.
        let records: Vec<Record> = (0..24)
            .map(|a| {
                let mut r = record(&p, &format!("net{a}"), &[]);
                r.container_id = format!("c{a}");
                r.rails = (0..16)
                    .map(|i| Rail {
                        interface: format!("roce{a}r{i}"),
                        rail: format!("ens{i}f1np1"),
                        device: format!("mlx5_{i}"),
                        port: 1,
                        gid_index: 131,
                        gid: "0000:0000:0000:0000:0000:ffff:0a38:0105".into(),
                        addresses: vec![],
                        gid_slots: None,
                    })
                    .collect();
                r
            })
            .collect();
        let value = &desired(&records)[&p];
        assert!(value.len() <= MAX_VALUE, "{}", value.len());
        // The worst entries: 16 rails x 6 attachments still fit.
        assert!(96 * (worst + 1) + 2 <= MAX_VALUE);
        // Well below the API server's limit, with room for Multus' annotations.
        assert!(MAX_VALUE <= 256 * 1024 / 4 && ANNOTATION.len() < 64);
    }

    /// What the pass does with what it reads: a record under another attachment's name (for
    /// a pod that has none of its own) is skipped, remembered once, and not published; a pod
    /// whose list is longer than MAX_VALUE is not patched.
    #[test]
    fn a_foreign_record_and_a_too_long_list_are_not_published() {
        let tmp = tempfile::tempdir().unwrap();
        let (_server, _, client, mut requests) = api_server(tmp.path());
        let state = tmp.path().join("state");
        let records = state.join("attachments");
        let mine = record(&pod("mine", "aa-1"), "net1", &[("net1", "rdma0", 3)]);
        pod_record::write(&records, &mine).unwrap();
        let mut foreign = record(&pod("victim", "bb-2"), "net1", &[("net1", "rdma1", 4)]);
        foreign.container_id = "c9".into();
        let planted = records.join("c2_net1.json");
        std::fs::write(&planted, serde_json::to_vec(&foreign).unwrap()).unwrap();
        let big = pod("big", "cc-3");
        for a in 0..40 {
            let children: Vec<(String, String, u32)> = (0..16)
                .map(|i| (format!("roce{a}r{i}"), format!("ens{i}f1np1"), 131))
                .collect();
            let borrowed: Vec<(&str, &str, u32)> = children
                .iter()
                .map(|(c, r, i)| (c.as_str(), r.as_str(), *i))
                .collect();
            let mut r = record(&big, &format!("net{a}"), &borrowed);
            r.container_id = format!("big{a}");
            pod_record::write(&records, &r).unwrap();
        }
        let mut annotator = Annotator::new(client.clone(), &state, &tmp.path().join("p.json"));
        annotator.pass();
        assert_eq!(sent(&mut requests, &client), ["mine"]);
        assert!(annotator.skipped.contains(&planted));
        assert!(annotator.logged.keys().any(|p| p.name == "big"));
        annotator.pass();
        assert!(sent(&mut requests, &client).is_empty());
    }

    /// An API server that cannot be reached (connection refused) puts the pod in backoff
    /// too; once it answers, the patch goes through and nothing of the backoff is kept.
    #[test]
    fn an_unreachable_api_server_backs_off_and_a_success_ends_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (_server, port, _, mut requests) = api_server(tmp.path());
        let client = |port| client_of(tmp.path(), port);
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let state = tmp.path().join("state");
        let r = record(&pod("live", "aa-1"), "net1", &[("net1", "rdma0", 3)]);
        pod_record::write(&state.join("attachments"), &r).unwrap();
        let mut annotator = Annotator::new(client(closed), &state, &tmp.path().join("p.json"));
        annotator.jitter = Box::new(|| 0.0);
        let t0 = Instant::now();
        let counted = |a: &Annotator| {
            let c = &a.counters;
            let get = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
            (
                get(&c.patches_failed),
                get(&c.patches_done),
                get(&c.pods_pending),
            )
        };
        annotator.pass_at(t0);
        assert_eq!(annotator.retries[&pod("live", "aa-1")].failures, 1);
        assert_eq!(
            counted(&annotator),
            (1, 0, 1),
            "refused connection: a failed patch"
        );
        annotator.pass_at(t0 + Duration::from_secs(3));
        assert_eq!(annotator.retries[&pod("live", "aa-1")].failures, 2);
        assert_eq!(counted(&annotator), (2, 0, 1));
        annotator.client = client(port);
        annotator.pass_at(t0 + Duration::from_secs(5));
        assert!(
            sent(&mut requests, &client(port)).is_empty(),
            "in backoff until 9 s"
        );
        annotator.pass_at(t0 + Duration::from_secs(9));
        assert_eq!(sent(&mut requests, &client(port)), ["live"]);
        assert_eq!(counted(&annotator), (2, 1, 0), "published: nothing pending");
        assert!(annotator.retries.is_empty());
        assert!(annotator.published.contains_key(&pod("live", "aa-1")));
    }

    /// A pod whose patch fails gets one Event per failure kind, not one per retry: 500, 429
    /// and 422 each post one on the first pass and none on the retries; a connection refused
    /// posts none (the API server did not answer) but still counts the failed patch.
    #[test]
    fn a_failed_patch_posts_one_event_per_pod_and_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let (_server, _, client, mut requests) = api_server(tmp.path());
        let state = tmp.path().join("state");
        let records = state.join("attachments");
        for (name, cid) in [
            ("broken", "c1"),
            ("busy", "c2"),
            ("invalid", "c3"),
            ("ok", "c4"),
        ] {
            let mut r = record(&pod(name, "aa-1"), "net1", &[("net1", "rdma0", 3)]);
            r.container_id = cid.into();
            pod_record::write(&records, &r).unwrap();
        }
        let mut annotator = Annotator::new(client.clone(), &state, &tmp.path().join("p.json"));
        annotator.jitter = Box::new(|| 0.0);
        let t0 = Instant::now();
        annotator.pass_at(t0);
        let (patched, events) = sent_all(&mut requests, &client);
        assert_eq!(patched, ["broken", "busy", "invalid", "ok"]);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["broken", "busy", "invalid"], "{events:?}");
        assert!(events[0].1.contains("(server-error)") && events[0].1.contains("HTTP 500"));
        assert!(events[1].1.contains("(throttled)"), "{events:?}");
        assert!(events[2].1.contains("(invalid)"), "{events:?}");
        let created = |a: &Annotator| a.counters.events_created.load(Ordering::Relaxed);
        assert_eq!(created(&annotator), 3);
        // Retries of the same failures: patches again, no Event.
        for secs in [3, 20, 45, 100] {
            annotator.pass_at(t0 + Duration::from_secs(secs));
        }
        let (patched, events) = sent_all(&mut requests, &client);
        assert!(patched.contains(&"broken".to_string()), "{patched:?}");
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(created(&annotator), 3);
        // Bounded: the records gone, what was told is forgotten.
        for cid in ["c1", "c2", "c3", "c4"] {
            pod_record::remove(&records, cid, "net1");
        }
        annotator.pass_at(t0 + Duration::from_secs(1000));
        let _ = sent_all(&mut requests, &client);
        assert!(annotator.evented.is_empty());

        // No answer at all: no Event, the failed patch counted.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let r = record(&pod("far", "bb-2"), "net1", &[("net1", "rdma0", 3)]);
        pod_record::write(&records, &r).unwrap();
        let mut cut = Annotator::new(
            client_of(tmp.path(), closed),
            &state,
            &tmp.path().join("q.json"),
        );
        cut.pass_at(t0);
        assert!(cut.evented.is_empty());
        assert_eq!(cut.counters.patches_failed.load(Ordering::Relaxed), 1);
        assert_eq!(cut.counters.events_failed.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn events_name_the_pod_and_say_why_within_the_limit() {
        let p = pod("a", "aa-1");
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_796_526_245);
        assert_eq!(rfc3339(t), "2026-12-06T03:04:05Z");
        assert_eq!(rfc3339(std::time::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        let body: serde_json::Value =
            serde_json::from_str(&event_body(&p, "forbidden", &"é".repeat(900), "node-1", t))
                .unwrap();
        assert_eq!(body["involvedObject"]["uid"], "aa-1");
        assert_eq!(body["involvedObject"]["kind"], "Pod");
        assert_eq!(body["metadata"]["namespace"], "ml");
        assert_eq!(body["reason"], EVENT_REASON);
        assert_eq!(body["type"], "Warning");
        assert_eq!(body["source"]["host"], "node-1");
        assert_eq!(body["lastTimestamp"], "2026-12-06T03:04:05Z");
        let message = body["message"].as_str().unwrap();
        assert!(message.len() <= EVENT_MESSAGE_MAX && message.ends_with("..."));
        assert!(message.starts_with("roce-ipvlan.io/gids not published (forbidden): é"));
        let resp = |status, message: &str| -> Result<Response, String> {
            Ok(Response {
                status,
                body: serde_json::json!({"message": message})
                    .to_string()
                    .into_bytes(),
                retry_after: None,
            })
        };
        assert_eq!(failure_kind(&Err("refused".into())), None);
        assert_eq!(failure_kind(&resp(200, "")), None);
        assert_eq!(failure_kind(&resp(409, "UID in precondition")), None);
        assert_eq!(failure_kind(&resp(403, "no")), Some("forbidden"));
        assert_eq!(
            failure_kind(&resp(403, "ValidatingAdmissionPolicy 'x' denied")),
            Some("admission-policy")
        );
        assert_eq!(failure_kind(&resp(401, "")), Some("unauthorized"));
        assert_eq!(failure_kind(&resp(503, "")), Some("server-error"));
    }

    #[test]
    fn answers_are_judged_with_what_to_do() {
        let a = pod("a", "aa-1");
        let resp = |status, message: &str| Response {
            status,
            body: serde_json::json!({"kind": "Status", "message": message})
                .to_string()
                .into_bytes(),
            retry_after: None,
        };
        assert_eq!(judge(&a, &resp(200, "")), Outcome::Done);
        assert_eq!(judge(&a, &resp(404, "pods \"a\" not found")), Outcome::Gone);
        assert_eq!(
            judge(
                &a,
                &resp(
                    409,
                    "Precondition failed: UID in precondition: aa-1, UID in object meta: zz"
                )
            ),
            Outcome::Gone
        );
        assert_eq!(
            judge(
                &a,
                &resp(422, "metadata.uid: Invalid value: field is immutable")
            ),
            Outcome::Gone
        );
        let Outcome::Failed { message: m, .. } = judge(&a, &resp(403, "forbidden")) else {
            panic!("403 is a failure");
        };
        assert!(m.contains("\"patch\"") && m.contains("\"pods\""), "{m}");
        assert!(!m.contains("ValidatingAdmissionPolicy"), "{m}");
        assert!(
            matches!(judge(&a, &resp(401, "")), Outcome::Failed { message: m, .. } if m.contains("token"))
        );
        assert!(matches!(
            judge(&a, &resp(409, "conflict")),
            Outcome::Failed { .. }
        ));
        assert!(
            matches!(judge(&a, &resp(500, "etcd")), Outcome::Failed { message: m, .. } if m.contains("500"))
        );
        // A 422 that is not the UID's: the same patch would be refused again.
        assert!(matches!(
            judge(&a, &resp(422, "metadata.annotations: Invalid value: too long")),
            Outcome::Refused(m) if m.contains("422") && m.contains("GIDs change")
        ));
        // The server's Retry-After goes with the failure.
        let mut busy = resp(429, "too many requests");
        busy.retry_after = Some(Duration::from_secs(20));
        assert_eq!(
            judge(&a, &busy),
            Outcome::Failed {
                message: "patching pod ml/a (uid aa-1) got HTTP 429: too many requests; tried \
                          again after a backoff (at most 300 s)"
                    .into(),
                retry_after: Some(Duration::from_secs(20)),
            }
        );
    }
}
