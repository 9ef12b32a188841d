//! Multus device-info (k8snetworkplumbingwg device-info-spec 1.1.0): when the NAD declares the
//! `CNIDeviceInfoFile` capability, Multus passes `runtimeConfig.CNIDeviceInfoFile`, a path
//! unique per attachment, and copies whatever is in it into the pod's network-status
//! annotation. With `deviceID` set, ADD writes there the `pci` entry with `pci-address` and
//! `rdma-device`, so the annotation names each rail's RDMA device; DEL removes the file.
//!
//! When Multus already copied the device plugin's file there, it is kept and only
//! `rdma-device` is added (spec §5.1.2: the plugin may read an existing file and write one
//! that is missing).
//!
//! Where the file may be (`runtimeConfig.CNIDeviceInfoFile`, directly in Multus's
//! per-attachment directory) is checked while the configuration is parsed: config.rs,
//! `device_info_file`; whether it is this attachment's file, by [`check_attachment`].

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::protocol::error::{Error, Result};

/// The device-info spec version written.
pub const SPEC_VERSION: &str = "1.1.0";

/// Whether `path` is the device-info file Multus names for this attachment. Multus
/// (pkg/types/conf.go, delegateRuntimeConfig) names it `<network>-<container id>_<ifname>`
/// with every `/` made `-` (network-attachment-definition-client's GetCNIDeviceInfoPath), the
/// network being `<namespace>/<NAD>`: only the part after the network is this plugin's to
/// check, and it is the container's and the interface's. Another pod's file (another container
/// id) or another interface's is refused (7).
pub fn check_attachment(path: &Path, container_id: &str, ifname: &str) -> Result<()> {
    let suffix = format!("-{container_id}_{ifname}").replace('/', "-");
    let name = path.file_name().map(|n| n.to_string_lossy());
    match name {
        Some(name) if name.len() > suffix.len() && name.ends_with(&suffix) => Ok(()),
        _ => Err(Error::InvalidConfig(format!(
            "\"runtimeConfig.CNIDeviceInfoFile\" {}: not this attachment's file: expected \
             the name Multus gives it, <network>{suffix} (container {container_id:?}, \
             interface {ifname:?}); another pod's or a device plugin's file is never written \
             or removed. Leave CNIDeviceInfoFile to Multus (the NAD's CNIDeviceInfoFile \
             capability) rather than setting it in the NAD's runtimeConfig",
            path.display()
        ))),
    }
}

/// The device-info document for a rail: a new one, or `existing` with `rdma-device` added.
/// None when `existing` is something this plugin should not touch (another type, another
/// PCI address, or not JSON).
pub fn document(existing: Option<&str>, pci_address: &str, rdma_device: &str) -> Option<Value> {
    let Some(text) = existing else {
        return Some(json!({
            "type": "pci",
            "version": SPEC_VERSION,
            "pci": { "pci-address": pci_address, "rdma-device": rdma_device },
        }));
    };
    let mut doc: Map<String, Value> = serde_json::from_str(text).ok()?;
    if doc.get("type").and_then(Value::as_str) != Some("pci") {
        return None;
    }
    let pci = doc.get_mut("pci")?.as_object_mut()?;
    match pci.get("pci-address").and_then(Value::as_str) {
        Some(addr) if !addr.eq_ignore_ascii_case(pci_address) => return None,
        Some(_) => {}
        None => {
            pci.insert("pci-address".into(), pci_address.into());
        }
    }
    pci.entry("rdma-device")
        .or_insert_with(|| rdma_device.into());
    Some(Value::Object(doc))
}

/// What ADD did to the device-info file, for its undo: the file's text before, `None` if ADD
/// created it.
#[derive(Debug)]
pub struct Written {
    path: PathBuf,
    previous: Option<String>,
}

impl Written {
    /// Puts the file back as it was before ADD: removed if ADD created it, else its old text.
    pub fn undo(&self) -> Result<()> {
        match &self.previous {
            None => match fs::remove_file(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io(
                    format!("cannot remove the device-info file {}", self.path.display()),
                    e,
                )),
                _ => Ok(()),
            },
            Some(text) => crate::kernel::atomic_file::write(&self.path, text.as_bytes(), 0o644)
                .map_err(|e| {
                    Error::io(
                        format!(
                            "cannot restore the device-info file {}",
                            self.path.display()
                        ),
                        e,
                    )
                }),
        }
    }
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.previous {
            None => write!(f, "the device-info file {}", self.path.display()),
            Some(_) => write!(f, "the rdma-device added to {}", self.path.display()),
        }
    }
}

/// Writes (or completes) the device-info file at ADD; `None` when it left the file as it was.
pub fn write(path: &Path, pci_address: &str, rdma_device: &str) -> Result<Option<Written>> {
    write_with(path, pci_address, rdma_device, |path, text| {
        crate::kernel::atomic_file::write(path, text, 0o644)
    })
}

/// [`write`], publishing the text with `publish` (the atomic write; a test's stand-in).
fn write_with(
    path: &Path,
    pci_address: &str,
    rdma_device: &str,
    publish: impl Fn(&Path, &[u8]) -> io::Result<()>,
) -> Result<Option<Written>> {
    let io_err = |what: &str, e: io::Error| {
        Error::io(format!("{what} device-info file {}", path.display()), e)
    };
    let existing = match fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("cannot read the", e)),
    };
    let Some(doc) = document(existing.as_deref(), pci_address, rdma_device) else {
        tracing::warn!(path = %path.display(), "device-info file exists and describes another device; left as is");
        return Ok(None);
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| io_err("cannot create the directory of the", e))?;
    }
    // Atomically, so that Multus never reads half a file.
    let text = serde_json::to_string(&doc).expect("a JSON value always serializes");
    let written = Written {
        path: path.to_path_buf(),
        previous: existing,
    };
    if let Err(e) = publish(path, text.as_bytes()) {
        // The write may have failed after its rename (the directory's fsync), with the file
        // published: ADD pushes no undo step for a step that failed, so this one takes itself
        // back here (a no-op when nothing was renamed).
        if let Err(undo) = written.undo() {
            tracing::warn!(error = %undo, "cannot take back the device-info file after a failed write");
        }
        return Err(io_err("cannot write the", e));
    }
    tracing::info!(path = %path.display(), pci_address, rdma_device, "device-info written");
    Ok(Some(written))
}

/// Removes the device-info file at DEL; best-effort, a missing file is fine.
pub fn remove(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => tracing::info!(path = %path.display(), "device-info removed"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot remove device-info"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the name Multus gives this attachment's file (issue #25, item 1): checked against
    /// the name Multus builds, "<namespace>/<NAD>-<container id>_<ifname>" with '/' as '-'.
    #[test]
    fn only_this_attachments_file_is_accepted() {
        let dir = Path::new("/var/run/k8s.cni.cncf.io/devinfo/cni");
        let multus = |network: &str, cid: &str, ifname: &str| {
            dir.join(format!("{network}-{cid}_{ifname}").replace('/', "-"))
        };
        let cid = "4f1c0a9e2b";
        check_attachment(&multus("tenant-a/rail0", cid, "net1"), cid, "net1").unwrap();
        check_attachment(&multus("rail0", cid, "net2"), cid, "net2").unwrap();
        for (path, why) in [
            (multus("tenant-a/rail0", "77aa00", "net1"), "another pod's"),
            (multus("tenant-a/rail0", cid, "net2"), "another interface's"),
            (dir.join(format!("-{cid}_net1x")), "a longer interface"),
            (dir.join(format!("-{cid}_net1")), "no network part"),
            (
                dir.join("nvidia.com-rdma-0000:3b:00.2-device.json"),
                "a device plugin's name",
            ),
        ] {
            let err = check_attachment(&path, cid, "net1").unwrap_err();
            assert_eq!(err.code(), 7, "{why}: {err}");
            assert!(err.to_string().contains(&format!("-{cid}_net1")), "{err}");
        }
    }

    #[test]
    fn new_document_follows_the_spec() {
        let doc = document(None, "0000:3b:00.2", "mlx5_6").unwrap();
        assert_eq!(
            doc,
            json!({"type": "pci", "version": "1.1.0",
                   "pci": {"pci-address": "0000:3b:00.2", "rdma-device": "mlx5_6"}})
        );
    }

    #[test]
    fn existing_device_plugin_file_is_completed_not_replaced() {
        let dp = r#"{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:3b:00.2","pf-pci-address":"0000:3b:00.0"}}"#;
        let doc = document(Some(dp), "0000:3b:00.2", "mlx5_6").unwrap();
        assert_eq!(doc["pci"]["rdma-device"], "mlx5_6");
        assert_eq!(doc["pci"]["pf-pci-address"], "0000:3b:00.0");
        assert_eq!(doc["version"], "1.0.0");
        // An rdma-device already named by the device plugin wins.
        let named = r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.2","rdma-device":"mlx5_9"}}"#;
        assert_eq!(
            document(Some(named), "0000:3b:00.2", "mlx5_6").unwrap()["pci"]["rdma-device"],
            "mlx5_9"
        );
        // Another device, another type, or garbage: left alone.
        let other = r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:af:00.1"}}"#;
        assert_eq!(document(Some(other), "0000:3b:00.2", "mlx5_6"), None);
        let vdpa = r#"{"type":"vdpa","version":"1.1.0","vdpa":{}}"#;
        assert_eq!(document(Some(vdpa), "0000:3b:00.2", "mlx5_6"), None);
        assert_eq!(document(Some("not json"), "0000:3b:00.2", "mlx5_6"), None);
    }

    #[test]
    fn write_then_remove() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("devinfo/cni/pod-net1");
        write(&path, "0000:3b:00.2", "mlx5_6").unwrap();
        let doc: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(doc["pci"]["rdma-device"], "mlx5_6");
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
        remove(&path);
        assert!(!path.exists());
        remove(&path); // a second DEL
    }

    /// A failed ADD takes back what it wrote: a file it created goes, one the device plugin
    /// wrote (Multus copied it) gets its own text back; a file it left alone gives no undo.
    #[test]
    fn undo_puts_the_file_back_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pod-net1");
        let written = write(&path, "0000:3b:00.2", "mlx5_6").unwrap().unwrap();
        assert!(
            written.to_string().contains("the device-info file"),
            "{written}"
        );
        written.undo().unwrap();
        assert!(!path.exists());
        written.undo().unwrap(); // already gone

        let plugin = r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.2"}}"#;
        fs::write(&path, plugin).unwrap();
        let written = write(&path, "0000:3b:00.2", "mlx5_6").unwrap().unwrap();
        assert_ne!(fs::read_to_string(&path).unwrap(), plugin);
        written.undo().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), plugin);

        let other = r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:af:00.1"}}"#;
        fs::write(&path, other).unwrap();
        assert!(write(&path, "0000:3b:00.2", "mlx5_6").unwrap().is_none());
        assert_eq!(fs::read_to_string(&path).unwrap(), other);
    }

    /// Suspected and confirmed (issue #25, item 8): the atomic write fsyncs the directory
    /// after the rename, and a failure there returned an error with the file published, while
    /// ADD pushes no undo for a step that failed. The failed write now takes itself back: the
    /// file ADD created is gone, the device plugin's file has its own text again.
    #[test]
    fn a_write_that_fails_after_its_rename_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pod-net1");
        let fails_after_rename = |p: &Path, text: &[u8]| {
            crate::kernel::atomic_file::write(p, text, 0o644)?;
            Err(io::Error::other("cannot sync directory: injected"))
        };
        let err = write_with(&path, "0000:3b:00.2", "mlx5_6", fails_after_rename).unwrap_err();
        assert!(err.to_string().contains("injected"), "{err}");
        assert!(!path.exists(), "the published file was left");

        let plugin = r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.2"}}"#;
        fs::write(&path, plugin).unwrap();
        write_with(&path, "0000:3b:00.2", "mlx5_6", fails_after_rename).unwrap_err();
        assert_eq!(fs::read_to_string(&path).unwrap(), plugin);
        // A write that fails before its rename leaves the file as it was, too.
        let fails_before = |_: &Path, _: &[u8]| Err(io::Error::other("disk full"));
        write_with(&path, "0000:3b:00.2", "mlx5_6", fails_before).unwrap_err();
        assert_eq!(fs::read_to_string(&path).unwrap(), plugin);
    }

    /// Multus names the file per attachment, and network names may contain dots: the
    /// temporary file of `pod-rail.v1` and `pod-rail.v2` used to be the same
    /// `pod-rail.roce-ipvlan.tmp`, so two ADDs at once could publish each other's document.
    #[test]
    fn dotted_names_written_at_once_keep_their_own_documents() {
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|s| {
            for (i, pci) in ["0000:3b:00.2", "0000:3c:00.2", "0000:3d:00.2"]
                .iter()
                .enumerate()
            {
                let path = dir.path().join(format!("pod-rail.v{i}"));
                s.spawn(move || {
                    for _ in 0..20 {
                        write(&path, pci, &format!("mlx5_{i}")).unwrap();
                        remove(&path);
                    }
                    write(&path, pci, &format!("mlx5_{i}")).unwrap();
                });
            }
        });
        for i in 0..3 {
            let text = fs::read_to_string(dir.path().join(format!("pod-rail.v{i}"))).unwrap();
            let doc: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(doc["pci"]["rdma-device"], format!("mlx5_{i}"));
        }
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            3,
            "no temporary left"
        );
    }
}
