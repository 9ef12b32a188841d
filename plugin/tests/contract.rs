//! Contract tests: the built binary, run the way a runtime runs it (CNI_* env, config on stdin),
//! must print exactly one JSON document and exit accordingly. No kernel features needed.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_roce-ipvlan");

fn run(env: &[(&str, &str)], stdin: &str) -> (i32, Value) {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the plugin binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let doc: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {text:?}"));
    (out.status.code().unwrap(), doc)
}

fn add_env(netns: &str) -> Vec<(&str, &str)> {
    vec![
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "contract"),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/nonexistent"),
    ]
}

/// CNI_NETNS for tests that fail before the namespace is opened: if one got that far it would
/// fail with 105 instead of the code it asserts.
const NEVER_OPENED: &str = "/nonexistent/netns/never-opened";

/// A network namespace that is not the test's (or the plugin's) own: that of an
/// `unshare --user --net` child, so no root is needed. Killed when dropped.
struct PodNetns {
    child: std::process::Child,
    path: String,
}

impl PodNetns {
    fn new() -> PodNetns {
        use std::io::BufRead;
        // A user namespace first (no privilege needed), plain --net as root where user
        // namespaces are off (some CI containers).
        for flags in [&["--user", "--map-root-user", "--net"][..], &["--net"][..]] {
            let Ok(mut child) = Command::new("unshare")
                .args(flags)
                .args(["sh", "-c", "echo ready; exec sleep 600"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
            else {
                continue;
            };
            let mut line = String::new();
            let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
            if line.trim() == "ready" {
                let path = format!("/proc/{}/ns/net", child.id());
                return PodNetns { child, path };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "cannot make a network namespace for the test: `unshare --user --net` and \
             `unshare --net` both failed (util-linux missing, or neither user namespaces nor \
             CAP_SYS_ADMIN available)"
        );
    }
}

impl Drop for PodNetns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn conf() -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "rail0",
        "type": "roce-ipvlan",
        "master": "no-such-rail0",
        "ipam": {"type": "host-local", "subnet": "10.9.0.0/16"}
    })
}

fn assert_error(doc: &Value, code: u64, needle: &str) {
    assert_eq!(doc["code"], code, "{doc}");
    let msg = doc["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains(needle),
        "message {msg:?} should mention {needle:?}"
    );
}

/// Every cniVersion the plugin speaks, oldest first.
const ALL_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

#[test]
fn version_lists_supported_versions() {
    let (code, doc) = run(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(code, 0);
    assert_eq!(doc["cniVersion"], "1.0.0");
    assert_eq!(doc["supportedVersions"], json!(ALL_VERSIONS));
    // The Network Operator renders NADs in 0.3.1 (issue #37).
    let (code, doc) = run(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"0.3.1"}"#);
    assert_eq!(code, 0);
    assert_eq!(doc["cniVersion"], "0.3.1");
    let (code, doc) = run(&[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(code, 0);
    assert_eq!(doc["cniVersion"], "1.1.0");
}

/// VERSION answers whatever version it is asked in (as libcni's skel does): it is how the
/// caller learns which versions to use.
#[test]
fn version_answers_any_requested_version() {
    for stdin in [
        r#"{"cniVersion":"1.2.0"}"#,
        r#"{"cniVersion":"0.2.0"}"#,
        r#"{"cniVersion":7}"#,
        "not json",
    ] {
        let (code, doc) = run(&[("CNI_COMMAND", "VERSION")], stdin);
        assert_eq!(code, 0, "{stdin}: {doc}");
        assert_eq!(doc["cniVersion"], "1.1.0", "{stdin}");
        assert_eq!(doc["supportedVersions"], json!(ALL_VERSIONS));
    }
}

#[test]
fn invalid_json_is_code_6() {
    let (code, doc) = run(&add_env(NEVER_OPENED), "{\"cniVersion\": ");
    assert_eq!(code, 1);
    assert_error(&doc, 6, "decode");
}

#[test]
fn unsupported_version_is_code_1() {
    for version in ["0.1.0", "0.2.0"] {
        let mut c = conf();
        c["cniVersion"] = json!(version);
        let (code, doc) = run(&add_env(NEVER_OPENED), &c.to_string());
        assert_eq!(code, 1);
        assert_error(&doc, 1, version);
        assert_eq!(doc["cniVersion"], version);
    }
}

/// A 0.3.x configuration goes through ADD like any other (here as far as the missing rail, 100,
/// which comes after the configuration and the namespace are accepted); CHECK, which 0.3.x does
/// not have, is refused with code 1 as libcni's skel refuses it, whatever else the request
/// holds; STATUS and GC too.
#[test]
fn version_0_3_x_is_accepted_without_check() {
    let pod = PodNetns::new();
    for version in ["0.3.0", "0.3.1"] {
        let mut c = conf();
        c["cniVersion"] = json!(version);
        let (code, doc) = run(&add_env(&pod.path), &c.to_string());
        assert_eq!(code, 1);
        assert_error(&doc, 100, "no-such-rail0");
        assert_eq!(doc["cniVersion"], version);

        let mut env = add_env(NEVER_OPENED);
        env[0] = ("CNI_COMMAND", "CHECK");
        c["prevResult"] = json!({"cniVersion": version, "ips": []});
        let (code, doc) = run(&env, &c.to_string());
        assert_eq!(code, 1);
        assert_error(&doc, 1, "CHECK only with cniVersion 0.4.0 or later");
        assert_eq!(doc["cniVersion"], version);

        let (_dir, path, log) = recording_ipam();
        c["ipam"] = json!({"type": "rec-ipam"});
        for command in ["STATUS", "GC"] {
            let env = [("CNI_COMMAND", command), ("CNI_PATH", path.as_str())];
            let (code, doc) = run(&env, &c.to_string());
            assert_eq!(code, 1, "{command}");
            assert_error(&doc, 1, "only with cniVersion 1.1.0 or later");
        }
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(calls.is_empty(), "IPAM was called: {calls:?}");
    }
}

/// DEL in 0.3.1 comes without prevResult (it arrived in 0.4.0 for DEL): it needs none, and
/// IPAM DEL is asked in 0.3.1, as the runtime asked.
#[test]
fn del_in_0_3_1_needs_no_prev_result() {
    let (_dir, path, log) = recording_ipam();
    let mut c = conf();
    c["cniVersion"] = json!("0.3.1");
    c["ipam"] = json!({"type": "rec-ipam", "subnet": "10.9.0.0/16"});
    let pod = PodNetns::new();
    let env = [
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "contract"),
        ("CNI_NETNS", pod.path.as_str()),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", path.as_str()),
    ];
    let (code, out, err) = run_raw(&env, &c.to_string());
    assert_eq!(code, 0, "DEL failed: {out} {err}");
    assert!(out.trim().is_empty(), "DEL printed {out:?}");
    assert!(!err.contains("not one this release supports"), "{err}");
    let calls = std::fs::read_to_string(&log).unwrap();
    let del: Value = calls
        .lines()
        .find_map(|l| l.strip_prefix("DEL "))
        .map(|json| serde_json::from_str(json).unwrap())
        .unwrap_or_else(|| panic!("IPAM DEL was not called: {calls:?}"));
    assert_eq!(del["cniVersion"], "0.3.1");
    assert!(del.get("prevResult").is_none(), "{del}");
}

#[test]
fn missing_env_is_code_4() {
    for missing in [
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_PATH",
    ] {
        let env: Vec<_> = add_env(NEVER_OPENED)
            .into_iter()
            .filter(|(k, _)| *k != missing)
            .collect();
        let (code, doc) = run(&env, &conf().to_string());
        assert_eq!(code, 1);
        assert_error(&doc, 4, missing);
        assert_eq!(
            doc["cniVersion"], "1.0.0",
            "errors use the config's version"
        );
    }
}

#[test]
fn bad_ifname_is_code_4() {
    for name in ["../x", "a b", "waytoolonginterfacename", "net%d", "%d"] {
        let mut env = add_env(NEVER_OPENED);
        env.retain(|(k, _)| *k != "CNI_IFNAME");
        env.push(("CNI_IFNAME", name));
        let (_, doc) = run(&env, &conf().to_string());
        assert_error(&doc, 4, "CNI_IFNAME");
    }
}

#[test]
fn bad_config_is_code_7() {
    let mut c = conf();
    c["mode"] = json!("l3");
    let (code, doc) = run(&add_env(NEVER_OPENED), &c.to_string());
    assert_eq!(code, 1);
    assert_error(&doc, 7, "L2");
    let mut c = conf();
    c["sysctl"] = json!({"kernel.core_pattern": "|/tmp/x"});
    let (_, doc) = run(&add_env(NEVER_OPENED), &c.to_string());
    assert_error(&doc, 7, "kernel.core_pattern");
}

/// The plugin's own (host) namespace is never a pod's: ADD and CHECK refuse it (105) before
/// anything else is looked at; DEL leaves the host alone and still releases the address.
#[test]
fn own_netns_is_refused_for_add_and_check() {
    for own in ["/proc/self/ns/net", "/proc/1/ns/net"] {
        if own == "/proc/1/ns/net"
            && std::fs::read_link(own).ok() != std::fs::read_link("/proc/self/ns/net").ok()
        {
            continue; // pid 1 is in another namespace (a container): only self applies
        }
        for command in ["ADD", "CHECK"] {
            let mut env = add_env(own);
            env[0] = ("CNI_COMMAND", command);
            let mut c = conf();
            c["prevResult"] = json!({"cniVersion": "1.0.0", "ips": []});
            let (code, doc) = run(&env, &c.to_string());
            assert_eq!(code, 1, "{command} {own}");
            assert_error(&doc, 105, "own");
        }
    }
    let (_dir, path, log) = recording_ipam();
    let mut c = conf();
    c["ipam"] = json!({"type": "rec-ipam"});
    let env = vec![
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "contract"),
        ("CNI_NETNS", "/proc/self/ns/net"),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", path.as_str()),
    ];
    let (code, doc) = run_allow_empty(&env, &c.to_string());
    assert_eq!(code, 0, "{doc:?}");
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(calls.lines().any(|l| l.starts_with("DEL ")), "{calls:?}");
}

#[test]
fn netns_that_is_not_a_namespace_is_code_105() {
    let (code, doc) = run(&add_env("/etc/hostname"), &conf().to_string());
    assert_eq!(code, 1);
    assert_error(&doc, 105, "not a namespace");
}

#[test]
fn missing_rail_is_code_100_before_any_change() {
    let pod = PodNetns::new();
    let (code, doc) = run(&add_env(&pod.path), &conf().to_string());
    assert_eq!(code, 1);
    assert_error(&doc, 100, "no-such-rail0");
}

#[test]
fn del_without_netns_or_ipam_binary_reports_only_ipam() {
    let env = vec![
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "contract"),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/nonexistent"),
    ];
    let (code, doc) = run_allow_empty(&env, &conf().to_string());
    assert_eq!(code, 1);
    assert_error(
        &doc.expect("an error document"),
        103,
        "not found in CNI_PATH",
    );
}

fn run_allow_empty(env: &[(&str, &str)], stdin: &str) -> (i32, Option<Value>) {
    let mut child = Command::new(BIN)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let doc = (!text.trim().is_empty()).then(|| serde_json::from_str(text.trim()).unwrap());
    (out.status.code().unwrap(), doc)
}

#[test]
fn help_and_version_flags_work_by_hand() {
    let out = Command::new(BIN)
        .arg("--version")
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("1.1.0"));
}

/// `--version` names the commit it was built from (plugin/build.rs), so that an image or a node's
/// binary can be traced to its source. A stale build script (rerun-if-changed missing a ref)
/// shows here as the previous commit.
#[test]
fn version_names_the_git_commit() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let expected = match std::env::var("ROCE_IPVLAN_COMMIT") {
        Ok(commit) if !commit.is_empty() => commit,
        _ => Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into()),
    };
    assert!(
        text.starts_with(&format!(
            "roce-ipvlan {} (commit {expected}, CNI ",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
}

/// Configurations may carry IPAM credentials (nv-ipam, whereabouts kubeconfigs, tokens): at the
/// most verbose log level, through ADD, DEL, STATUS and GC, neither stdout nor the logs (stderr,
/// the same lines as logFile) may show them, while the IPAM plugin does get them.
#[test]
fn secrets_in_the_configuration_are_never_logged() {
    use std::os::unix::fs::PermissionsExt;
    const SECRET: &str = "s3cr3t-ipam-token-9f2c";
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("ipam-stdin");
    let ipam = dir.path().join("fake-ipam");
    std::fs::write(
        &ipam,
        format!(
            "#!/bin/sh\ncat >>{}\necho '{{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}}'\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&ipam, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let mut conf = conf();
    conf["cniVersion"] = json!("1.1.0");
    conf["logLevel"] = json!("trace");
    conf["ipam"] = json!({"type": "fake-ipam", "token": SECRET, "kubeconfig": SECRET});
    conf["cni.dev/valid-attachments"] = json!([]);
    let text = conf.to_string();
    let pod = PodNetns::new();
    for command in ["ADD", "DEL", "STATUS", "GC"] {
        let out = Command::new(BIN)
            .env_clear()
            .envs([
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", "secret"),
                ("CNI_NETNS", pod.path.as_str()),
                ("CNI_IFNAME", "net1"),
                ("CNI_PATH", path.as_str()),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                child.stdin.take().unwrap().write_all(text.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        for (what, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let s = String::from_utf8_lossy(bytes);
            assert!(
                !s.contains(SECRET),
                "{command} {what} shows the secret: {s}"
            );
        }
    }
    let ipam_saw = std::fs::read_to_string(&seen).unwrap();
    assert!(ipam_saw.contains(SECRET), "the IPAM plugin got its config");
}

/// A fake IPAM plugin in a temporary CNI_PATH that appends "COMMAND" and its stdin to a log
/// and answers VERSION with 0.3.0..1.1.0.
fn recording_ipam() -> (tempfile::TempDir, String, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    let ipam = dir.path().join("rec-ipam");
    std::fs::write(
        &ipam,
        format!(
            "#!/bin/sh\nin=$(cat)\necho \"$CNI_COMMAND $in\" >>{}\n\
             [ \"$CNI_COMMAND\" = VERSION ] && echo '{{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}}'\nexit 0\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&ipam, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    (dir, path, log)
}

/// DEL must work on whatever configuration the attachment was added with: fields an older
/// release accepted and this one refuses, or a newer release's additions. Each case must
/// succeed and reach IPAM DEL (which releases the address).
#[test]
fn del_tolerates_configurations_add_would_refuse() {
    let (_dir, path, log) = recording_ipam();
    let cases: Vec<(&str, Value)> = vec![
        ("mode l3", json!({"mode": "l3"})),
        ("counter deviceID", json!({"deviceID": "0"})),
        ("a key of a newer release", json!({"rdma": {"newKey": 1}})),
        (
            "an unknown ipv6 key",
            json!({"ipv6": {"slaac": true, "newKey": 1}}),
        ),
        ("bad mtu", json!({"mtu": 1})),
        ("bad sysctl", json!({"sysctl": {"kernel.panic": "1"}})),
        ("unknown logLevel", json!({"logLevel": "loud"})),
        ("logFile elsewhere", json!({"logFile": "/etc/x.log"})),
        ("newer cniVersion", json!({"cniVersion": "1.2.0"})),
        ("type of another name", json!({"type": "roce-ipvlan-v2"})),
        ("bad args.cni", json!({"args": {"cni": {"master": 3}}})),
    ];
    for (what, extra) in cases {
        let _ = std::fs::remove_file(&log);
        let mut c = conf();
        c["ipam"] = json!({"type": "rec-ipam", "subnet": "10.9.0.0/16"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        let env = vec![
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "contract"),
            ("CNI_IFNAME", "net1"),
            ("CNI_PATH", path.as_str()),
        ];
        let (code, doc) = run_allow_empty(&env, &c.to_string());
        assert_eq!(code, 0, "{what}: DEL failed: {doc:?}");
        assert!(doc.is_none(), "{what}: DEL printed {doc:?}");
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            calls.lines().any(|l| l.starts_with("DEL ")),
            "{what}: IPAM DEL was not called: {calls:?}"
        );
    }
}

/// Teardown still refuses what would be dangerous to act on: an `ipam.type` that is a path is
/// not executed, and a device-info path outside Multus's directory is not removed.
#[test]
fn del_does_not_act_on_dangerous_fields() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let mut c = conf();
    c["ipam"] = json!({"type": "/bin/false"});
    c["runtimeConfig"] = json!({"CNIDeviceInfoFile": victim.to_str().unwrap()});
    let env = vec![
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "contract"),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/nonexistent"),
    ];
    let (code, doc) = run_allow_empty(&env, &c.to_string());
    assert_eq!(code, 0, "{doc:?}");
    assert!(
        victim.exists(),
        "DEL removed a file outside the devinfo dir"
    );
}

/// GC, like DEL, reads only what it needs: a field ADD would refuse does not block it.
#[test]
fn gc_tolerates_configurations_add_would_refuse() {
    let (_dir, path, log) = recording_ipam();
    let mut c = conf();
    c["cniVersion"] = json!("1.1.0");
    c["mode"] = json!("l3");
    c["rdma"] = json!({"newKey": true});
    c["ipam"] = json!({"type": "rec-ipam"});
    c["cni.dev/valid-attachments"] = json!([]);
    let env = vec![("CNI_COMMAND", "GC"), ("CNI_PATH", path.as_str())];
    let (code, doc) = run_allow_empty(&env, &c.to_string());
    assert_eq!(code, 0, "GC failed: {doc:?}");
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        calls.lines().any(|l| l.starts_with("GC ")),
        "IPAM GC was not called: {calls:?}"
    );
}

/// An interface name ADD refuses (here `%`, which the kernel expands) does not block DEL: the
/// address an older release may have allocated under it is released.
#[test]
fn del_with_a_refused_interface_name_still_releases() {
    let (_dir, path, log) = recording_ipam();
    let mut c = conf();
    c["ipam"] = json!({"type": "rec-ipam"});
    let env = vec![
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "contract"),
        ("CNI_NETNS", NEVER_OPENED),
        ("CNI_IFNAME", "net%d"),
        ("CNI_PATH", path.as_str()),
    ];
    let (code, doc) = run_allow_empty(&env, &c.to_string());
    assert_eq!(code, 0, "{doc:?}");
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(calls.lines().any(|l| l.starts_with("DEL ")), "{calls:?}");
}

/// Runs the plugin; returns exit code, stdout and stderr.
fn run_raw(env: &[(&str, &str)], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const FORGED: &str = "2026-01-01T00:00:00.000000Z  INFO FORGED record";

/// ADD refuses a network name or a container id outside the spec's rule, so a NAD (or a
/// runtime bug) cannot put a line of its choosing into the logs; the refusal quotes it escaped.
#[test]
fn names_and_container_ids_outside_the_spec_are_refused() {
    let mut c = conf();
    c["name"] = json!(format!("x\n{FORGED}"));
    let (code, out, err) = run_raw(&add_env(NEVER_OPENED), &c.to_string());
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_error(&doc, 7, "not a valid network name");
    assert!(
        !err.lines().any(|l| l.starts_with("2026-01-01")),
        "stderr: {err}"
    );
    let id = format!("c1\n{FORGED}");
    let mut env = add_env(NEVER_OPENED);
    env[1] = ("CNI_CONTAINERID", id.as_str());
    let (_, out, _) = run_raw(&env, &conf().to_string());
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_error(&doc, 4, "CNI_CONTAINERID");
}

/// DEL takes any name and container id (a pod from an older release must still go), and logs
/// them escaped: every event stays one line, whatever the fields hold.
#[test]
fn logged_fields_are_escaped_one_event_one_line() {
    let (_dir, path, _log) = recording_ipam();
    let mut c = conf();
    c["name"] = json!(format!("x\n{FORGED}\r\u{1b}[2K"));
    c["logLevel"] = json!("debug");
    c["ipam"] = json!({"type": "rec-ipam"});
    c["mode"] = json!(format!("l3\n{FORGED}"));
    c["logFile"] = json!(format!("/var/log/x\n{FORGED}"));
    let id = format!("c1\n{FORGED}");
    let env = vec![
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", id.as_str()),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", path.as_str()),
    ];
    let (code, out, err) = run_raw(&env, &c.to_string());
    assert_eq!(code, 0, "{out}");
    assert!(err.contains("FORGED"), "the fields were logged: {err}");
    for line in err.lines() {
        assert!(!line.starts_with("2026-01-01"), "forged line in: {err}");
        assert!(!line.contains('\r') && !line.contains('\u{1b}'), "{line:?}");
    }
}

/// logFile is confined to the plugin's own directory: elsewhere under /var/log a NAD could add
/// records to an audit log or another pod's log.
#[test]
fn log_files_outside_the_plugins_directory_are_refused() {
    for file in [
        "/var/log/audit/audit.log",
        "/var/log/pods/ns_pod_uid/c/0.log",
        "/var/log/roce-ipvlan/../audit/audit.log",
        "/var/log/roce-ipvlan.log",
    ] {
        let mut c = conf();
        c["logFile"] = json!(file);
        let (code, doc) = run(&add_env(NEVER_OPENED), &c.to_string());
        assert_eq!(code, 1, "{file}");
        assert_error(&doc, 7, "/var/log/roce-ipvlan/");
    }
}

/// Placed after another plugin, roce-ipvlan would drop that plugin's interfaces and addresses
/// from the result: ADD refuses a non-empty prevResult (it must come first); an empty one is
/// harmless.
#[test]
fn add_after_another_plugin_is_refused() {
    let mut c = conf();
    c["prevResult"] = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": "/run/netns/p"}],
        "ips": [{"address": "192.168.1.5/24", "interface": 0}]
    });
    let (code, doc) = run(&add_env(NEVER_OPENED), &c.to_string());
    assert_eq!(code, 1);
    assert_error(&doc, 7, "must come first");
    assert!(
        doc["msg"].as_str().unwrap().contains("interfaces, ips"),
        "{doc}"
    );
    // Nothing in it: ADD goes on (and here stops at the namespace that is never opened).
    c["prevResult"] = json!({"cniVersion": "1.0.0", "interfaces": [], "ips": [], "dns": {}});
    let (_, doc) = run(&add_env(NEVER_OPENED), &c.to_string());
    assert_error(&doc, 105, "never-opened");
}

/// stdout and stderr a pipe whose reader is gone (an orphaned plugin of a killed Multus): every
/// write fails with EPIPE, which must not be a panic (exit 101; an abort in release builds).
#[test]
fn broken_stdout_and_stderr_are_not_a_panic() {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let mut conf = conf();
    conf["logLevel"] = json!("debug");
    let mut child = Command::new(BIN)
        .env_clear()
        .envs(add_env(NEVER_OPENED))
        .stdin(Stdio::piped())
        .stdout(Stdio::from(write.try_clone().unwrap()))
        .stderr(Stdio::from(write))
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    // The namespace that is never opened fails the ADD (code 105): exit status 1, as with a
    // reader.
    assert_eq!(child.wait().unwrap().code(), Some(1));
}
