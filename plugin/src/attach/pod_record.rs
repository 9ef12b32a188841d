//! The attachment record: what a successful ADD leaves on the node for the installer to publish
//! in the pod's object (`roce-ipvlan.io/gids`, tools/annotate.rs). Multus thin drops the
//! result's `roce` field and device-info has no field for a GID, so without it an operator
//! could read a pod's GID indexes only with `kubectl exec`.
//!
//! One small JSON file per attachment, `<containerID>_<ifname>.json` in [`DIR`] (tmpfs: a node
//! restart removes them all, with the sandboxes they described): the pod (namespace, name and
//! UID from the runtime's CNI_ARGS), the network, and per child its rail, RDMA device, port,
//! GID index, GID and addresses. ADD writes it atomically (atomic_file.rs) as its last step,
//! when nothing can fail any more, so a failed ADD leaves none; DEL and GC remove it, never
//! failing over it. Without the Kubernetes arguments (plain libcni, podman) nothing is written:
//! there is no pod object to publish to.
//!
//! The plugin (root) writes and removes files there, so [`DIR`] and its parent /run/roce-ipvlan
//! must be its own (protocol/private_dir.rs: created 0700, no symbolic link in their place,
//! owned by the plugin's user and writable by nobody else); otherwise nothing is written or
//! removed there, and the log says what was found and what to do.

use std::fs;
use std::io::{self, Read};
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

/// Where the plugin keeps the records on the node (the installer sees it under /host).
pub const DIR: &str = "/run/roce-ipvlan/attachments";

/// The record's format version; a reader skips other versions.
pub const VERSION: u32 = 1;

/// A record larger than this is not one of ours (16 rails take about 4 KiB): readers skip it.
pub const MAX_BYTES: u64 = 64 * 1024;

/// The pod an attachment belongs to, as the runtime names it in CNI_ARGS.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    /// The pod named by CNI_ARGS' `K8S_POD_NAMESPACE`, `K8S_POD_NAME` and `K8S_POD_UID`
    /// (containerd's and CRI-O's CRI pass them; Multus passes them on to its delegates). None
    /// unless all three are there and well-formed: without the UID a pod recreated under the
    /// same name could get a dead sandbox's GIDs.
    pub fn from_cni_args(raw: &str) -> Option<PodRef> {
        let get = |key: &str| {
            raw.split(';')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        };
        let pod = PodRef {
            namespace: get("K8S_POD_NAMESPACE")?,
            name: get("K8S_POD_NAME")?,
            uid: get("K8S_POD_UID")?,
        };
        pod.is_valid().then_some(pod)
    }

    /// Kubernetes' rules: the namespace a DNS-1123 label, the name a DNS-1123 subdomain, the
    /// UID a UUID's characters. Checked again by the installer before a name goes into a URL.
    pub fn is_valid(&self) -> bool {
        let label = |s: &str, max: usize| {
            !s.is_empty()
                && s.len() <= max
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !s.starts_with('-')
                && !s.ends_with('-')
        };
        label(&self.namespace, 63)
            && self.name.len() <= 253
            && self.name.split('.').all(|part| label(part, 63))
            && !self.uid.is_empty()
            && self.uid.len() <= 64
            && self.uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} (uid {})", self.namespace, self.name, self.uid)
    }
}

/// One child of the attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rail {
    /// The child's name in the pod.
    pub interface: String,
    /// The rail's netdev on the node.
    pub rail: String,
    /// The rail's RDMA device and port.
    pub device: String,
    pub port: u32,
    pub gid_index: u32,
    /// As the GID table prints it (sysfs, show_gids): eight groups of four hex digits.
    pub gid: String,
    pub addresses: Vec<IpNetwork>,
    /// How many slots of the rail's GID table the child's addresses take (one per address and
    /// GID type), for the capacity check (gid_capacity.rs); absent in records of 0.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_slots: Option<u32>,
}

/// The GID as /sys/class/infiniband/<dev>/ports/<port>/gids/<index> prints it.
pub fn gid_text(gid: Ipv6Addr) -> String {
    gid.segments()
        .iter()
        .map(|s| format!("{s:04x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub version: u32,
    /// The CNI network's name: GC removes only its own network's records.
    pub network: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    pub pod: PodRef,
    pub rails: Vec<Rail>,
    /// The pod's network namespace (CNI_NETNS): a record whose namespace is gone describes
    /// children that are gone too, so the capacity check does not count them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
}

/// The record's file name; None for names ADD refuses (DEL takes any), which never had one.
pub fn file_name(container_id: &str, ifname: &str) -> Option<String> {
    let ok = crate::protocol::cni::is_valid_name(container_id)
        && crate::protocol::cni::validate_ifname(ifname).is_ok();
    ok.then(|| format!("{container_id}_{ifname}.json"))
}

/// Writes the record into `dir` (and its parent: created 0700 if missing, and checked, see
/// above) atomically, mode 0600: the
/// annotator that reads it runs as root, the owner, and nobody else on the node needs to see
/// which pod has which addresses and GIDs.
pub fn write(dir: &Path, record: &Record) -> io::Result<PathBuf> {
    let name = file_name(&record.container_id, &record.ifname).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "container {:?} interface {:?}: no record name",
                record.container_id, record.ifname
            ),
        )
    })?;
    crate::protocol::private_dir::open_dir_and_parent(dir, 0o700)?;
    let path = dir.join(name);
    let text = serde_json::to_vec(record).expect("a record always serializes");
    crate::kernel::atomic_file::write(&path, &text, 0o600)?;
    Ok(path)
}

/// Removes the attachment's record; best-effort (DEL must not fail over it), a missing one is
/// fine.
pub fn remove(dir: &Path, container_id: &str, ifname: &str) {
    let Some(name) = file_name(container_id, ifname) else {
        return;
    };
    if let Err(e) = crate::protocol::private_dir::open_dir_and_parent(dir, 0o700) {
        tracing::warn!(error = %e, "attachment record not removed");
        return;
    }
    let path = dir.join(name);
    match fs::remove_file(&path) {
        Ok(()) => tracing::info!(path = %path.display(), "attachment record removed"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the attachment record")
        }
    }
}

/// One file of [`DIR`]: its record, or why it was skipped.
pub type Entry = (PathBuf, Result<Record, String>);

/// Every record in `dir` (none when it does not exist), in name order. Temporary files of a
/// write in progress (`.name.tmp`) are not listed; a file that is not a regular file (a
/// symbolic link, a FIFO), too large, not JSON, of another version, with a malformed pod or
/// naming another attachment than its file name comes with the reason it is skipped.
pub fn read_all(dir: &Path) -> io::Result<Vec<Entry>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.') && n.ends_with(".json"))
        })
        .collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|p| {
            let record = read_one(&p);
            (p, record)
        })
        .collect())
}

fn read_one(path: &Path) -> Result<Record, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = Vec::new();
    // Not followed, and never waited on: the annotator must not read another file as a record,
    // nor hang on a FIFO.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "a symbolic link, not a record".to_string(),
            _ => format!("cannot read it: {e}"),
        })?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err("not a regular file".into());
    }
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(format!("larger than {MAX_BYTES} bytes"));
    }
    let record: Record =
        serde_json::from_slice(&text).map_err(|e| format!("not an attachment record: {e}"))?;
    if record.version != VERSION {
        return Err(format!(
            "version {}, expected {VERSION} (written by another release)",
            record.version
        ));
    }
    if !record.pod.is_valid() {
        return Err(format!("malformed pod {}", record.pod));
    }
    // write() names the file after the attachment and DEL removes it by that name: a record
    // under another name was not written by the plugin, and no DEL would ever remove it.
    let expected = file_name(&record.container_id, &record.ifname);
    let name = path.file_name().and_then(|n| n.to_str());
    if expected.as_deref() != name {
        return Err(format!(
            "it names attachment {:?}/{:?} (pod {}), whose record would be {}: not written by \
             the plugin under this name, so no DEL removes it; remove it by hand",
            record.container_id,
            record.ifname,
            record.pod,
            expected.as_deref().unwrap_or("none (names ADD refuses)")
        ));
    }
    Ok(record)
}

/// GC: removes the records of `network` whose attachment is not among `valid` (containerID,
/// ifname); other networks' records are theirs to collect. Best-effort: returns how many went.
pub fn gc(dir: &Path, network: &str, valid: &[(String, String)]) -> usize {
    if let Err(e) = crate::protocol::private_dir::open_dir_and_parent(dir, 0o700) {
        tracing::warn!(error = %e, "GC: attachment records not collected");
        return 0;
    }
    let entries = match read_all(dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "GC: cannot list the attachment records");
            return 0;
        }
    };
    let mut removed = 0;
    for (path, record) in entries {
        let Ok(record) = record else { continue };
        let live = valid
            .iter()
            .any(|(cid, ifname)| *cid == record.container_id && *ifname == record.ifname);
        if record.network != network || live {
            continue;
        }
        match fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "GC: cannot remove a stale attachment record")
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(cid: &str, ifname: &str, network: &str) -> Record {
        Record {
            version: VERSION,
            network: network.into(),
            container_id: cid.into(),
            ifname: ifname.into(),
            pod: PodRef {
                namespace: "ml".into(),
                name: "trainer-0".into(),
                uid: "0b6e2a3c-7d1f-4e0a-9c55-3f2d1e0a9b88".into(),
            },
            rails: vec![Rail {
                interface: ifname.into(),
                rail: "rdma0".into(),
                device: "mlx5_0".into(),
                port: 1,
                gid_index: 3,
                gid: gid_text("::ffff:10.0.0.5".parse().unwrap()),
                addresses: vec!["10.0.0.5/24".parse().unwrap()],
                gid_slots: Some(2),
            }],
            netns: None,
        }
    }

    #[test]
    fn the_pod_comes_from_the_kubernetes_cni_args() {
        let args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ml;K8S_POD_NAME=trainer-0;\
                    K8S_POD_INFRA_CONTAINER_ID=4f1c;K8S_POD_UID=0b6e2a3c-7d1f-4e0a-9c55-3f2d1e0a9b88";
        assert_eq!(
            PodRef::from_cni_args(args),
            Some(sample("c", "net1", "n").pod)
        );
        // Plain libcni or podman: no pod; a missing UID or a name that is not Kubernetes'
        // gives none either.
        for bad in [
            "",
            "IgnoreUnknown=1",
            "K8S_POD_NAMESPACE=ml;K8S_POD_NAME=trainer-0",
            "K8S_POD_NAMESPACE=ml;K8S_POD_NAME=../x;K8S_POD_UID=ab",
            "K8S_POD_NAMESPACE=Ml;K8S_POD_NAME=t;K8S_POD_UID=ab",
            "K8S_POD_NAMESPACE=ml;K8S_POD_NAME=t;K8S_POD_UID=a/b",
            "K8S_POD_NAMESPACE=ml;K8S_POD_NAME=t?x=1;K8S_POD_UID=ab",
        ] {
            assert_eq!(PodRef::from_cni_args(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_gid_is_written_as_the_gid_table_prints_it() {
        assert_eq!(
            gid_text("::ffff:10.0.0.5".parse().unwrap()),
            "0000:0000:0000:0000:0000:ffff:0a00:0005"
        );
        assert_eq!(
            gid_text("fe80::1".parse().unwrap()),
            "fe80:0000:0000:0000:0000:0000:0000:0001"
        );
    }

    #[test]
    fn records_encode_as_documented() {
        let text = serde_json::to_value(sample("c1", "net1", "rails")).unwrap();
        assert_eq!(
            text,
            serde_json::json!({
                "version": 1, "network": "rails", "containerID": "c1", "ifname": "net1",
                "pod": {"namespace": "ml", "name": "trainer-0",
                        "uid": "0b6e2a3c-7d1f-4e0a-9c55-3f2d1e0a9b88"},
                "rails": [{"interface": "net1", "rail": "rdma0", "device": "mlx5_0", "port": 1,
                           "gidIndex": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:0005",
                           "addresses": ["10.0.0.5/24"], "gidSlots": 2}]
            })
        );
        // The fields gid_capacity.rs counts with are optional: records of 0.1 still read.
        let mut old = sample("c1", "net1", "rails");
        old.rails[0].gid_slots = None;
        let mut text = serde_json::to_value(&old).unwrap();
        assert!(text["rails"][0].get("gidSlots").is_none() && text.get("netns").is_none());
        text["netns"] = "/var/run/netns/cni-1".into();
        let read: Record = serde_json::from_value(text).unwrap();
        assert_eq!(read.netns.as_deref(), Some("/var/run/netns/cni-1"));
        assert_eq!(read.rails, old.rails);
    }

    #[test]
    fn write_read_remove() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().join("attachments");
        assert!(read_all(&dir).unwrap().is_empty(), "no directory yet");
        let record = sample("c1", "net1", "rails");
        let path = write(&dir, &record).unwrap();
        assert_eq!(path, dir.join("c1_net1.json"));
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        // An older release's 0644 record, written again: 0600 too.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write(&dir, &record).unwrap();
        assert_eq!(mode(&path), 0o600);
        fs::write(dir.join("garbage.json"), "{").unwrap();
        fs::write(dir.join(".c2_net1.json.1.0.tmp"), "{").unwrap();
        let mut other = sample("c3", "net1", "rails");
        other.version = 2;
        write(&dir, &other).unwrap();
        let all = read_all(&dir).unwrap();
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!(all[0].1.as_ref().unwrap(), &record);
        assert!(all[1].1.as_ref().unwrap_err().contains("version 2"));
        assert!(all[2].1.as_ref().unwrap_err().contains("not an attachment"));
        remove(&dir, "c1", "net1");
        remove(&dir, "c1", "net1"); // a second DEL
        remove(&dir, "../c1", "net1"); // a name ADD refuses: nothing to do
        assert!(!path.exists());
        assert!(write(&dir, &sample("../x", "net1", "rails")).is_err());
    }

    /// The records' directory must be the plugin's own: a symbolic link in its place, or a
    /// directory others may write, gets no record (ADD's record is best-effort: the attachment
    /// stands, the log says why), and DEL and GC remove nothing through it.
    #[test]
    fn records_go_only_into_a_directory_of_the_plugins_own() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("roce-ipvlan");
        let dir = state.join("attachments");
        let record = sample("c1", "net1", "rails");
        write(&dir, &record).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&state), mode(&dir)), (0o700, 0o700));

        // A symbolic link to another directory: nothing written, removed or collected there.
        fs::remove_dir_all(&dir).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, &dir).unwrap();
        let err = write(&dir, &record).unwrap_err().to_string();
        assert!(
            err.contains("not a directory") && err.contains("symbolic link"),
            "{err}"
        );
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
        let planted = elsewhere.join("c1_net1.json");
        fs::write(&planted, serde_json::to_vec(&record).unwrap()).unwrap();
        remove(&dir, "c1", "net1");
        assert_eq!(gc(&dir, "rails", &[]), 0);
        assert!(planted.exists(), "removed through the symbolic link");

        // Group-writable: refused, with the mode found and what to do.
        fs::remove_file(&dir).unwrap();
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o770)).unwrap();
        let err = write(&dir, &record).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        let m = err.to_string();
        assert!(m.contains("mode 770") && m.contains("chmod go-w"), "{m}");
        assert!(!dir.join("c1_net1.json").exists());

        // Fixed as the message says: written.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        assert_eq!(write(&dir, &record).unwrap(), dir.join("c1_net1.json"));
    }

    /// What the annotator reads is checked: a record under another attachment's file name,
    /// one larger than MAX_BYTES (even if valid JSON), a symbolic link and a FIFO are skipped
    /// with the reason; a record of exactly MAX_BYTES is read.
    #[test]
    fn only_the_plugins_own_records_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("attachments");
        let record = sample("c1", "net1", "rails");
        write(&dir, &record).unwrap();
        let text = serde_json::to_string(&record).unwrap();
        // Another pod's attachment under c2's name; a file name that is no attachment's.
        let mut other = sample("c9", "net1", "rails");
        other.pod.name = "victim".into();
        fs::write(
            dir.join("c2_net1.json"),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        fs::write(dir.join("zz.json"), &text).unwrap();
        // Padded with whitespace (still a valid record) to the limit, and one byte past it.
        let padded = |n: u64| format!("{text}{}", " ".repeat(n as usize - text.len()));
        fs::write(dir.join("c3_net1.json"), padded(MAX_BYTES + 1)).unwrap();
        let at_limit = sample("c4", "net1", "rails");
        let limit_text = serde_json::to_string(&at_limit).unwrap();
        fs::write(
            dir.join("c4_net1.json"),
            format!(
                "{limit_text}{}",
                " ".repeat(MAX_BYTES as usize - limit_text.len())
            ),
        )
        .unwrap();
        std::os::unix::fs::symlink(dir.join("c1_net1.json"), dir.join("c5_net1.json")).unwrap();
        nix::unistd::mkfifo(&dir.join("c6_net1.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();

        let all = read_all(&dir).unwrap();
        let by_name = |n: &str| {
            &all.iter()
                .find(|(p, _)| p.file_name().unwrap() == n)
                .unwrap_or_else(|| panic!("{n} not listed"))
                .1
        };
        assert_eq!(by_name("c1_net1.json").as_ref().unwrap(), &record);
        let err = by_name("c2_net1.json").as_ref().unwrap_err();
        assert!(
            err.contains("\"c9\"/\"net1\"") && err.contains("c9_net1.json"),
            "{err}"
        );
        assert!(err.contains("ml/victim"), "{err}");
        assert!(by_name("zz.json")
            .as_ref()
            .unwrap_err()
            .contains("c1_net1.json"));
        let err = by_name("c3_net1.json").as_ref().unwrap_err();
        assert_eq!(err, &format!("larger than {MAX_BYTES} bytes"));
        assert_eq!(by_name("c4_net1.json").as_ref().unwrap(), &at_limit);
        assert!(by_name("c5_net1.json")
            .as_ref()
            .unwrap_err()
            .contains("symbolic link"));
        assert_eq!(
            by_name("c6_net1.json").as_ref().unwrap_err(),
            "not a regular file"
        );
        assert_eq!(all.len(), 7);
    }

    #[test]
    fn gc_removes_only_its_networks_stale_records() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("attachments");
        for (cid, net) in [("live", "rails"), ("dead", "rails"), ("other", "storage")] {
            write(&dir, &sample(cid, "net1", net)).unwrap();
        }
        let valid = vec![("live".to_string(), "net1".to_string())];
        assert_eq!(gc(&dir, "rails", &valid), 1);
        let left: Vec<_> = read_all(&dir)
            .unwrap()
            .into_iter()
            .map(|(_, r)| r.unwrap().container_id)
            .collect();
        assert_eq!(left, vec!["live", "other"]);
    }
}
