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

#[test]
fn version_lists_supported_versions() {
    let (code, doc) = run(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(code, 0);
    assert_eq!(doc["cniVersion"], "1.0.0");
    assert_eq!(doc["supportedVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
    let (code, doc) = run(&[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(code, 0);
    assert_eq!(doc["cniVersion"], "1.1.0");
}

#[test]
fn invalid_json_is_code_6() {
    let (code, doc) = run(&add_env("/proc/self/ns/net"), "{\"cniVersion\": ");
    assert_eq!(code, 1);
    assert_error(&doc, 6, "decode");
}

#[test]
fn unsupported_version_is_code_1() {
    let mut c = conf();
    c["cniVersion"] = json!("0.3.1");
    let (code, doc) = run(&add_env("/proc/self/ns/net"), &c.to_string());
    assert_eq!(code, 1);
    assert_error(&doc, 1, "0.3.1");
    assert_eq!(doc["cniVersion"], "0.3.1");
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
        let env: Vec<_> = add_env("/proc/self/ns/net")
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
    for name in ["../x", "a b", "waytoolonginterfacename"] {
        let mut env = add_env("/proc/self/ns/net");
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
    let (code, doc) = run(&add_env("/proc/self/ns/net"), &c.to_string());
    assert_eq!(code, 1);
    assert_error(&doc, 7, "L2");
    let mut c = conf();
    c["sysctl"] = json!({"kernel.core_pattern": "|/tmp/x"});
    let (_, doc) = run(&add_env("/proc/self/ns/net"), &c.to_string());
    assert_error(&doc, 7, "kernel.core_pattern");
}

#[test]
fn netns_that_is_not_a_namespace_is_code_105() {
    let (code, doc) = run(&add_env("/etc/hostname"), &conf().to_string());
    assert_eq!(code, 1);
    assert_error(&doc, 105, "not a namespace");
}

#[test]
fn missing_rail_is_code_100_before_any_change() {
    let (code, doc) = run(&add_env("/proc/self/ns/net"), &conf().to_string());
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
    for command in ["ADD", "DEL", "STATUS", "GC"] {
        let out = Command::new(BIN)
            .env_clear()
            .envs([
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", "secret"),
                ("CNI_NETNS", "/proc/self/ns/net"),
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
        .envs(add_env("/proc/self/ns/net"))
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
    // The missing rail fails the ADD (code 100): exit status 1, as with a reader.
    assert_eq!(child.wait().unwrap().code(), Some(1));
}
