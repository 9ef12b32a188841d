//! The plugin's one error type and its mapping to CNI error codes.
//!
//! Every message says what was expected, what was found and, where the operator can act, what to
//! do. `code()` is the only place that assigns codes; docs/configuration.md lists them.

use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// CNI code 1.
    #[error("unsupported cniVersion {found:?}: this plugin supports {supported}")]
    IncompatibleVersion { found: String, supported: String },

    /// CNI code 4: a CNI_* variable is missing or malformed.
    #[error("{0}")]
    InvalidEnv(String),

    /// CNI code 6: stdin is not the JSON document the spec calls for.
    #[error("cannot decode the network configuration on stdin: {0}")]
    Decode(String),

    /// CNI code 7.
    #[error("invalid network configuration: {0}")]
    InvalidConfig(String),

    /// CNI code 11: a transient condition; the runtime may retry.
    #[error("{0}")]
    TryAgainLater(String),

    /// 100: the rail netdev named by the configuration is missing or unusable.
    #[error("{0}")]
    Rail(String),

    /// 101: no RDMA port could be found on the rail.
    #[error("{0}")]
    NoRdmaPort(String),

    /// 102: the kernel refused a netlink request with `errno`.
    #[error("{what}: {}", std::io::Error::from_raw_os_error(*errno))]
    Netlink { what: String, errno: i32 },

    /// A failed ADD that could not take back every step: the failure (its code and message), and
    /// each undo step that failed too, which go to the CNI error's `details`, so that what was
    /// left behind reaches the runtime's events and not only the plugin's log.
    #[error("{cause}")]
    Unwound {
        cause: Box<Error>,
        failed_undo: Vec<FailedUndo>,
    },

    /// The failure of one rail of a multi-rail attachment, with the rail and child it concerns;
    /// its code is the failure's.
    #[error("rail {rail} (child {child}): {cause}")]
    OnRail {
        rail: String,
        child: String,
        cause: Box<Error>,
    },

    /// 103: the delegated IPAM plugin failed or answered something unusable. `code` is the CNI
    /// code of the IPAM plugin's own error document, when it printed one (STATUS tells 50 from
    /// 51 by it; a 1 makes ADD retry in a version the plugin supports).
    #[error("{msg}")]
    Ipam { msg: String, code: Option<u32> },

    /// 104: the child's RoCE v2 GID did not appear in time.
    #[error("{0}")]
    GidTimeout(String),

    /// 110: the rail's GID table has no room for the child's GIDs (gid_capacity.rs).
    #[error("{0}")]
    GidTableFull(String),

    /// 105: CNI_NETNS is missing or is not a network namespace.
    #[error("{0}")]
    Netns(String),

    /// 106: a sysctl could not be written.
    #[error("{0}")]
    Sysctl(String),

    /// 107: CHECK found the attachment differs from what ADD set up.
    #[error("{0}")]
    CheckFailed(String),

    /// CNI 50 (STATUS): the plugin cannot serve ADD; existing attachments are not affected.
    #[error("{0}")]
    Unavailable(String),

    /// CNI 51 (STATUS): the plugin cannot serve ADD, and existing attachments of the network
    /// may have limited connectivity (their rail or RDMA port is down).
    #[error("{0}")]
    UnavailableLimited(String),

    /// 109: no usable SLAAC address came from the rail's router advertisements in time.
    #[error("{0}")]
    Slaac(String),

    /// 108: every other failure is an I/O error with context. (999, `INTERNAL_ERROR` in
    /// lib.rs, is only the panic hook's: a bug.)
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An undo step of a failed ADD that failed itself: what it was to take back, and why it could not.
#[derive(Debug)]
pub struct FailedUndo {
    pub step: String,
    pub error: Error,
}

impl Error {
    pub fn code(&self) -> u32 {
        match self {
            Error::IncompatibleVersion { .. } => 1,
            Error::InvalidEnv(_) => 4,
            Error::Decode(_) => 6,
            Error::InvalidConfig(_) => 7,
            Error::TryAgainLater(_) => 11,
            Error::Unavailable(_) => 50,
            Error::UnavailableLimited(_) => 51,
            Error::Rail(_) => 100,
            Error::NoRdmaPort(_) => 101,
            Error::Netlink { .. } => 102,
            Error::Unwound { cause, .. } | Error::OnRail { cause, .. } => cause.code(),
            Error::Ipam { .. } => 103,
            Error::GidTimeout(_) => 104,
            Error::Netns(_) => 105,
            Error::Sysctl(_) => 106,
            Error::CheckFailed(_) => 107,
            Error::Io { .. } => 108,
            Error::Slaac(_) => 109,
            Error::GidTableFull(_) => 110,
        }
    }

    /// An IPAM failure without a CNI error of the IPAM plugin's own.
    pub fn ipam(msg: impl Into<String>) -> Self {
        Error::Ipam {
            msg: msg.into(),
            code: None,
        }
    }

    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// 105: CNI_NETNS could not be opened as a network namespace (`source` names the path).
    pub fn netns(source: std::io::Error) -> Self {
        Error::Netns(format!(
            "CNI_NETNS: {source}; expected a network namespace path such as \
             /var/run/netns/<name> or /proc/<pid>/ns/net"
        ))
    }

    /// 105: CNI_NETNS is the plugin's own (the host's) namespace. ADD there would put the
    /// child, its source rules and the pod-wide `all.rp_filter=0` into the host, and DEL would
    /// then take host links for the pod's; libcni's skel refuses it the same way.
    pub fn own_netns(path: &std::path::Path) -> Self {
        Error::Netns(format!(
            "CNI_NETNS {} is the plugin's own (the host's) network namespace: expected the \
             pod's namespace; a pod never shares the host's, so this is a runtime or \
             configuration bug (hostNetwork pods get no secondary networks)",
            path.display()
        ))
    }

    pub fn netlink(what: impl Into<String>, errno: i32) -> Self {
        Error::Netlink {
            what: what.into(),
            errno,
        }
    }

    /// The errno of a netlink failure, if the kernel sent one.
    pub fn netlink_errno(&self) -> Option<i32> {
        match self {
            Error::Netlink { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The CNI error document printed on stdout.
    pub fn to_cni(&self, cni_version: &str) -> CniError {
        CniError {
            cni_version: cni_version.to_string(),
            code: self.code(),
            msg: self.to_string(),
            details: self.details(),
        }
    }

    fn details(&self) -> String {
        match self {
            Error::Netlink { errno, .. } => {
                format!("{:?} (errno {errno})", nix::errno::Errno::from_raw(*errno))
            }
            Error::Io { source, .. } => source.to_string(),
            Error::OnRail { cause, .. } => cause.details(),
            Error::Unwound { cause, failed_undo } => {
                let mut parts: Vec<String> = Some(cause.details())
                    .filter(|d| !d.is_empty())
                    .into_iter()
                    .collect();
                parts.extend(
                    failed_undo
                        .iter()
                        .map(|f| format!("not undone: {}: {}", f.step, f.error)),
                );
                parts.join("; ")
            }
            _ => String::new(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CniError {
    pub cni_version: String,
    pub code: u32,
    pub msg: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub details: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_spec_and_docs() {
        let cases = [
            (
                Error::IncompatibleVersion {
                    found: "9.9.9".into(),
                    supported: "x".into(),
                },
                1,
            ),
            (Error::InvalidEnv("x".into()), 4),
            (Error::Decode("x".into()), 6),
            (Error::InvalidConfig("x".into()), 7),
            (Error::TryAgainLater("x".into()), 11),
            (Error::Unavailable("x".into()), 50),
            (Error::UnavailableLimited("x".into()), 51),
            (Error::Rail("x".into()), 100),
            (Error::NoRdmaPort("x".into()), 101),
            (Error::ipam("x"), 103),
            (Error::GidTimeout("x".into()), 104),
            (Error::Netns("x".into()), 105),
            (Error::Sysctl("x".into()), 106),
            (Error::CheckFailed("x".into()), 107),
            (Error::Slaac("x".into()), 109),
            (Error::GidTableFull("x".into()), 110),
        ];
        for (err, code) in cases {
            assert_eq!(err.code(), code, "{err:?}");
        }
    }

    #[test]
    fn cni_error_json_has_the_spec_fields() {
        let doc = Error::InvalidConfig("mode l3".into()).to_cni("1.0.0");
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["code"], 7);
        assert_eq!(v["msg"], "invalid network configuration: mode l3");
        assert!(v.get("details").is_none());
    }

    #[test]
    fn failed_undo_steps_are_in_the_details_and_the_cause_keeps_code_and_message() {
        let cause = Error::netlink("cannot add rule", libc::EEXIST);
        let cause_details = cause.to_cni("1.0.0").details;
        let err = Error::Unwound {
            cause: Box::new(cause),
            failed_undo: vec![FailedUndo {
                step: "the IPAM allocation".into(),
                error: Error::ipam("IPAM plugin host-local DEL failed (code 11): busy"),
            }],
        };
        let doc = err.to_cni("1.0.0");
        assert_eq!(doc.code, 102);
        assert!(doc.msg.starts_with("cannot add rule"), "{}", doc.msg);
        assert!(doc.details.starts_with(&cause_details), "{}", doc.details);
        assert!(
            doc.details
                .contains("not undone: the IPAM allocation: IPAM plugin host-local DEL failed"),
            "{}",
            doc.details
        );
    }
}
