//! IPAM delegation: runs the IPAM plugin named in the configuration, as the CNI spec describes.
//!
//! The IPAM plugin gets the same CNI_* environment (with CNI_COMMAND set per call) and the
//! network configuration on stdin. If it does not speak the requested cniVersion (the Go
//! reference plugins before v1.2 stop at 1.0.0), the highest version both sides support is
//! negotiated through its VERSION command and the call is repeated in that version; the result
//! is version-neutral here, so it reaches the runtime in the version the runtime asked for.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::cni::{self, CniResult, Env};
use crate::config::NetConf;
use crate::error::{Error, Result};

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
            Error::Ipam(format!(
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

    pub fn add(&self) -> Result<CniResult> {
        let out = self.call("ADD", None)?;
        let result = CniResult::parse(&out).map_err(|e| {
            Error::Ipam(format!(
                "IPAM plugin {} returned a result this plugin cannot read ({e}): {out}",
                self.kind
            ))
        })?;
        if result.ips.is_empty() {
            return Err(Error::Ipam(format!(
                "IPAM plugin {} returned no address: the child needs one for its RoCE v2 GID; \
                 check the pool/range in the ipam section",
                self.kind
            )));
        }
        Ok(result)
    }

    pub fn check(&self, prev: &CniResult) -> Result<()> {
        self.call("CHECK", Some(prev)).map(drop)
    }

    pub fn del(&self, prev: Option<&CniResult>) -> Result<()> {
        self.call("DEL", prev).map(drop)
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
        let theirs = self.supported_versions()?;
        if !theirs.iter().any(|v| v == cni::STATUS_GC_VERSION) {
            tracing::info!(
                ipam = self.kind,
                supported = ?theirs,
                "IPAM plugin does not speak CNI 1.1.0, so it has no {command}; not forwarded"
            );
            return Ok(Delegated::Skipped { supported: theirs });
        }
        self.exec(command, cni::STATUS_GC_VERSION, None)?;
        Ok(Delegated::Forwarded)
    }

    /// Whether a failure of the IPAM plugin carried CNI code `code`.
    pub fn failed_with(e: &Error, code: u32) -> bool {
        matches!(e, Error::Ipam(msg) if msg.contains(&format!("(code {code})")))
    }

    fn call(&self, command: &str, prev: Option<&CniResult>) -> Result<Value> {
        match self.exec(command, &self.conf.cni_version, prev) {
            Err(e @ Error::Ipam(_)) if self.incompatible_version(&e) => {
                let version = self.negotiate()?;
                tracing::debug!(
                    ipam = self.kind,
                    version,
                    "IPAM plugin retried in a lower cniVersion"
                );
                self.exec(command, &version, prev)
            }
            other => other,
        }
    }

    fn incompatible_version(&self, e: &Error) -> bool {
        matches!(e, Error::Ipam(msg) if msg.contains("(code 1)"))
    }

    /// The versions the IPAM plugin lists in its VERSION answer.
    fn supported_versions(&self) -> Result<Vec<String>> {
        let reply = self.run(
            "VERSION",
            serde_json::json!({"cniVersion": self.conf.cni_version}),
        )?;
        Ok(reply
            .get("supportedVersions")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default())
    }

    /// The highest version both this plugin and the IPAM plugin support.
    fn negotiate(&self) -> Result<String> {
        let theirs = self.supported_versions()?;
        cni::SUPPORTED_VERSIONS
            .iter()
            .rev()
            .find(|v| theirs.iter().any(|t| t == *v))
            .map(|v| v.to_string())
            .ok_or_else(|| {
                Error::Ipam(format!(
                    "IPAM plugin {} supports cniVersion {theirs:?}, none of which this plugin \
                     speaks ({}): upgrade the IPAM plugin",
                    self.kind,
                    cni::SUPPORTED_VERSIONS.join(", ")
                ))
            })
    }

    fn exec(&self, command: &str, version: &str, prev: Option<&CniResult>) -> Result<Value> {
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
        self.run(command, stdin)
    }

    fn run(&self, command: &str, stdin: Value) -> Result<Value> {
        let mut child = Command::new(&self.binary)
            .env("CNI_COMMAND", command)
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
            .spawn()
            .map_err(|e| {
                Error::Ipam(format!(
                    "cannot run IPAM plugin {}: {e}",
                    self.binary.display()
                ))
            })?;
        let input = stdin.to_string();
        if let Some(mut pipe) = child.stdin.take() {
            // A plugin that exits without reading stdin closes the pipe: its exit status tells.
            let _ = pipe.write_all(input.as_bytes());
        }
        let out = child.wait_with_output().map_err(|e| {
            Error::Ipam(format!(
                "IPAM plugin {} did not finish: {e}",
                self.binary.display()
            ))
        })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(Error::Ipam(describe_failure(
                self.kind, command, &stdout, &stderr,
            )));
        }
        if matches!(command, "DEL" | "CHECK" | "STATUS" | "GC") {
            return Ok(Value::Null);
        }
        serde_json::from_str(&stdout).map_err(|e| {
            Error::Ipam(format!(
                "IPAM plugin {} {command} printed something that is not JSON ({e}): {}",
                self.kind,
                truncate(&stdout)
            ))
        })
    }
}

fn describe_failure(kind: &str, command: &str, stdout: &str, stderr: &str) -> String {
    match serde_json::from_str::<Value>(stdout) {
        Ok(v) if v.get("code").is_some() => format!(
            "IPAM plugin {kind} {command} failed (code {}): {}{}",
            v["code"],
            v.get("msg").and_then(Value::as_str).unwrap_or(""),
            v.get("details")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ),
        _ => format!(
            "IPAM plugin {kind} {command} failed without a CNI error: stdout {:?}, stderr {:?}",
            truncate(stdout),
            truncate(stderr)
        ),
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
        let msg = describe_failure(
            "host-local",
            "ADD",
            r#"{"code": 11, "msg": "no IP addresses available", "details": "range full"}"#,
            "",
        );
        assert_eq!(
            msg,
            "IPAM plugin host-local ADD failed (code 11): no IP addresses available (range full)"
        );
    }

    #[test]
    fn failure_without_a_cni_error_shows_the_output() {
        let msg = describe_failure("x", "ADD", "panic: boom", "trace");
        assert!(
            msg.contains("without a CNI error") && msg.contains("boom") && msg.contains("trace"),
            "{msg}"
        );
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
