//! IPAM delegation: runs the IPAM plugin named in the configuration, as the CNI spec describes.
//!
//! The IPAM plugin gets the same CNI_* environment (with CNI_COMMAND set per call) and the
//! network configuration on stdin. If it does not speak the requested cniVersion (the Go
//! reference plugins before v1.2 stop at 1.0.0), the highest version both sides support is
//! negotiated through its VERSION command and the call is repeated in that version; the result
//! is version-neutral here, so it reaches the runtime in the version the runtime asked for.
//!
//! Each call is bounded (budget.rs): the IPAM plugin runs in a process group of its own, which
//! is killed when the call's deadline passes, and with a parent-death signal, so that it dies
//! with a plugin the runtime killed instead of allocating, later, an address that no DEL will
//! release. Its stdin is written and its stdout and stderr read at the same time, so that no
//! size of either can deadlock the two processes.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::protocol::cni::{self, CniResult, Env};
use crate::protocol::config::NetConf;
use crate::protocol::error::{Error, Result};

/// What became of a STATUS or GC for the IPAM plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delegated {
    Forwarded,
    /// The IPAM plugin does not list 1.1.0; these are the versions it does list.
    Skipped {
        supported: Vec<String>,
    },
}

pub struct Ipam<'a> {
    env: &'a Env,
    conf: &'a NetConf,
    kind: &'a str,
    binary: PathBuf,
}

impl<'a> Ipam<'a> {
    /// Finds the IPAM binary in CNI_PATH. `None` when the configuration has no IPAM section.
    pub fn find(env: &'a Env, conf: &'a NetConf) -> Result<Option<Ipam<'a>>> {
        let Some(ipam) = &conf.ipam else {
            return Ok(None);
        };
        let binary = find_in_path(&env.path, &ipam.kind).ok_or_else(|| {
            Error::ipam(format!(
                "IPAM plugin {:?} was not found in CNI_PATH ({}): install it on the node, \
                 e.g. into /opt/cni/bin",
                ipam.kind,
                env.path
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ))
        })?;
        Ok(Some(Ipam {
            env,
            conf,
            kind: &ipam.kind,
            binary,
        }))
    }

    /// ADD, bounded by `share` (`timeouts.ipamMs`, cut to what the ADD's budget leaves).
    pub fn add(&self, share: crate::attach::budget::Share) -> Result<CniResult> {
        let out = self.call("ADD", None, share.into())?;
        let result = CniResult::parse(&out).map_err(|e| {
            Error::ipam(format!(
                "IPAM plugin {} returned a result this plugin cannot read ({e}): {out}",
                self.kind
            ))
        })?;
        if result.ips.is_empty() {
            return Err(Error::ipam(format!(
                "IPAM plugin {} returned no address: the child needs one for its RoCE v2 GID; \
                 check the pool/range in the ipam section",
                self.kind
            )));
        }
        Ok(result)
    }

    pub fn check(&self, prev: &CniResult) -> Result<()> {
        self.call(
            "CHECK",
            Some(prev),
            Deadline::after(self.conf.timeouts.ipam),
        )
        .map(drop)
    }

    /// DEL, bounded by `timeouts.ipamMs` of its own: a release is not cut short by an ADD's
    /// spent budget (a rollback after an IPAM timeout must still release).
    pub fn del(&self, prev: Option<&CniResult>) -> Result<()> {
        self.call("DEL", prev, Deadline::after(self.conf.timeouts.ipam))
            .map(drop)
    }

    /// STATUS for the IPAM plugin (the spec: a plugin MUST pass STATUS to its delegates and
    /// return their error). Only sent when the IPAM plugin lists 1.1.0 in its VERSION answer:
    /// older ones (Debian's host-local 1.1.1 stops at 1.0.0) know no STATUS and would fail it.
    pub fn status(&self) -> Result<Delegated> {
        self.forward_1_1("STATUS")
    }

    /// GC for the IPAM plugin, with the configuration (and so `cni.dev/valid-attachments`) as
    /// the runtime sent it; only when the IPAM plugin speaks 1.1.0, as for STATUS.
    pub fn gc(&self) -> Result<Delegated> {
        self.forward_1_1("GC")
    }

    fn forward_1_1(&self, command: &str) -> Result<Delegated> {
        let deadline = Deadline::after(self.conf.timeouts.ipam);
        let theirs = self.supported_versions(deadline)?;
        if !theirs.iter().any(|v| v == cni::STATUS_GC_VERSION) {
            tracing::info!(
                ipam = self.kind,
                supported = ?theirs,
                "IPAM plugin does not speak CNI 1.1.0, so it has no {command}; not forwarded"
            );
            return Ok(Delegated::Skipped { supported: theirs });
        }
        self.exec(command, cni::STATUS_GC_VERSION, None, deadline)?;
        Ok(Delegated::Forwarded)
    }

    /// Whether a failure of the IPAM plugin carried CNI code `code`.
    pub fn failed_with(e: &Error, code: u32) -> bool {
        matches!(e, Error::Ipam { code: Some(c), .. } if *c == code)
    }

    fn call(&self, command: &str, prev: Option<&CniResult>, deadline: Deadline) -> Result<Value> {
        match self.exec(command, &self.conf.cni_version, prev, deadline) {
            Err(e) if Ipam::failed_with(&e, 1) => {
                let version = self.negotiate(command, deadline)?;
                tracing::debug!(
                    ipam = self.kind,
                    version,
                    "IPAM plugin retried in a lower cniVersion"
                );
                self.exec(command, &version, prev, deadline)
            }
            other => other,
        }
    }

    /// The versions the IPAM plugin lists in its VERSION answer.
    fn supported_versions(&self, deadline: Deadline) -> Result<Vec<String>> {
        let reply = self.run(
            "VERSION",
            serde_json::json!({"cniVersion": self.conf.cni_version}),
            deadline,
        )?;
        Ok(reply
            .get("supportedVersions")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default())
    }

    /// The highest version both this plugin and the IPAM plugin support that has `command`:
    /// an IPAM plugin that stops at 0.3.1 is asked ADD and DEL in 0.3.1, but has no CHECK.
    fn negotiate(&self, command: &str, deadline: Deadline) -> Result<String> {
        let theirs = self.supported_versions(deadline)?;
        let ours: Vec<&str> = cni::SUPPORTED_VERSIONS
            .iter()
            .copied()
            .filter(|v| cni::has_command(v, command))
            .collect();
        ours.iter()
            .rev()
            .find(|v| theirs.iter().any(|t| t == *v))
            .map(|v| v.to_string())
            .ok_or_else(|| {
                Error::ipam(format!(
                    "IPAM plugin {} supports cniVersion {theirs:?}, none of which this plugin \
                     speaks with {command} ({}): upgrade the IPAM plugin",
                    self.kind,
                    ours.join(", ")
                ))
            })
    }

    fn exec(
        &self,
        command: &str,
        version: &str,
        prev: Option<&CniResult>,
        deadline: Deadline,
    ) -> Result<Value> {
        let mut stdin = self.conf.raw.clone();
        stdin["cniVersion"] = version.into();
        match prev {
            Some(p) => stdin["prevResult"] = p.to_json(version, None),
            None => {
                if let Some(o) = stdin.as_object_mut() {
                    o.remove("prevResult");
                }
            }
        }
        self.run(command, stdin, deadline)
    }

    fn run(&self, command: &str, stdin: Value, deadline: Deadline) -> Result<Value> {
        let mut cmd = Command::new(&self.binary);
        cmd.env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &self.env.container_id)
            .env("CNI_IFNAME", &self.env.ifname)
            .env(
                "CNI_NETNS",
                self.env.netns.as_deref().unwrap_or(Path::new("")),
            )
            .env(
                "CNI_PATH",
                std::env::join_paths(&self.env.path).unwrap_or_default(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: a timeout kills whatever the IPAM plugin started, too.
            .process_group(0);
        if command == "DEL" {
            // The runtime's CNI_ARGS is passed on as it is, but at DEL without the entries
            // host-local's LoadArgs would refuse it over: DEL tolerates a malformed one
            // (cni.rs), and the address must still be released.
            if let Some(raw) = std::env::var_os("CNI_ARGS") {
                cmd.env(
                    "CNI_ARGS",
                    cni::well_formed_cni_args(&raw.to_string_lossy()),
                );
            }
        }
        let parent = std::process::id();
        // SAFETY: between fork and exec the closure calls only prctl and getppid, which are
        // async-signal-safe, and touches no memory shared with the parent.
        unsafe {
            cmd.pre_exec(move || {
                // SIGKILL when the thread that forked us ends: that thread is the one that
                // waits for us below (never a short-lived netns thread), and it ends only
                // with the plugin process.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The plugin may have died before prctl: then no signal will come.
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            Error::ipam(format!(
                "cannot run IPAM plugin {}: {e}",
                self.binary.display()
            ))
        })?;
        let out = match communicate(child, stdin.to_string().into_bytes(), deadline) {
            Ok(out) => out,
            Err(Failure::TimedOut) => {
                return Err(Error::ipam(format!(
                    "IPAM plugin {} {command} did not finish within {} and was killed \
                     (with its process group): check that the IPAM plugin and what it depends \
                     on (its daemon, store or server) are up on this node, or raise \
                     \"timeouts\": {{\"ipamMs\": ..., \"totalMs\": ...}} in the NAD",
                    self.kind,
                    deadline.describe(self.conf.timeouts.total),
                )))
            }
            Err(Failure::Io(what, e)) => {
                return Err(Error::ipam(format!(
                    "IPAM plugin {} {command}: {what}: {e}",
                    self.binary.display()
                )))
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(describe_failure(self.kind, command, &stdout, &stderr));
        }
        if matches!(command, "DEL" | "CHECK" | "STATUS" | "GC") {
            return Ok(Value::Null);
        }
        serde_json::from_str(&stdout).map_err(|e| {
            Error::ipam(format!(
                "IPAM plugin {} {command} printed something that is not JSON ({e}): {}",
                self.kind,
                truncate(&stdout)
            ))
        })
    }
}

/// The deadline of one IPAM call, and whether the ADD's budget (not `timeouts.ipamMs`) set it.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    limit: Duration,
    cut: bool,
}

impl Deadline {
    fn after(limit: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + limit,
            limit,
            cut: false,
        }
    }

    fn describe(&self, total: Duration) -> String {
        crate::attach::budget::Share {
            limit: self.limit,
            cut: self.cut,
        }
        .describe(total)
    }
}

/// An ADD's share of its budget, for [`Ipam::add`].
impl From<crate::attach::budget::Share> for Deadline {
    fn from(share: crate::attach::budget::Share) -> Deadline {
        Deadline {
            cut: share.cut,
            ..Deadline::after(share.limit)
        }
    }
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

enum Failure {
    TimedOut,
    Io(&'static str, std::io::Error),
}

/// Writes `input` to the child's stdin while reading its stdout and stderr, all three from this
/// thread with poll(2), and waits for it until `deadline`; then kills its process group. (A
/// thread per pipe costs the same three thread starts on every IPAM call, milliseconds each
/// under emulation.) Reading ends at the deadline too: a grandchild that left the group may hold
/// a pipe open, and must not hold the plugin.
fn communicate(mut child: Child, input: Vec<u8>, deadline: Deadline) -> Result<Output, Failure> {
    let kill = |child: &mut Child| {
        // The group id is the child's pid (process_group(0)).
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.wait();
    };
    let mut stdin = child.stdin.take();
    let mut pipes = [
        OutPipe::new(child.stdout.take()),
        OutPipe::new(child.stderr.take()),
    ];
    let nonblocking = [stdin.as_ref().map(AsRawFd::as_raw_fd)]
        .into_iter()
        .chain(pipes.iter().map(|p| p.reader.as_ref().map(|_| p.fd)))
        .flatten()
        .try_for_each(set_nonblocking);
    if let Err(e) = nonblocking {
        kill(&mut child);
        return Err(Failure::Io("cannot set its pipes non-blocking", e));
    }
    let mut written = 0;
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if written == input.len() {
            // All written (or nothing to write): closing stdin is the end of the input.
            stdin = None;
        }
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(3);
        if let Some(pipe) = &stdin {
            fds.push(pollfd(pipe.as_raw_fd(), libc::POLLOUT));
        }
        for pipe in pipes.iter().filter(|p| p.reader.is_some()) {
            fds.push(pollfd(pipe.fd, libc::POLLIN));
        }
        if fds.is_empty() {
            break;
        }
        let left = deadline.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            kill(&mut child);
            return Err(Failure::TimedOut);
        }
        // Rounded up, so that the last wait does not end just before the deadline.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd entries for the whole call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            kill(&mut child);
            return Err(Failure::Io("cannot wait for its pipes", e));
        }
        for ready in fds.iter().filter(|f| f.revents != 0) {
            if let Some(pipe) = stdin.as_mut().filter(|p| p.as_raw_fd() == ready.fd) {
                match pipe.write(&input[written..]) {
                    Ok(n) => written += n,
                    Err(e) if would_wait(&e) => {}
                    // A plugin that exits without reading stdin closes the pipe (EPIPE): its
                    // exit status tells.
                    Err(_) => stdin = None,
                }
                continue;
            }
            let Some(pipe) = pipes.iter_mut().find(|p| p.fd == ready.fd) else {
                continue;
            };
            let Some(reader) = pipe.reader.as_mut() else {
                continue;
            };
            match reader.read(&mut chunk) {
                Ok(0) => pipe.reader = None,
                Ok(n) => pipe.read.extend_from_slice(&chunk[..n]),
                Err(e) if would_wait(&e) => {}
                Err(_) => pipe.reader = None,
            }
        }
    }
    let [stdout, stderr] = pipes.map(|p| p.read);
    // Both pipes are closed, so the plugin has (almost always) exited; one that closed them and
    // lives on still gets only until the deadline.
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline.at => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Ok(None) => {
                kill(&mut child);
                return Err(Failure::TimedOut);
            }
            Err(e) => {
                kill(&mut child);
                return Err(Failure::Io("cannot wait for it", e));
            }
        }
    };
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// One of the child's output pipes for [`communicate`]: the reader until end of file, what it
/// read, its fd.
struct OutPipe {
    reader: Option<Box<dyn Read>>,
    read: Vec<u8>,
    fd: RawFd,
}

impl OutPipe {
    fn new(pipe: Option<impl Read + AsRawFd + 'static>) -> OutPipe {
        OutPipe {
            fd: pipe.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            reader: pipe.map(|p| Box::new(p) as Box<dyn Read>),
            read: Vec::new(),
        }
    }
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

fn would_wait(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

/// O_NONBLOCK on the plugin's end of a pipe (the child's end is another open file and stays
/// blocking).
fn set_nonblocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor this function's caller owns and keeps open; no memory passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn describe_failure(kind: &str, command: &str, stdout: &str, stderr: &str) -> Error {
    match serde_json::from_str::<Value>(stdout) {
        Ok(v) if v.get("code").is_some() => Error::Ipam {
            msg: format!(
                "IPAM plugin {kind} {command} failed (code {}): {}{}",
                v["code"],
                v.get("msg").and_then(Value::as_str).unwrap_or(""),
                v.get("details")
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty())
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            ),
            code: v["code"].as_u64().and_then(|c| u32::try_from(c).ok()),
        },
        _ => Error::ipam(format!(
            "IPAM plugin {kind} {command} failed without a CNI error: stdout {:?}, stderr {:?}",
            truncate(stdout),
            truncate(stderr)
        )),
    }
}

fn truncate(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn find_in_path(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    dirs.iter().map(|d| d.join(name)).find(|p| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_with_a_cni_error_keeps_its_code_and_message() {
        let err = describe_failure(
            "host-local",
            "ADD",
            r#"{"code": 11, "msg": "no IP addresses available", "details": "range full"}"#,
            "",
        );
        assert_eq!(
            err.to_string(),
            "IPAM plugin host-local ADD failed (code 11): no IP addresses available (range full)"
        );
        assert!(Ipam::failed_with(&err, 11));
        assert!(!Ipam::failed_with(&err, 1));
        // The code is the IPAM plugin's, not a number that happens to be in its message.
        let err = describe_failure(
            "x",
            "STATUS",
            r#"{"code": 50, "msg": "backend says (code 51)"}"#,
            "",
        );
        assert!(
            Ipam::failed_with(&err, 50) && !Ipam::failed_with(&err, 51),
            "{err}"
        );
    }

    #[test]
    fn failure_without_a_cni_error_shows_the_output() {
        let err = describe_failure("x", "ADD", "panic: boom (code 51)", "trace");
        assert!(!Ipam::failed_with(&err, 51), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("without a CNI error") && msg.contains("boom") && msg.contains("trace"),
            "{msg}"
        );
    }

    /// An Ipam for a shell script installed as IPAM plugin `fake` in a fresh CNI_PATH dir.
    fn with_script(script: &str, extra: serde_json::Value, test: impl FnOnce(&Ipam, &Path)) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("fake");
        std::fs::write(&exe, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dirs = dir.path().display().to_string();
        let env = Env::parse(|k| match k {
            "CNI_COMMAND" => Some("ADD".into()),
            "CNI_CONTAINERID" => Some("c1".into()),
            "CNI_NETNS" => Some("/proc/self/ns/net".into()),
            "CNI_IFNAME" => Some("net1".into()),
            "CNI_PATH" => Some(dirs.clone()),
            _ => None,
        })
        .unwrap();
        let mut conf = serde_json::json!({
            "cniVersion": "1.0.0", "name": "n", "type": "roce-ipvlan", "master": "r0",
            "ipam": {"type": "fake"}
        });
        for (k, v) in extra.as_object().unwrap() {
            conf[k] = v.clone();
        }
        let conf = NetConf::parse(conf.to_string().as_bytes(), "net1").unwrap();
        let ipam = Ipam::find(&env, &conf).unwrap().unwrap();
        test(&ipam, dir.path());
    }

    fn share(ms: u64) -> crate::attach::budget::Share {
        crate::attach::budget::Share {
            limit: Duration::from_millis(ms),
            cut: false,
        }
    }

    const RESULT: &str = r#"echo '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}'"#;

    fn gone_or_zombie(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .unwrap()
                .trim_start()
                .starts_with('Z'),
        }
    }

    #[test]
    fn a_hung_ipam_is_killed_with_its_process_group_at_the_deadline() {
        // It starts a helper that holds the output pipes too, then hangs.
        let script = "sleep 1000 & echo $! >\"$(dirname \"$0\")/helper\"; sleep 1000";
        with_script(script, serde_json::json!({}), |ipam, dir| {
            let err = ipam.add(share(300)).unwrap_err();
            let msg = err.to_string();
            assert_eq!(err.code(), 103);
            assert!(
                msg.contains("fake ADD did not finish within 300 ms and was killed")
                    && msg.contains("timeouts"),
                "{msg}"
            );
            let helper = std::fs::read_to_string(dir.join("helper")).unwrap();
            let helper = helper.trim();
            // SIGKILL is delivered before kill(2) returns; only the reaping may lag.
            for _ in 0..100 {
                if gone_or_zombie(helper) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            panic!("the IPAM plugin's helper {helper} survived the timeout");
        });
    }

    #[test]
    fn big_stdin_and_big_stderr_do_not_deadlock() {
        // The plugin writes 1 MiB to stderr before it reads its stdin (1 MiB as well): with
        // stdin written first and the output read only afterwards, both sides block forever
        // on full pipes.
        let script = format!("head -c 1048576 /dev/zero >&2; cat >/dev/null; {RESULT}");
        let padding = "x".repeat(1 << 20);
        with_script(
            &script,
            serde_json::json!({"padding": padding}),
            |ipam, _| {
                let result = ipam.add(share(60_000)).unwrap();
                assert_eq!(result.ips[0].address.to_string(), "10.0.0.2/24");
            },
        );
    }

    #[test]
    fn a_plugin_that_ignores_stdin_still_answers() {
        with_script(
            RESULT,
            serde_json::json!({"padding": "y".repeat(1 << 20)}),
            |ipam, _| {
                assert_eq!(ipam.add(share(60_000)).unwrap().ips.len(), 1);
            },
        );
    }

    #[test]
    fn the_ipam_plugin_leads_a_process_group_of_its_own() {
        // Field 5 of /proc/PID/stat is the process group.
        let script = format!(
            "cut -d' ' -f5 /proc/$$/stat >\"$(dirname \"$0\")/pgid\"; \
             echo $$ >\"$(dirname \"$0\")/pid\"; {RESULT}"
        );
        with_script(&script, serde_json::json!({}), |ipam, dir| {
            ipam.add(share(60_000)).unwrap();
            let read = |f: &str| {
                std::fs::read_to_string(dir.join(f))
                    .unwrap()
                    .trim()
                    .to_string()
            };
            assert_eq!(read("pgid"), read("pid"));
        });
    }

    /// An IPAM plugin that stops at 0.3.1 (it answers code 1 in any newer version): ADD is
    /// retried in 0.3.1 and its result, with "version" in each ip, is read; CHECK, which 0.3.1
    /// does not have, is not sent to it at all.
    #[test]
    fn an_ipam_plugin_that_stops_at_0_3_1_gets_add_but_no_check() {
        let script = r#"in=$(cat)
if [ "$CNI_COMMAND" = VERSION ]; then
  echo '{"cniVersion":"0.3.1","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1"]}'; exit 0
fi
case "$in" in *'"cniVersion":"0.3.1"'*) ;; *) echo '{"code":1,"msg":"incompatible CNI versions"}'; exit 1;; esac
echo "$CNI_COMMAND" >>"$(dirname "$0")/calls"
echo '{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.0.0.2/24","gateway":"10.0.0.1"}]}'"#;
        with_script(script, serde_json::json!({}), |ipam, dir| {
            let result = ipam.add(share(60_000)).unwrap();
            assert_eq!(result.ips[0].address.to_string(), "10.0.0.2/24");
            let err = ipam.check(&result).unwrap_err();
            assert_eq!(err.code(), 103);
            assert!(
                err.to_string()
                    .contains("none of which this plugin speaks with CHECK (0.4.0, 1.0.0, 1.1.0)"),
                "{err}"
            );
            ipam.del(Some(&result)).unwrap();
            let calls = std::fs::read_to_string(dir.join("calls")).unwrap();
            assert_eq!(calls, "ADD\nDEL\n");
        });
    }

    #[test]
    fn binaries_are_found_only_when_executable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("host-local");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap();
        let dirs = vec![PathBuf::from("/nonexistent"), dir.path().to_path_buf()];
        assert_eq!(find_in_path(&dirs, "host-local"), None);
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_in_path(&dirs, "host-local"), Some(exe));
    }
}
