//! Test-only failpoints: named points in ADD (and in its undo) that fail on demand, so that
//! every rollback path is exercised deterministically by the privileged tests
//! (plugin/tests/privileged.rs, run in the VM by `make vm-rust`) instead of by timing.
//!
//! Only a build with the cargo feature `failpoints` has them: without it (the default, and
//! every shipped build) `failpoint!` expands to nothing, so no name, no environment read and no
//! error path is compiled in. With it, `ROCE_IPVLAN_FAILPOINT=<name>[,<name>…]`, read once per
//! process, arms the named points; an armed point returns a CNI error 108 whose message names
//! it. The names are `ADD` and `UNDO` below.

#[cfg(feature = "failpoints")]
use crate::protocol::error::Result;

/// The points of ADD's build, each right after a change (or the step that makes one): `after-`
/// and what was just done (`after-create`: the child's lookup right after its creation
/// fails). The privileged tests arm each in turn.
#[cfg(feature = "failpoints")]
pub const ADD: &[&str] = &[
    "after-create",
    "after-child",
    "after-ipam",
    "after-sysctls",
    "after-addresses",
    "after-up",
    "after-rules",
    "after-gid",
    "after-alias",
    "after-device-info",
];

/// The points of ADD's undo, one per kind of step: `undo-<step>` makes that step's undo fail
/// instead of running, so that the error's `details` must name it and the other steps must
/// still be undone.
#[cfg(feature = "failpoints")]
pub const UNDO: &[&str] = &[
    "undo-link",
    "undo-ipam",
    "undo-sysctl",
    "undo-rule",
    "undo-device-info",
];

/// `failpoint!(name)` in a function returning `Result`: returns the armed point's error. In
/// a build without the feature the statement is not compiled at all.
macro_rules! failpoint {
    ($name:expr) => {
        #[cfg(feature = "failpoints")]
        $crate::attach::failpoint::hit($name)?;
    };
}
pub(crate) use failpoint;

/// Fails if the point `name` is armed.
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) -> Result<()> {
    use std::sync::OnceLock;
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        std::env::var("ROCE_IPVLAN_FAILPOINT")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect()
    });
    let fail = |msg: String| {
        tracing::warn!(failpoint = name, "{msg}");
        Err(crate::protocol::error::Error::io(
            msg,
            std::io::Error::other("a test-only failure"),
        ))
    };
    // A misspelt name would otherwise arm nothing and let the test pass for the wrong reason.
    // Checked at the points of the build only, so that the undo still runs.
    if let Some(unknown) = armed
        .iter()
        .find(|n| !ADD.contains(&n.as_str()) && !UNDO.contains(&n.as_str()))
        .filter(|_| ADD.contains(&name))
    {
        return fail(format!(
            "ROCE_IPVLAN_FAILPOINT names {unknown:?}, which is no failpoint (failpoint.rs)"
        ));
    }
    if armed.iter().any(|n| n == name) {
        return fail(format!("failpoint {name} armed (ROCE_IPVLAN_FAILPOINT)"));
    }
    Ok(())
}
