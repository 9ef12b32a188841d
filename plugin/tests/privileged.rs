//! ADD's rollback against the real kernel, one failpoint at a time (src/attach/failpoint.rs).
//!
//! Privileged: they create network namespaces and IPvlan children on a Soft-RoCE rail and
//! delegate to the real host-local IPAM, so they run inside the test VM (`make vm-rust`, which
//! builds this binary with `--features failpoints` and runs it with `--ignored`). A plain host
//! `cargo test` lists them as ignored. Run one at a time (`--test-threads=1`): each compares
//! the host's links, rules and the rail's GID table before and after.
//!
//! Each test execs the plugin binary of this build (`CARGO_BIN_EXE_roce-ipvlan`) the way a
//! runtime does, with `ROCE_IPVLAN_FAILPOINT` naming the point to fail at, and checks the CNI
//! error, how many undo steps ADD had pushed (its warning "ADD failed; undoing … steps=N"), and
//! that nothing is left: no child in the pod or the host, no host-local allocation, no source
//! rule or route of the child's table, the pod's sysctls as before, no device-info file, no GID.
//!
//! Environment (the VM's defaults): `CNI_PATH` (host-local; default /usr/lib/cni),
//! `ROCE_TEST_RAIL` (default rdma1, a Soft-RoCE rail whose netdev is a PCI function).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// Every point of ADD's build, in order, with the number of undo steps pushed by then: none
/// before the child's lookup, the child (1), the IPAM allocation (2), the pod-wide all.rp_filter (3), the source rule (4),
/// the device-info file (5).
const ADD_POINTS: &[(&str, usize)] = &[
    // The child's lookup fails right after its creation, before its undo step is pushed
    // (issue #25, item 9): the child was left in the pod.
    ("after-create", 0),
    ("after-child", 1),
    ("after-ipam", 2),
    ("after-sysctls", 3),
    ("after-addresses", 3),
    ("after-up", 3),
    ("after-rules", 4),
    ("after-gid", 4),
    ("after-alias", 4),
    ("after-device-info", 5),
];

/// Every point of ADD's undo, with the start of the step's description in `details`.
const UNDO_POINTS: &[(&str, &str)] = &[
    ("undo-link", "the IPvlan child"),
    ("undo-ipam", "the IPAM allocation"),
    ("undo-sysctl", "pod-wide sysctl net.ipv4.conf.all.rp_filter"),
    ("undo-rule", "the rule \"from 10.79."),
    (
        "undo-device-info",
        "the device-info file /run/k8s.cni.cncf.io/",
    ),
];

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn rail() -> String {
    std::env::var("ROCE_TEST_RAIL").unwrap_or_else(|_| "rdma1".into())
}

/// The rail's PCI address: a virtio-net netdev's device is virtioN, whose parent is the PCI
/// function.
fn pci_of(rail: &str) -> String {
    let mut dev = std::fs::canonicalize(format!("/sys/class/net/{rail}/device"))
        .unwrap_or_else(|e| panic!("rail {rail} has no device: {e}"));
    if dev
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("virtio")
    {
        dev.pop();
    }
    dev.file_name().unwrap().to_str().unwrap().to_string()
}

/// The rail's RDMA device, from `rdma link show` ("link rxe1/1 … netdev rdma1").
fn rdma_dev_of(rail: &str) -> String {
    run("rdma", &["link", "show"])
        .lines()
        .find(|l| l.split_whitespace().last() == Some(rail))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|p| p.split('/').next())
        .unwrap_or_else(|| panic!("no RDMA device on rail {rail}"))
        .to_string()
}

/// The non-zero GIDs of the device's port 1 as the host sees them.
fn gids(dev: &str) -> BTreeSet<String> {
    let dir = format!("/sys/class/infiniband/{dev}/ports/1/gids");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .map(|g| g.trim().to_string())
        .filter(|g| g.chars().any(|c| c != '0' && c != ':'))
        .collect()
}

/// What a failed ADD must not change in the host: its links, its rules, the rail's GIDs.
fn host_state(dev: &str) -> String {
    format!(
        "{}\n{}\n{}\n{:?}",
        run("ip", &["-o", "link", "show"])
            .lines()
            .map(|l| l.split(':').nth(1).unwrap_or("").trim())
            .collect::<Vec<_>>()
            .join(" "),
        run("ip", &["-4", "rule", "show"]),
        run("ip", &["-6", "rule", "show"]),
        gids(dev)
    )
}

/// Fails with the lines that differ between two snapshots.
fn assert_same(before: &str, after: &str, what: &str) {
    if before == after {
        return;
    }
    let b: BTreeSet<&str> = before.lines().collect();
    let a: BTreeSet<&str> = after.lines().collect();
    panic!(
        "{what} changed: gone {:?}, new {:?}",
        b.difference(&a).collect::<Vec<_>>(),
        a.difference(&b).collect::<Vec<_>>()
    );
}

/// A fresh network namespace at /run/netns/NAME, deleted when dropped.
struct Pod {
    name: String,
}

impl Pod {
    fn new(name: &str) -> Pod {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        run("ip", &["netns", "add", name]);
        let pod = Pod { name: name.into() };
        pod.exec(&["ip", "link", "set", "lo", "up"]);
        // ADD sets it to 0 (pod-wide): a leak of that step shows as a changed value.
        pod.exec(&["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=2"]);
        pod
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// The pod's links, rules, routes of every table, and its conf/all and conf/default sysctls.
    fn state(&self) -> String {
        let links: Vec<String> = self
            .exec(&["ip", "-o", "link", "show"])
            .lines()
            .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            .collect();
        format!(
            "links: {}\nrules4:\n{}rules6:\n{}routes4:\n{}routes6:\n{}sysctls:\n{}",
            links.join(" "),
            self.exec(&["ip", "-4", "rule", "show"]),
            self.exec(&["ip", "-6", "rule", "show"]),
            self.exec(&["ip", "-4", "route", "show", "table", "all"]),
            self.exec(&["ip", "-6", "route", "show", "table", "all"]),
            // 2>/dev/null: some, such as ipv6's stable_secret, cannot be read.
            self.exec(&[
                "sh",
                "-c",
                "grep -r . /proc/sys/net/ipv4/conf/all /proc/sys/net/ipv4/conf/default \
                 /proc/sys/net/ipv6/conf/all /proc/sys/net/ipv6/conf/default 2>/dev/null; true",
            ]),
        )
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// One attachment: its configuration (host-local on its own subnet, deviceID and the Multus
/// device-info path), its pod, and what the host looked like before.
struct Case {
    name: String,
    conf: Value,
    pod: Pod,
    devinfo: PathBuf,
    rdma: String,
    host_before: String,
    pod_before: String,
}

struct Outcome {
    ok: bool,
    doc: Value,
    stderr: String,
}

impl Outcome {
    /// The number of undo steps in ADD's warning "ADD failed; undoing … steps=N".
    fn undo_steps(&self) -> usize {
        let line = self
            .stderr
            .lines()
            .find(|l| l.contains("ADD failed; undoing"))
            .unwrap_or_else(|| panic!("no \"ADD failed; undoing\" in stderr:\n{}", self.stderr));
        let n = line
            .split("steps=")
            .nth(1)
            .unwrap_or_else(|| panic!("no steps= in {line:?}"));
        n.split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }
}

impl Case {
    fn new(name: &str, subnet: &str) -> Case {
        let rail = rail();
        let rdma = rdma_dev_of(&rail);
        // The name Multus gives it: <network>-<container id>_<ifname> (device_info.rs).
        let devinfo = PathBuf::from(format!(
            "/run/k8s.cni.cncf.io/devinfo/cni/{name}-fp-{name}_net1"
        ));
        let _ = std::fs::remove_file(&devinfo);
        let _ = std::fs::remove_dir_all(format!("/var/lib/cni/networks/{name}"));
        let conf = json!({
            "cniVersion": "1.0.0",
            "name": name,
            "type": "roce-ipvlan",
            "master": rail,
            "deviceID": pci_of(&rail),
            "mode": "l2",
            "runtimeConfig": {"CNIDeviceInfoFile": devinfo},
            "ipam": {"type": "host-local", "subnet": subnet},
            "timeouts": {"totalMs": 120000, "ipamMs": 120000},
        });
        let pod = Pod::new(name);
        let host_before = host_state(&rdma);
        let pod_before = pod.state();
        Case {
            name: name.into(),
            conf,
            pod,
            devinfo,
            rdma,
            host_before,
            pod_before,
        }
    }

    fn cni(&self, command: &str, failpoint: &str) -> Outcome {
        let cni_path = std::env::var("CNI_PATH").unwrap_or_else(|_| "/usr/lib/cni".into());
        let mut child = Command::new(env!("CARGO_BIN_EXE_roce-ipvlan"))
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", format!("fp-{}", self.name))
            .env("CNI_NETNS", self.pod.path())
            .env("CNI_IFNAME", "net1")
            .env("CNI_PATH", cni_path)
            .env("ROCE_IPVLAN_FAILPOINT", failpoint)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run the plugin");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(self.conf.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let doc = if stdout.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout {stdout:?}: {e}"))
        };
        Outcome {
            ok: out.status.success(),
            doc,
            stderr: String::from_utf8_lossy(&out.stderr).to_string(),
        }
    }

    /// The addresses host-local holds for this network (its files named like an IP).
    fn allocations(&self) -> Vec<String> {
        match std::fs::read_dir(format!("/var/lib/cni/networks/{}", self.name)) {
            Err(_) => Vec::new(),
            Ok(dir) => dir
                .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .filter(|f| f.parse::<std::net::IpAddr>().is_ok())
                .collect(),
        }
    }

    /// Nothing of the attachment is left, and nothing else changed.
    fn assert_nothing_left(&self, what: &str) {
        assert_same(
            &self.pod_before,
            &self.pod.state(),
            &format!("{what}: the pod"),
        );
        assert_same(
            &self.host_before,
            &host_state(&self.rdma),
            &format!("{what}: the host"),
        );
        assert_eq!(
            self.allocations(),
            Vec::<String>::new(),
            "{what}: host-local still holds an address"
        );
        assert!(
            !self.devinfo.exists(),
            "{what}: device-info file {} left",
            self.devinfo.display()
        );
    }
}

/// Without a failpoint the attachment works and DEL takes it all back: the other tests' setup
/// can succeed, so their failures come from their failpoints.
#[test]
#[ignore = "privileged: run in the VM by make vm-rust"]
fn add_without_a_failpoint_works_and_del_leaves_nothing() {
    let case = Case::new("fpnone", "10.77.0.0/24");
    let add = case.cni("ADD", "");
    assert!(add.ok, "ADD failed: {} {}", add.doc, add.stderr);
    assert_eq!(add.doc["interfaces"][0]["name"], "net1", "{}", add.doc);
    assert_eq!(case.allocations(), ["10.77.0.2"]);
    assert!(case.devinfo.exists(), "no device-info file after ADD");
    let rules = case.pod.exec(&["ip", "-4", "rule", "show"]);
    assert!(rules.contains("from 10.77.0.2 lookup 1"), "{rules}");
    assert_eq!(
        case.pod
            .exec(&["sysctl", "-n", "net.ipv4.conf.all.rp_filter"])
            .trim(),
        "0"
    );
    assert_ne!(host_state(&case.rdma), case.host_before, "no GID appeared");
    let del = case.cni("DEL", "");
    assert!(del.ok, "DEL failed: {} {}", del.doc, del.stderr);
    // DEL does not restore pod-wide sysctls (the pod is going away); ADD's undo does.
    case.pod
        .exec(&["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=2"]);
    case.assert_nothing_left("ADD then DEL");
}

/// Each point of ADD's build in turn: ADD fails with the failpoint's error (108, no undo step
/// failed), had pushed the expected undo steps, and left nothing.
#[test]
#[ignore = "privileged: run in the VM by make vm-rust"]
fn add_failing_at_each_step_leaves_nothing() {
    for (i, (point, steps)) in ADD_POINTS.iter().enumerate() {
        let case = Case::new(&format!("fpadd{i}"), &format!("10.78.{i}.0/24"));
        let add = case.cni("ADD", point);
        assert!(!add.ok, "{point}: ADD succeeded: {}", add.doc);
        assert_eq!(add.doc["code"], 108, "{point}: {}", add.doc);
        let msg = add.doc["msg"].as_str().unwrap_or_default();
        assert!(
            msg.contains(&format!("failpoint {point} armed")),
            "{point}: {msg}"
        );
        let details = add.doc["details"].as_str().unwrap_or_default();
        assert!(!details.contains("not undone"), "{point}: {details}");
        assert_eq!(add.undo_steps(), *steps, "{point}: undo steps pushed");
        case.assert_nothing_left(point);
    }
}

/// An undo step that fails is reported in `details` and the others still run: with the whole
/// attachment built (all five steps), each step's undo fails in turn; only that step's change
/// is left, and DEL (or, for the rule of a deleted child, the pod's deletion) removes it.
#[test]
#[ignore = "privileged: run in the VM by make vm-rust"]
fn a_failed_undo_step_is_reported_and_the_others_run() {
    for (i, (point, step)) in UNDO_POINTS.iter().enumerate() {
        let case = Case::new(&format!("fpundo{i}"), &format!("10.79.{i}.0/24"));
        let add = case.cni("ADD", &format!("after-device-info,{point}"));
        assert!(!add.ok, "{point}: ADD succeeded: {}", add.doc);
        assert_eq!(add.doc["code"], 108, "{point}: {}", add.doc);
        assert!(
            add.doc["msg"]
                .as_str()
                .unwrap_or_default()
                .contains("failpoint after-device-info armed"),
            "{point}: {}",
            add.doc
        );
        let details = add.doc["details"].as_str().unwrap_or_default();
        let want = format!("not undone: {step}");
        assert!(
            details.contains(&want),
            "{point}: {details:?} lacks {want:?}"
        );
        assert!(
            details.contains(&format!("failpoint {point} armed")),
            "{point}: {details}"
        );
        assert_eq!(
            details.matches("not undone").count(),
            1,
            "{point}: {details}"
        );
        assert_eq!(add.undo_steps(), 5, "{point}");

        // Only that step's change is left.
        let links = case.pod.exec(&["ip", "-o", "link", "show"]);
        assert_eq!(
            links.contains("net1"),
            *point == "undo-link",
            "{point}: {links}"
        );
        let ips = case.allocations();
        assert_eq!(!ips.is_empty(), *point == "undo-ipam", "{point}: {ips:?}");
        let rp = case
            .pod
            .exec(&["sysctl", "-n", "net.ipv4.conf.all.rp_filter"]);
        assert_eq!(
            rp.trim() == "0",
            *point == "undo-sysctl",
            "{point}: rp_filter {rp}"
        );
        let rules = case.pod.exec(&["ip", "-4", "rule", "show"]);
        let rule_left = rules.contains(&format!("from 10.79.{i}.2 lookup 1"));
        assert_eq!(rule_left, *point == "undo-rule", "{point}: {rules}");
        assert_eq!(
            case.devinfo.exists(),
            *point == "undo-device-info",
            "{point}: device-info"
        );

        let del = case.cni("DEL", "");
        assert!(del.ok, "{point}: DEL failed: {} {}", del.doc, del.stderr);
        match *point {
            // The pod-wide sysctl is the pod's own to keep (DEL never restores it) ...
            "undo-sysctl" => {
                case.pod
                    .exec(&["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=2"]);
            }
            // ... and a rule whose child is gone is found by no DEL (it looks rules up by the
            // child's table): it goes with the pod.
            "undo-rule" => {
                case.pod
                    .exec(&["ip", "-4", "rule", "del", "from", &format!("10.79.{i}.2")]);
            }
            _ => {}
        }
        case.assert_nothing_left(&format!("{point}, then DEL"));
    }
}

/// A name that is no failpoint is a test bug, not a silent pass: ADD fails at the first point
/// and undoes what it did.
#[test]
#[ignore = "privileged: run in the VM by make vm-rust"]
fn an_unknown_failpoint_name_fails_add() {
    let case = Case::new("fpbad", "10.77.9.0/24");
    let add = case.cni("ADD", "after-nothing");
    assert!(!add.ok, "ADD succeeded: {}", add.doc);
    assert_eq!(add.doc["code"], 108, "{}", add.doc);
    assert!(
        add.doc["msg"]
            .as_str()
            .unwrap_or_default()
            .contains("\"after-nothing\", which is no failpoint"),
        "{}",
        add.doc
    );
    case.assert_nothing_left("unknown failpoint");
}

/// The quoted names of the list `const NAME: &[&str] = &[ … ];` in `src`.
fn names_in_list(src: &str, list: &str) -> Vec<String> {
    let start = src
        .find(&format!("const {list}: &[&str] = &["))
        .unwrap_or_else(|| panic!("no list {list}"));
    let body = &src[start..];
    let body = &body[body.find("&[").unwrap() + 2..body.find("];").unwrap()];
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// Not privileged: the points this file tests are exactly those failpoint.rs declares and
/// add.rs calls, so a new point without a test (or a test of a point that is gone) fails here.
#[test]
fn every_failpoint_of_add_is_tested() {
    let decl = include_str!("../src/attach/failpoint.rs");
    let add = include_str!("../src/commands/add.rs");
    let declared = names_in_list(decl, "ADD");
    let tested: Vec<String> = ADD_POINTS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(tested, declared, "ADD_POINTS against failpoint::ADD");
    // The first point is in ipvlan.rs (the child's lookup), the others in add.rs.
    let ipvlan = include_str!("../src/attach/ipvlan.rs");
    let called: Vec<String> = [ipvlan, add]
        .concat()
        .split("failpoint!(\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_string())
        .collect();
    assert_eq!(
        called, declared,
        "failpoint!(…) in ipvlan.rs and add.rs, in order"
    );
    let undo = names_in_list(decl, "UNDO");
    let tested: Vec<String> = UNDO_POINTS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(tested, undo, "UNDO_POINTS against failpoint::UNDO");
    for name in &undo {
        assert!(
            add.contains(&format!("=> \"{name}\"")),
            "{name} not used in add.rs"
        );
    }
}
