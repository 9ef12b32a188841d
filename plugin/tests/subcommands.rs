//! The `validate` and `install` subcommands, run as the built binary: exit status and output as
//! an operator or the installer DaemonSet sees them. No kernel features needed.

use std::fs;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_roce-ipvlan");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .env_remove("CNI_COMMAND")
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const GOOD: &str = r#"apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: rails
  annotations:
    k8s.v1.cni.cncf.io/resourceName: nvidia.com/hostdev
spec:
  config: |
    {"cniVersion": "1.0.0", "name": "rails", "type": "roce-ipvlan",
     "ipam": {"type": "nv-ipam", "poolName": "p"}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
"#;

#[test]
fn validate_passes_good_files_and_fails_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    fs::write(&good, GOOD).unwrap();
    let conf = dir.path().join("rail.conf");
    fs::write(
        &conf,
        r#"{"cniVersion": "1.0.0", "name": "r", "type": "roce-ipvlan", "master": "rdma0",
            "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"}}"#,
    )
    .unwrap();
    let (code, out, _) = run(&["validate", good.to_str().unwrap(), conf.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("OK    ") && out.contains("deviceID of nvidia.com/hostdev"),
        "{out}"
    );
    assert!(
        out.contains("skip  ") && out.contains("ConfigMap other"),
        "{out}"
    );

    let bad = dir.path().join("bad.yaml");
    fs::write(
        &bad,
        GOOD.replace("\"ipam\"", "\"deviceID\": \"0\", \"ipam\""),
    )
    .unwrap();
    let (code, out, _) = run(&["validate", good.to_str().unwrap(), bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("ERROR ") && out.contains("is a counter"),
        "{out}"
    );

    assert_eq!(run(&["validate"]).0, 2);
    let (code, out, _) = run(&["validate", "/nonexistent.yaml"]);
    assert_eq!(code, 1);
    assert!(out.contains("cannot read"), "{out}");
}

#[test]
fn install_copies_this_binary_and_then_is_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().to_str().unwrap();
    // A private copy: the binary under target/ may be rebuilt while the test runs.
    let src = tempfile::tempdir().unwrap();
    let from = src.path().join("roce-ipvlan");
    fs::copy(BIN, &from).unwrap();
    let from = from.to_str().unwrap();
    let (code, out, err) = run(&["install", "--to", to, "--from", from]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("installed "), "{out}");
    let target = dir.path().join("roce-ipvlan");
    assert_eq!(fs::read(&target).unwrap(), fs::read(from).unwrap());
    let (code, out, _) = run(&["install", "--to", to, "--from", from]);
    assert_eq!(code, 0);
    assert!(out.contains("is up to date"), "{out}");
    // The installed copy is a working plugin binary.
    let out = Command::new(&target).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("roce-ipvlan "));

    let (code, _, err) = run(&["install", "--to", "/nonexistent/dir"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/dir"), "{err}");
    assert_eq!(run(&["install", "--bogus"]).0, 2);
}

/// The DaemonSet's installer (`install --wait`) restores a binary deleted or changed on the
/// host: on SIGHUP here (the periodic check runs the same code), so that the test waits on the
/// installer's own output instead of a timer. SIGTERM then ends it with status 0.
#[test]
fn install_wait_restores_a_deleted_or_changed_binary() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let from = src.path().join("roce-ipvlan");
    fs::copy(BIN, &from).unwrap();
    let target = dir.path().join("roce-ipvlan");
    let mut child = Command::new(BIN)
        .env_remove("CNI_COMMAND")
        .args(["install", "--wait", "--interval", "3600", "--to"])
        .arg(dir.path())
        .arg("--from")
        .arg(&from)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    // A guard against a hang, not a timed assertion: an installer that never answers is killed,
    // its stdout ends and the read below fails.
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(300));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The node's readiness and rail-health lines (`ready`, logged when they change) are not
    // this test's.
    let mut next = || loop {
        let line = lines.next().expect("a line").expect("utf-8");
        if !(line.starts_with("ready: ")
            || line.starts_with("not ready: ")
            || line.starts_with("rail health ")
            || line.starts_with("  "))
        {
            return line;
        }
    };
    // The first line comes after the installer blocked its signals.
    assert!(next().starts_with("installed "));
    let hup = || nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();

    fs::remove_file(&target).unwrap();
    hup();
    assert!(
        next().starts_with("restored "),
        "a deleted binary is restored"
    );
    assert_eq!(fs::read(&target).unwrap(), fs::read(&from).unwrap());

    // Changed the way another installer changes it: a new file renamed over it. Writing into
    // it in place could meet the installer running it (its readiness check executes the
    // installed binary after each restore) and fail with ETXTBSY, as a host's writer would.
    let other = dir.path().join(".other-installer");
    fs::write(&other, b"not the plugin").unwrap();
    fs::rename(&other, &target).unwrap();
    hup();
    assert!(
        next().starts_with("restored "),
        "a changed binary is restored"
    );
    assert_eq!(fs::read(&target).unwrap(), fs::read(&from).unwrap());

    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(next(), "SIGTERM: exiting");
    assert!(child.wait().unwrap().success());
}

/// Every subcommand parses its options by the same rules (issue #16): `--help` is usage on
/// stdout and exit 0; an unknown option or a missing value exits 2 with a message naming the
/// option and the usage on stderr.
#[test]
fn every_subcommand_parses_options_alike() {
    for command in [
        "env",
        "diagnose",
        "validate",
        "install",
        "uninstall",
        "ready",
    ] {
        let (code, out, err) = run(&[command, "--help"]);
        assert_eq!(code, 0, "{command} --help: {err}");
        assert!(
            out.starts_with("usage: roce-ipvlan "),
            "{command} --help: {out}"
        );
        assert!(out.contains(command), "{command} --help: {out}");

        let (code, out, err) = run(&[command, "--bogus"]);
        assert_eq!(code, 2, "{command} --bogus: {out}{err}");
        assert!(out.is_empty(), "{command} --bogus printed {out}");
        assert!(
            err.starts_with(&format!("roce-ipvlan {command}: invalid option '--bogus'")),
            "{command} --bogus: {err}"
        );
        assert!(
            err.contains("usage: roce-ipvlan "),
            "{command} --bogus: {err}"
        );
    }
    for (command, option) in [
        ("env", "--format"),
        ("diagnose", "--pid"),
        ("install", "--to"),
        ("uninstall", "--to"),
        ("ready", "--rails"),
    ] {
        let (code, _, err) = run(&[command, option]);
        assert_eq!(code, 2, "{command} {option}: {err}");
        assert!(
            err.contains(&format!("missing argument for option '{option}'")),
            "{command} {option}: {err}"
        );
    }
}

/// `--opt=value` is the same as `--opt value` everywhere (`install --to=/x` was refused, and
/// `diagnose --pid=N` too).
#[test]
fn options_take_their_value_attached_or_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(&["install", &format!("--to={}", dir.path().display())]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(dir.path().join("roce-ipvlan").exists(), "{out}");

    let file = dir.path().join("snap.json");
    fs::write(&file, "{}").unwrap();
    // Both spellings reach the snapshot loader, which refuses the empty object.
    for args in [
        vec![
            "diagnose".to_string(),
            "--snapshot".into(),
            file.display().to_string(),
        ],
        vec![
            "diagnose".to_string(),
            format!("--snapshot={}", file.display()),
        ],
    ] {
        let (code, _, err) = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("is not a diagnose snapshot"),
            "{args:?}: {err}"
        );
    }
}
