//! The plugin's one reader of sysfs, from one root (`/sys`, or a recorded tree in tests): GID
//! tables, port states and link layers, the netdevs of a PCI function and of an RDMA device.
//!
//! GID layout under `<root>/class/infiniband/<dev>/ports/<port>/`:
//! - `gids/<i>`: the GID value, 8 groups of 4 hex digits (`fe80:0000:…:3456`);
//! - `gid_attrs/types/<i>`: `RoCE v2` or `IB/RoCE v1`;
//! - `gid_attrs/ndevs/<i>`: the netdev owning the GID.
//!
//! Empty slots read all zeros and their attribute files fail with EINVAL. On DOCA-OFED and
//! MLNX_OFED kernels a GID whose netdev lives in another netns than the *reading thread* reads
//! the same way (`rdma_check_gid_user_access`); upstream kernels show every GID. Both are
//! normal, so a zero GID is a [`Gid`] without a value and EINVAL on an attribute is "unreadable", while
//! any other error (ENOENT, EACCES, …) is reported.

use std::fs;
use std::io;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use super::{Gid, GidTable, GidType, RdmaPort};
use crate::protocol::rail_inputs::valid_rdma_device_name;

/// Reads sysfs from a root (production: `/sys`; tests: a recorded tree).
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    /// The real sysfs, `/sys`.
    pub fn system() -> Self {
        Sysfs::new("/sys")
    }

    fn class_dir(&self) -> PathBuf {
        self.root.join("class/infiniband")
    }

    fn device_dir(&self, device: &str) -> io::Result<PathBuf> {
        if !valid_rdma_device_name(device) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{device:?} is not a valid RDMA device name"),
            ));
        }
        Ok(self.class_dir().join(device))
    }

    fn port_dir(&self, port: &RdmaPort) -> io::Result<PathBuf> {
        Ok(self
            .device_dir(&port.device)?
            .join("ports")
            .join(port.port.to_string()))
    }

    /// Whether `/sys/class/infiniband/<device>` exists.
    pub fn device_exists(&self, device: &str) -> bool {
        self.device_dir(device).is_ok_and(|dir| dir.exists())
    }

    /// The port's state as sysfs prints it, e.g. `4: ACTIVE` or `1: DOWN` (`ports/<p>/state`).
    pub fn port_state(&self, port: &RdmaPort) -> io::Result<String> {
        let path = self.port_dir(port)?.join("state");
        read_small(&path)
            .map(|s| s.trim().to_string())
            .map_err(|e| with_path(e, &path))
    }

    /// The port's link layer, `Ethernet` (RoCE) or `InfiniBand` (`ports/<p>/link_layer`).
    pub fn link_layer(&self, port: &RdmaPort) -> io::Result<String> {
        let path = self.port_dir(port)?.join("link_layer");
        read_small(&path)
            .map(|s| s.trim().to_string())
            .map_err(|e| with_path(e, &path))
    }

    /// The netdevs of the PCI function `addr` (`bus/pci/devices/<addr>/net/*`, or one level
    /// down under a virtio device as virtio-net puts them), sorted; None when there is no such
    /// function.
    pub fn pci_netdevs(&self, addr: &str) -> io::Result<Option<Vec<String>>> {
        let dev = self
            .root
            .join("bus/pci/devices")
            .join(path_component(addr)?);
        if !dev.exists() {
            return Ok(None);
        }
        if let Some(netdevs) = names_if_exists(&dev.join("net"))? {
            return Ok(Some(netdevs));
        }
        // virtio-net (VMs, some clouds): <pci>/virtioN/net/<netdev>.
        let mut netdevs = Vec::new();
        for sub in sorted_names(&dev)? {
            if sub.starts_with("virtio") {
                netdevs.extend(names_if_exists(&dev.join(sub).join("net"))?.unwrap_or_default());
            }
        }
        netdevs.sort();
        Ok(Some(netdevs))
    }

    /// The netdevs of the RDMA device's parent function (`class/infiniband/<device>/device/net`),
    /// sorted; None when there is no such RDMA device, empty when it has no parent function
    /// with netdevs (Soft-RoCE: RDMA netlink knows its netdev).
    pub fn device_netdevs(&self, device: &str) -> io::Result<Option<Vec<String>>> {
        let Ok(dir) = self.device_dir(device) else {
            return Ok(None);
        };
        if !dir.exists() {
            return Ok(None);
        }
        Ok(Some(
            names_if_exists(&dir.join("device/net"))?.unwrap_or_default(),
        ))
    }

    /// The port numbers of `device`, ascending.
    pub fn ports(&self, device: &str) -> io::Result<Vec<u32>> {
        numbered_entries(&self.device_dir(device)?.join("ports"))
    }

    /// Reads every slot of the port's GID table.
    pub fn read_gid_table(&self, port: &RdmaPort) -> io::Result<GidTable> {
        let dir = self.port_dir(port)?;
        let mut slots = Vec::new();
        for index in numbered_entries(&dir.join("gids"))? {
            slots.push(match read_gid(&dir, index)? {
                None => Gid::zero(index),
                Some(gid) => Gid {
                    index,
                    gid: Some(gid),
                    gid_type: read_attr(&dir, "types", index)?.map(|t| GidType::parse(&t)),
                    ndev: read_attr(&dir, "ndevs", index)?,
                },
            });
        }
        Ok(GidTable {
            port: port.clone(),
            slots,
        })
    }

    /// The value of every slot (None: all zeros), by index: what the capacity check counts
    /// (attach/gid_capacity.rs). Reads no attribute, so one file per slot, by number as
    /// [`Sysfs::find_gid`] does.
    pub fn gid_values(&self, port: &RdmaPort) -> io::Result<Vec<Option<Ipv6Addr>>> {
        let dir = self.port_dir(port)?;
        let mut values = Vec::new();
        for index in 0.. {
            match read_gid(&dir, index) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if index == 0 {
                        numbered_entries(&dir.join("gids"))?;
                    }
                    break;
                }
                read => values.push(read?),
            }
        }
        Ok(values)
    }

    /// The lowest index holding `gid` with type `gid_type`. Cheaper than
    /// [`Sysfs::read_gid_table`] for polling: reads only the values, from slot 0 up to the
    /// match, and the type of slots whose value matches. `gids/` holds every slot of the table
    /// (0 to its length - 1, a few hundred on most devices), so the slots are read by number
    /// until one is missing instead of listing the directory on every poll.
    pub fn find_gid(
        &self,
        port: &RdmaPort,
        gid: Ipv6Addr,
        gid_type: &GidType,
    ) -> io::Result<Option<u32>> {
        let dir = self.port_dir(port)?;
        for index in 0.. {
            let value = match read_gid(&dir, index) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if index == 0 {
                        // No slot at all: an empty table, or no such port (reported as the
                        // listing reports it).
                        numbered_entries(&dir.join("gids"))?;
                    }
                    break;
                }
                read => read?,
            };
            if value != Some(gid) {
                continue;
            }
            let found = read_attr(&dir, "types", index)?.map(|t| GidType::parse(&t));
            if found.as_ref() == Some(gid_type) {
                return Ok(Some(index));
            }
        }
        Ok(None)
    }

    /// RDMA devices that sysfs ties to the netdev `ifname` without reading any GID table: the
    /// PCI function's `infiniband/` directory (ConnectX and other PCI NICs) and the `parent`
    /// attribute of software devices (rxe, siw; the first device whose parent is `ifname`, as
    /// rdma_rxe and siw give a netdev one device at most, so the walk stops there instead of
    /// reading every device's `parent`). A hint for the order of the netlink lookup, which has
    /// the final word; unreadable entries are skipped.
    pub fn devices_near_netdev(&self, ifname: &str) -> Vec<String> {
        let Ok(ifname) = path_component(ifname) else {
            return Vec::new();
        };
        let pci = self
            .root
            .join("class/net")
            .join(ifname)
            .join("device/infiniband");
        let mut near = sorted_names(&pci).unwrap_or_default();
        if near.is_empty() {
            for device in sorted_names(&self.class_dir()).unwrap_or_default() {
                let parent = read_small(self.class_dir().join(&device).join("parent"));
                if parent.is_ok_and(|p| p.trim() == ifname) {
                    near.push(device);
                    break;
                }
            }
        }
        near
    }

    /// Whether the netdev `ifname` is administratively up (`flags` has IFF_UP), as this
    /// process's sysfs mount shows it (the node's under hostNetwork); None when it cannot be
    /// read (no such netdev). What `ready` and `/metrics` report per rail.
    pub fn netdev_admin_up(&self, ifname: &str) -> Option<bool> {
        let ifname = path_component(ifname).ok()?;
        let text = read_small(self.root.join("class/net").join(ifname).join("flags")).ok()?;
        let flags = u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()?;
        Some(flags & libc::IFF_UP as u32 != 0)
    }

    /// The port one of whose GIDs belongs to the netdev `ifname` (the default link-local GID
    /// at index 0 belongs to the rail netdev), or None. Fallback for when RDMA netlink cannot
    /// answer; must run in the netns where `ifname` lives, or OFED kernels hide its GIDs.
    pub fn port_of_netdev(&self, ifname: &str) -> io::Result<Option<RdmaPort>> {
        let devices = match sorted_names(&self.class_dir()) {
            Ok(devices) => devices,
            // No /sys/class/infiniband: ib_core is not loaded, so no netdev has an RDMA port.
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        for device in devices {
            for number in self.ports(&device)? {
                let port = RdmaPort {
                    device: device.clone(),
                    port: number,
                };
                let dir = self.port_dir(&port)?;
                for index in numbered_entries(&dir.join("gid_attrs/ndevs"))? {
                    if read_attr(&dir, "ndevs", index)?.as_deref() == Some(ifname) {
                        return Ok(Some(port));
                    }
                }
            }
        }
        Ok(None)
    }
}

/// Rejects names that would leave the directory they are joined to.
fn path_component(name: &str) -> io::Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a valid interface name"),
        ));
    }
    Ok(name)
}

/// Adds the path to an error, keeping its kind.
fn with_path(err: io::Error, path: &Path) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

/// The entries of `dir` whose names are numbers (GID indexes, port numbers), ascending.
/// The slot count varies by driver, so the directory is the only authority.
fn numbered_entries(dir: &Path) -> io::Result<Vec<u32>> {
    let mut numbers: Vec<u32> = sorted_names(dir)?
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// The UTF-8 entry names of `dir`, sorted.
fn sorted_names(dir: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| with_path(e, dir))? {
        let entry = entry.map_err(|e| with_path(e, dir))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The entry names of `dir`, sorted; None when `dir` does not exist.
fn names_if_exists(dir: &Path) -> io::Result<Option<Vec<String>>> {
    match sorted_names(dir) {
        Ok(names) => Ok(Some(names)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Maps EINVAL to None: that is how the kernel answers for an empty slot, a GID removed
/// while we read it, or (OFED) a GID of a netdev in another netns. Every other error stays.
fn unreadable_as_none(read: io::Result<String>) -> io::Result<Option<String>> {
    match read {
        Ok(text) => Ok(Some(text)),
        Err(err) if err.raw_os_error() == Some(nix::libc::EINVAL) => Ok(None),
        Err(err) => Err(err),
    }
}

/// A small file's text (a sysfs attribute is at most a page): open, read, close. sysfs hands
/// an attribute out whole on the first read, so this skips the size query and the second read
/// of `fs::read_to_string`, two syscalls per file that a GID poll and the rail lookup repeat.
/// The page is on the stack: a GID poll reads hundreds of these, and a heap buffer each would
/// be a malloc and a free under musl's one malloc lock, which a multi-rail ADD's threads share.
fn read_small(path: impl AsRef<Path>) -> io::Result<String> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    let mut page = [0u8; 4096];
    let len = loop {
        match file.read(&mut page) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            read => break read?,
        }
    };
    let text = if len < page.len() {
        // A short read of a small file is all of it (sysfs, and regular files in tests).
        page[..len].to_vec()
    } else {
        // A whole page: a larger file (regular files in tests), read to its end.
        let mut all = page.to_vec();
        file.read_to_end(&mut all)?;
        all
    };
    String::from_utf8(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads `gid_attrs/<kind>/<index>` of a port directory: None if unreadable (EINVAL) or empty.
fn read_attr(port_dir: &Path, kind: &str, index: u32) -> io::Result<Option<String>> {
    let path = port_dir
        .join("gid_attrs")
        .join(kind)
        .join(index.to_string());
    let text = unreadable_as_none(read_small(&path)).map_err(|e| with_path(e, &path))?;
    Ok(text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()))
}

/// Reads `gids/<index>` of a port directory: None for the all-zero GID.
fn read_gid(port_dir: &Path, index: u32) -> io::Result<Option<Ipv6Addr>> {
    let path = port_dir.join("gids").join(index.to_string());
    let Some(text) = unreadable_as_none(read_small(&path)).map_err(|e| with_path(e, &path))? else {
        return Ok(None);
    };
    let gid = parse_gid(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: expected a GID (8 groups of 4 hex digits), found {:?}",
                path.display(),
                text.trim()
            ),
        )
    })?;
    Ok((!gid.is_unspecified()).then_some(gid))
}

/// Parses the sysfs GID text, `fe80:0000:0000:0000:5054:00ff:fe12:3456` (the kernel's `%pI6`:
/// always 8 groups of 4 hex digits, never `::`-compressed), trailing newline allowed.
fn parse_gid(text: &str) -> Option<Ipv6Addr> {
    let mut groups = [0u16; 8];
    let mut parts = text.trim_end().split(':');
    for group in &mut groups {
        let part = parts.next()?;
        if part.len() != 4 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *group = u16::from_str_radix(part, 16).ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(Ipv6Addr::from(groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::rdma::{wait_for_gid, WaitError};
    use std::thread;

    #[test]
    fn netdev_admin_up_reads_iff_up_from_flags() {
        let tmp = TempDir::new().unwrap();
        let sysfs = Sysfs::new(tmp.path());
        for (name, flags) in [("up0", "0x1003\n"), ("down0", "0x1002\n")] {
            let dir = tmp.path().join("class/net").join(name);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("flags"), flags).unwrap();
        }
        assert_eq!(sysfs.netdev_admin_up("up0"), Some(true));
        assert_eq!(sysfs.netdev_admin_up("down0"), Some(false));
        assert_eq!(sysfs.netdev_admin_up("gone0"), None);
        assert_eq!(sysfs.netdev_admin_up("../up0"), None);
    }

    #[test]
    fn read_small_reads_short_page_sized_and_longer_files_whole() {
        let tmp = TempDir::new().unwrap();
        for len in [0, 7, 4095, 4096, 4097, 10_000] {
            let text: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            let path = tmp.path().join(format!("f{len}"));
            fs::write(&path, &text).unwrap();
            assert_eq!(read_small(&path).unwrap(), text, "{len} bytes");
        }
        assert_eq!(
            read_small(tmp.path().join("none")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
    use std::time::{Duration, Instant};
    use tempfile::TempDir;

    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";
    const LINK_LOCAL: &str = "fe80:0000:0000:0000:5054:00ff:fe12:3456";
    const OURS: &str = "0000:0000:0000:0000:0000:ffff:0a09:0007"; // ::ffff:10.9.0.7
    const OTHER_POD: &str = "0000:0000:0000:0000:0000:ffff:0a09:0008";

    fn ours() -> Ipv6Addr {
        "::ffff:10.9.0.7".parse().unwrap()
    }

    fn rxe0() -> RdmaPort {
        RdmaPort {
            device: "rxe0".into(),
            port: 1,
        }
    }

    fn port_dir(root: &Path, port: &RdmaPort) -> PathBuf {
        root.join("class/infiniband")
            .join(&port.device)
            .join("ports")
            .join(port.port.to_string())
    }

    /// Writes `slots` empty slots as the kernel shows them: a zero GID, no readable attributes.
    /// (A plain file cannot fail with EINVAL, so "unreadable" is modelled as absent; it is
    /// never read for a zero GID. The EINVAL mapping itself is tested on its own below.)
    fn empty_port(root: &Path, port: &RdmaPort, slots: u32) {
        let dir = port_dir(root, port);
        for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        for i in 0..slots {
            fs::write(dir.join("gids").join(i.to_string()), format!("{ZERO}\n")).unwrap();
        }
    }

    /// Fills slot `index` with a GID and its attributes, the GID file last and atomically
    /// (rename) so a concurrent reader never sees a half-written entry.
    fn set_gid(root: &Path, port: &RdmaPort, index: u32, gid: &str, gid_type: &str, ndev: &str) {
        let dir = port_dir(root, port);
        let i = index.to_string();
        fs::write(
            dir.join("gid_attrs/types").join(&i),
            format!("{gid_type}\n"),
        )
        .unwrap();
        fs::write(dir.join("gid_attrs/ndevs").join(&i), format!("{ndev}\n")).unwrap();
        let tmp = dir.join("gids").join(format!(".{i}.tmp"));
        fs::write(&tmp, format!("{gid}\n")).unwrap();
        fs::rename(&tmp, dir.join("gids").join(&i)).unwrap();
    }

    /// An upstream kernel: every GID of every netns is visible.
    fn upstream_tree() -> (TempDir, Sysfs) {
        let tmp = TempDir::new().unwrap();
        let root = tmp.path();
        empty_port(root, &rxe0(), 16);
        set_gid(root, &rxe0(), 0, LINK_LOCAL, "IB/RoCE v1", "rdma0");
        set_gid(root, &rxe0(), 1, LINK_LOCAL, "RoCE v2", "rdma0");
        set_gid(root, &rxe0(), 2, OURS, "IB/RoCE v1", "net1");
        set_gid(root, &rxe0(), 3, OURS, "RoCE v2", "net1");
        set_gid(root, &rxe0(), 4, OTHER_POD, "IB/RoCE v1", "net1");
        set_gid(root, &rxe0(), 5, OTHER_POD, "RoCE v2", "net1");
        let sysfs = Sysfs::new(root);
        (tmp, sysfs)
    }

    /// A DOCA-OFED kernel read from our pod's netns: the host's and other pods' GIDs read as
    /// zeros; ours sit wherever the kernel put them (4 and 5) in a 256-slot table.
    fn ofed_tree() -> (TempDir, Sysfs) {
        let tmp = TempDir::new().unwrap();
        let root = tmp.path();
        empty_port(root, &rxe0(), 256);
        set_gid(root, &rxe0(), 4, OURS, "IB/RoCE v1", "net1");
        set_gid(root, &rxe0(), 5, OURS, "RoCE v2", "net1");
        let sysfs = Sysfs::new(root);
        (tmp, sysfs)
    }

    #[test]
    fn upstream_view_finds_v2_after_v1_of_same_value() {
        let (_tmp, sysfs) = upstream_tree();
        assert_eq!(
            sysfs.find_gid(&rxe0(), ours(), &GidType::RoceV2).unwrap(),
            Some(3)
        );
        assert_eq!(
            sysfs.find_gid(&rxe0(), ours(), &GidType::RoceV1).unwrap(),
            Some(2)
        );
        let table = sysfs.read_gid_table(&rxe0()).unwrap();
        assert_eq!(table.slots.len(), 16);
        assert_eq!(table.visible().count(), 6);
        assert_eq!(table.find(ours(), &GidType::RoceV2), Some(3));
        assert_eq!(
            table.slots[3],
            Gid {
                index: 3,
                gid: Some(ours()),
                gid_type: Some(GidType::RoceV2),
                ndev: Some("net1".into()),
            }
        );
        assert_eq!(table.slots[6], Gid::zero(6));
    }

    #[test]
    fn ofed_view_finds_our_gid_among_hidden_ones() {
        let (_tmp, sysfs) = ofed_tree();
        assert_eq!(
            sysfs.find_gid(&rxe0(), ours(), &GidType::RoceV2).unwrap(),
            Some(5)
        );
        let table = sysfs.read_gid_table(&rxe0()).unwrap();
        assert_eq!(table.slots.len(), 256);
        assert_eq!(table.find(ours(), &GidType::RoceV2), Some(5));
        assert_eq!(
            table.summary(),
            "rxe0 port 1: 4=::ffff:10.9.0.7 (IB/RoCE v1, net1), \
             5=::ffff:10.9.0.7 (RoCE v2, net1), 254 slots all zeros"
        );
    }

    #[test]
    fn table_without_the_gid_finds_none() {
        let (_tmp, sysfs) = upstream_tree();
        let absent: Ipv6Addr = "::ffff:10.9.0.99".parse().unwrap();
        assert_eq!(
            sysfs.find_gid(&rxe0(), absent, &GidType::RoceV2).unwrap(),
            None
        );
        let table = sysfs.read_gid_table(&rxe0()).unwrap();
        assert_eq!(table.find(absent, &GidType::RoceV2), None);
        // Same value, type not present.
        let (_tmp, sysfs) = ofed_tree();
        let other = GidType::Other("iWARP".into());
        assert_eq!(sysfs.find_gid(&rxe0(), ours(), &other).unwrap(), None);
    }

    #[test]
    fn slot_count_comes_from_the_directory() {
        // rxe tables can be larger than mlx5's 255/256 slots.
        let tmp = TempDir::new().unwrap();
        empty_port(tmp.path(), &rxe0(), 1024);
        set_gid(tmp.path(), &rxe0(), 1000, OURS, "RoCE v2", "net1");
        let sysfs = Sysfs::new(tmp.path());
        assert_eq!(
            sysfs.find_gid(&rxe0(), ours(), &GidType::RoceV2).unwrap(),
            Some(1000)
        );
        let table = sysfs.read_gid_table(&rxe0()).unwrap();
        assert_eq!(table.slots.len(), 1024);
        let values = sysfs.gid_values(&rxe0()).unwrap();
        assert_eq!(values.len(), 1024);
        assert_eq!(values.iter().flatten().count(), 1);
        assert_eq!(values[1000], Some(ours()));
        assert!(
            table.slots.windows(2).all(|w| w[0].index < w[1].index),
            "sorted by index"
        );
    }

    #[test]
    fn wait_finds_a_gid_that_appears_late() {
        let tmp = TempDir::new().unwrap();
        empty_port(tmp.path(), &rxe0(), 256);
        let sysfs = Sysfs::new(tmp.path());
        let root = tmp.path().to_owned();
        let start = Instant::now();
        let writer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            set_gid(&root, &rxe0(), 6, OURS, "IB/RoCE v1", "net1");
            set_gid(&root, &rxe0(), 7, OURS, "RoCE v2", "net1");
        });
        let index = wait_for_gid(&sysfs, &rxe0(), ours(), Duration::from_secs(10)).unwrap();
        writer.join().unwrap();
        assert_eq!(index, 7);
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn wait_times_out_with_the_last_table() {
        let (_tmp, sysfs) = upstream_tree();
        let absent: Ipv6Addr = "::ffff:10.9.0.99".parse().unwrap();
        let start = Instant::now();
        let err = wait_for_gid(&sysfs, &rxe0(), absent, Duration::from_millis(120)).unwrap_err();
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(120), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        match err {
            WaitError::Timeout { last: Some(table) } => {
                assert_eq!(table, sysfs.read_gid_table(&rxe0()).unwrap());
            }
            other => panic!("expected a timeout with the table, got {other:?}"),
        }
    }

    #[test]
    fn wait_reports_io_errors() {
        let (_tmp, sysfs) = upstream_tree();
        let missing = RdmaPort {
            device: "mlx5_9".into(),
            port: 1,
        };
        let err = wait_for_gid(&sysfs, &missing, ours(), Duration::from_secs(5)).unwrap_err();
        match err {
            WaitError::Io(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
            other => panic!("expected Io, got {other:?}"),
        }
    }

    #[test]
    fn parses_sysfs_gid_text() {
        assert_eq!(
            parse_gid("fe80:0000:0000:0000:5054:00ff:fe12:3456\n"),
            Some("fe80::5054:ff:fe12:3456".parse().unwrap())
        );
        assert_eq!(parse_gid(OURS), Some(ours()));
        assert_eq!(parse_gid(ZERO), Some(Ipv6Addr::UNSPECIFIED));
        assert_eq!(
            parse_gid("FE80:0000:0000:0000:5054:00FF:FE12:3456"),
            parse_gid(LINK_LOCAL)
        );
        for bad in [
            "",
            "fe80::1",
            "fe80:0000:0000:0000:5054:00ff:fe12",
            "fe80:0000:0000:0000:5054:00ff:fe12:3456:0000",
            "fe80:0000:0000:0000:5054:00ff:fe12:345",
            "fe80:0000:0000:0000:5054:00ff:fe12:345g",
            "fe80:0000:0000:0000:5054:00ff:fe12:+345",
            " fe80:0000:0000:0000:5054:00ff:fe12:3456",
        ] {
            assert_eq!(parse_gid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn einval_is_unreadable_other_errors_are_reported() {
        let einval = io::Error::from_raw_os_error(nix::libc::EINVAL);
        assert_eq!(unreadable_as_none(Err(einval)).unwrap(), None);
        for errno in [nix::libc::ENOENT, nix::libc::EACCES, nix::libc::EIO] {
            let err = unreadable_as_none(Err(io::Error::from_raw_os_error(errno))).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(errno));
        }
        assert_eq!(
            unreadable_as_none(Ok("RoCE v2\n".into())).unwrap(),
            Some("RoCE v2\n".into())
        );
    }

    #[test]
    fn missing_attribute_of_a_visible_gid_is_an_error() {
        let (tmp, sysfs) = upstream_tree();
        let path = port_dir(tmp.path(), &rxe0()).join("gid_attrs/types/3");
        fs::remove_file(&path).unwrap();
        let err = sysfs.read_gid_table(&rxe0()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("gid_attrs/types/3"), "{err}");
        let err = sysfs
            .find_gid(&rxe0(), ours(), &GidType::RoceV2)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn garbage_gid_text_is_invalid_data() {
        let (tmp, sysfs) = upstream_tree();
        fs::write(port_dir(tmp.path(), &rxe0()).join("gids/9"), "not a gid\n").unwrap();
        let err = sysfs.read_gid_table(&rxe0()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("gids/9"), "{err}");
    }

    #[test]
    fn port_of_netdev_matches_gid_owner() {
        let tmp = TempDir::new().unwrap();
        let root = tmp.path();
        let p0 = RdmaPort {
            device: "mlx5_0".into(),
            port: 1,
        };
        let p1 = RdmaPort {
            device: "mlx5_1".into(),
            port: 1,
        };
        empty_port(root, &p0, 8);
        empty_port(root, &p1, 8);
        set_gid(root, &p0, 0, LINK_LOCAL, "IB/RoCE v1", "ens1f0np0");
        set_gid(root, &p1, 0, LINK_LOCAL, "IB/RoCE v1", "ens1f1np1");
        set_gid(root, &p1, 3, OURS, "RoCE v2", "ens1f1v1");
        let sysfs = Sysfs::new(root);
        assert_eq!(sysfs.port_of_netdev("ens1f1np1").unwrap(), Some(p1.clone()));
        assert_eq!(sysfs.port_of_netdev("ens1f0np0").unwrap(), Some(p0));
        assert_eq!(sysfs.port_of_netdev("ens1f1v1").unwrap(), Some(p1));
        assert_eq!(sysfs.port_of_netdev("eth0").unwrap(), None);
        // No RDMA stack at all.
        let bare = TempDir::new().unwrap();
        assert_eq!(
            Sysfs::new(bare.path()).port_of_netdev("eth0").unwrap(),
            None
        );
    }

    #[test]
    fn devices_near_netdev_from_pci_dir_or_parent() {
        let tmp = TempDir::new().unwrap();
        let root = tmp.path();
        // A ConnectX PF: its PCI function lists the RDMA device (sysfs shows it through the
        // netdev's `device` link; a directory stands in for the link here).
        fs::create_dir_all(root.join("class/net/ens1f0np0/device/infiniband/mlx5_0")).unwrap();
        // Soft-RoCE: no PCI function, a `parent` attribute naming the netdev.
        for (dev, parent) in [("rxe0", "rdma0\n"), ("rxe1", "rdma1\n")] {
            fs::create_dir_all(root.join("class/infiniband").join(dev)).unwrap();
            fs::write(
                root.join("class/infiniband").join(dev).join("parent"),
                parent,
            )
            .unwrap();
        }
        fs::create_dir_all(root.join("class/infiniband/mlx5_0")).unwrap();
        let sysfs = Sysfs::new(root);
        assert_eq!(sysfs.devices_near_netdev("ens1f0np0"), ["mlx5_0"]);
        assert_eq!(sysfs.devices_near_netdev("rdma1"), ["rxe1"]);
        assert!(sysfs.devices_near_netdev("rdma7").is_empty());
        assert!(sysfs.devices_near_netdev("../rdma1").is_empty());
        assert!(Sysfs::new(root.join("nothing"))
            .devices_near_netdev("rdma0")
            .is_empty());
    }

    #[test]
    fn devices_and_ports() {
        let tmp = TempDir::new().unwrap();
        for port in [1, 2, 10] {
            empty_port(
                tmp.path(),
                &RdmaPort {
                    device: "mlx4_0".into(),
                    port,
                },
                1,
            );
        }
        let sysfs = Sysfs::new(tmp.path());
        assert!(sysfs.device_exists("mlx4_0"));
        assert!(!sysfs.device_exists("mlx4_1"));
        assert_eq!(sysfs.ports("mlx4_0").unwrap(), vec![1, 2, 10]);
        assert_eq!(
            sysfs.ports("mlx4_1").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        for bad in ["", ".", "..", "../infiniband/mlx4_0", "a/b"] {
            assert!(!sysfs.device_exists(bad), "{bad:?}");
            assert_eq!(
                sysfs.ports(bad).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
    }

    #[test]
    fn link_layer_and_the_netdevs_of_functions_and_devices() {
        let tmp = TempDir::new().unwrap();
        let root = tmp.path();
        let mlx = RdmaPort {
            device: "mlx5_0".into(),
            port: 1,
        };
        empty_port(root, &mlx, 1);
        let dir = port_dir(root, &mlx);
        fs::write(dir.join("link_layer"), "Ethernet\n").unwrap();
        fs::create_dir_all(root.join("class/infiniband/mlx5_0/device/net/rdma3")).unwrap();
        empty_port(root, &rxe0(), 1);
        fs::create_dir_all(root.join("bus/pci/devices/0000:00:04.0/net/rdma1")).unwrap();
        fs::create_dir_all(root.join("bus/pci/devices/0000:00:05.0")).unwrap();
        fs::create_dir_all(root.join("bus/pci/devices/0000:00:06.0/virtio3/net/rdma2")).unwrap();
        let sysfs = Sysfs::new(root);

        assert_eq!(sysfs.link_layer(&mlx).unwrap(), "Ethernet");
        let err = sysfs.link_layer(&rxe0()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("link_layer"), "{err}");

        let names = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(sysfs.device_netdevs("mlx5_0").unwrap(), names(&["rdma3"]));
        assert_eq!(sysfs.device_netdevs("rxe0").unwrap(), names(&[]));
        assert_eq!(sysfs.device_netdevs("mlx5_9").unwrap(), None);
        assert_eq!(sysfs.device_netdevs("../x").unwrap(), None);

        assert_eq!(
            sysfs.pci_netdevs("0000:00:04.0").unwrap(),
            names(&["rdma1"])
        );
        assert_eq!(sysfs.pci_netdevs("0000:00:05.0").unwrap(), names(&[]));
        assert_eq!(
            sysfs.pci_netdevs("0000:00:06.0").unwrap(),
            names(&["rdma2"])
        );
        assert_eq!(sysfs.pci_netdevs("0000:00:07.0").unwrap(), None);
        assert_eq!(
            sysfs.pci_netdevs("..").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
