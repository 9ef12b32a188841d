//! `roce-ipvlan env --exec`, run as the built binary over a recorded sysfs tree: what the
//! command it starts sees in its environment, and that it is not started when the rails are not
//! ready or a conflict is refused. No kernel features needed.

use std::fs;
use std::net::Ipv6Addr;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_roce-ipvlan");

/// A pod with one rail, net1 on rxe0 port 1, GID ::ffff:10.9.0.7 at index 1.
fn record_pod(sys: &Path) {
    let d = sys.join("class/net/net1");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("ifindex"), "3\n").unwrap();
    fs::write(
        d.join("ifalias"),
        "rdma_dev=rxe0 port=1 gid_index=1 gid=::ffff:10.9.0.7\n",
    )
    .unwrap();
    let p = sys.join("class/infiniband/rxe0/ports/1");
    for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
        fs::create_dir_all(p.join(sub)).unwrap();
    }
    for (i, gid) in ["fe80::5054:ff:fe0a:0", "::ffff:10.9.0.7"]
        .iter()
        .enumerate()
    {
        let long: Vec<String> = gid
            .parse::<Ipv6Addr>()
            .unwrap()
            .segments()
            .iter()
            .map(|x| format!("{x:04x}"))
            .collect();
        fs::write(p.join(format!("gids/{i}")), long.join(":") + "\n").unwrap();
        fs::write(p.join(format!("gid_attrs/types/{i}")), "RoCE v2\n").unwrap();
        fs::write(p.join(format!("gid_attrs/ndevs/{i}")), "net1\n").unwrap();
    }
}

/// Runs `roce-ipvlan env --sys SYS ARGS...` with `vars` added to a minimal environment.
fn run(sys: &Path, vars: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .arg("env")
        .arg("--sys")
        .arg(sys)
        .args(args);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the binary runs");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn lines_with(out: &str, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(String::from)
        .collect();
    v.sort();
    v
}

#[test]
fn exec_runs_the_command_with_the_settings_and_without_the_conflicting_ones() {
    let dir = tempfile::tempdir().unwrap();
    record_pod(dir.path());
    let (code, out, err) = run(dir.path(), &[], &["--exec", "--", "printenv"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        lines_with(&out, "NCCL_"),
        ["NCCL_IB_GID_INDEX=1", "NCCL_IB_HCA==rxe0:1"]
    );
    assert_eq!(
        lines_with(&out, "UCX_"),
        ["UCX_IB_GID_INDEX=1", "UCX_NET_DEVICES=rxe0:1"]
    );
    assert!(
        out.contains("PATH=/usr/bin:/bin\n"),
        "the rest is kept: {out}"
    );
    assert!(!err.contains("warning"), "{err}");
    assert!(
        err.contains("exec \"printenv\" with NCCL_IB_HCA='=rxe0:1'"),
        "{err}"
    );

    // Without `--` too; arguments reach the command as they are (no shell).
    let (code, out, _) = run(
        dir.path(),
        &[],
        &["--exec", "printenv", "UCX_IB_GID_INDEX", "NCCL_IB_HCA"],
    );
    assert_eq!((code, out.as_str()), (0, "1\n=rxe0:1\n"));
    let (code, out, _) = run(dir.path(), &[], &["--exec", "echo", "$HOME", "a b"]);
    assert_eq!((code, out.as_str()), (0, "$HOME a b\n"));

    // The command's exit status is the process's: exec replaced env.
    let (code, _, _) = run(dir.path(), &[], &["--exec", "sh", "-c", "exit 7"]);
    assert_eq!(code, 7);
}

#[test]
fn conflicting_variables_are_replaced_with_a_warning_by_default() {
    let dir = tempfile::tempdir().unwrap();
    record_pod(dir.path());
    let vars = [
        ("NCCL_IB_GID_INDEX", "3"),
        ("UCX_NET_DEVICES", "mlx5_0:1"),
        ("UCX_IB_ROCE_SUBNETS", "10.0.0.0/8"),
        ("NCCL_IB_HCA", "=rxe0:1"), // already what env sets: no warning
    ];
    for mode in [&[][..], &["--on-conflict", "replace"][..]] {
        let mut args = mode.to_vec();
        args.extend(["--exec", "--", "printenv"]);
        let (code, out, err) = run(dir.path(), &vars, &args);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("\nNCCL_IB_GID_INDEX=1\n") || out.starts_with("NCCL_IB_GID_INDEX=1\n")
        );
        assert_eq!(
            lines_with(&out, "UCX_NET_DEVICES"),
            ["UCX_NET_DEVICES=rxe0:1"]
        );
        assert!(lines_with(&out, "UCX_IB_ROCE_SUBNETS").is_empty(), "{out}");
        assert_eq!(
            lines_with(&err, "roce-ipvlan env: warning:"),
            [
                r#"roce-ipvlan env: warning: replacing NCCL_IB_GID_INDEX="3" (env sets "1")"#,
                r#"roce-ipvlan env: warning: replacing UCX_IB_ROCE_SUBNETS="10.0.0.0/8" (env unsets it)"#,
                r#"roce-ipvlan env: warning: replacing UCX_NET_DEVICES="mlx5_0:1" (env sets "rxe0:1")"#,
            ]
        );
    }
}

#[test]
fn refuse_does_not_start_the_command() {
    let dir = tempfile::tempdir().unwrap();
    record_pod(dir.path());
    let marker = dir.path().join("ran");
    let touch = ["--exec", "--", "touch", marker.to_str().unwrap()];
    let mut args = vec!["--on-conflict", "refuse"];
    args.extend(touch);
    let (code, out, err) = run(dir.path(), &[("UCX_IB_GID_INDEX", "0")], &args);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "");
    assert!(!marker.exists(), "the command ran");
    assert!(
        err.contains(r#"not starting "touch": the environment already sets UCX_IB_GID_INDEX="0" (env sets "1")"#),
        "{err}"
    );
    assert!(err.contains("--on-conflict replace"), "{err}");

    // No conflict: refuse runs the command.
    let (code, _, err) = run(dir.path(), &[("UCX_IB_GID_INDEX", "1")], &args);
    assert_eq!(code, 0, "{err}");
    assert!(marker.exists());
}

#[test]
fn rails_not_ready_fail_before_the_command_starts() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = ["--exec", "--", "touch", marker.to_str().unwrap()];

    // No roce-ipvlan alias at all (a pod without attachments).
    fs::create_dir_all(dir.path().join("class/net/eth0")).unwrap();
    let (code, _, err) = run(dir.path(), &[], &touch);
    assert_eq!(code, 1);
    assert!(err.contains("no roce-ipvlan rails"), "{err}");
    assert!(!marker.exists(), "the command ran without rails");

    // The alias's GID is gone from the table.
    record_pod(dir.path());
    fs::write(
        dir.path().join("class/infiniband/rxe0/ports/1/gids/1"),
        "0000:0000:0000:0000:0000:0000:0000:0000\n",
    )
    .unwrap();
    let (code, _, err) = run(dir.path(), &[], &touch);
    assert_eq!(code, 1);
    assert!(err.contains("rail net1 (rxe0 port 1)"), "{err}");
    assert!(!marker.exists(), "the command ran with a stale GID");
}

#[test]
fn a_command_that_cannot_run_exits_like_env1() {
    let dir = tempfile::tempdir().unwrap();
    record_pod(dir.path());
    let (code, _, err) = run(dir.path(), &[], &["--exec", "no-such-command-xyz"]);
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("cannot run \"no-such-command-xyz\""), "{err}");
    let (code, _, _) = run(dir.path(), &[], &["--exec", dir.path().to_str().unwrap()]);
    assert_eq!(code, 126);
}

#[test]
fn usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    record_pod(dir.path());
    for args in [
        &["--exec"][..],
        &["--exec", "--"],
        &["--on-conflict", "maybe", "--exec", "true"],
        &["--on-conflict", "refuse"],
        &["--format", "json", "--exec", "true"],
    ] {
        let (code, _, err) = run(dir.path(), &[], args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
}
