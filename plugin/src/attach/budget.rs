//! The time budget of one invocation: one deadline, fixed when the command starts, that every
//! wait (the attachment lock, IPAM, the RA, the GID) takes its share of.
//!
//! The kubelet gives a whole RunPodSandbox 4 minutes (twice its `--runtime-request-timeout`
//! of 2 minutes, pkg/kubelet/cri/remote/remote_runtime.go), and Multus runs a pod's
//! attachments one after the other inside that call. So each attachment must fail in bounded
//! time, well under that deadline, with its undo done, rather than let the runtime kill it
//! half-way: a killed ADD leaves its cleanup to a DEL that may come much later. Each wait keeps
//! its own limit (`rdma.gidTimeoutMs`, `ipv6.raTimeoutMs`, `timeouts.ipamMs`) and is cut to what
//! is left of `timeouts.totalMs`. docs/configuration.md has the numbers.

use std::time::{Duration, Instant};

/// The deadline of one invocation.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    deadline: Instant,
}

/// How long one wait may take: its own limit, cut to what is left of the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub limit: Duration,
    /// True when the budget, not the wait's own limit, decided `limit`.
    pub cut: bool,
}

impl Budget {
    pub fn start(total: Duration) -> Budget {
        Budget::starting_at(Instant::now(), total)
    }

    pub fn starting_at(now: Instant, total: Duration) -> Budget {
        Budget {
            deadline: now + total,
        }
    }

    /// What is left at `now` (zero once the deadline has passed).
    pub fn remaining_at(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// The share of a wait whose own limit is `own`, starting at `now`.
    pub fn share_at(&self, now: Instant, own: Duration) -> Share {
        let left = self.remaining_at(now);
        Share {
            limit: own.min(left),
            cut: own > left,
        }
    }

    pub fn share(&self, own: Duration) -> Share {
        self.share_at(Instant::now(), own)
    }

    /// How long an undo step may wait for a lock at `now`: what is left, but at least
    /// [`UNDO_WAIT`]. A failed ADD has often spent its budget (IPAM or the GID wait used it
    /// up, which is why it failed), and its undo must still run: with nothing left, any
    /// contention on the pod lock (another ADD's short sysctl step) made the restore of
    /// `all.rp_filter` fail.
    pub fn undo_wait_at(&self, now: Instant) -> Duration {
        self.remaining_at(now).max(UNDO_WAIT)
    }
}

/// The undo's own time for a lock, past the budget (see [`Budget::undo_wait_at`]). The locks
/// it waits for are held over short steps only (lock.rs).
pub const UNDO_WAIT: Duration = Duration::from_secs(5);

impl Share {
    /// For error messages: "5000 ms" or "1200 ms (what was left of timeouts.totalMs 30000)".
    pub fn describe(&self, total: Duration) -> String {
        if self.cut {
            format!(
                "{} ms (what was left of timeouts.totalMs {})",
                self.limit.as_millis(),
                total.as_millis()
            )
        } else {
            format!("{} ms", self.limit.as_millis())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_wait_keeps_its_own_limit_while_the_budget_allows_it_then_takes_what_is_left() {
        let t0 = Instant::now();
        let b = Budget::starting_at(t0, 30_000 * MS);
        // A 10 s wait after 1 s of a 30 s budget keeps its 10 s; after 25 s (IPAM took them)
        // it gets the last 5 s.
        for (spent, limit, cut, text) in [
            (1_000, 10_000, false, "10000 ms"),
            (
                25_000,
                5_000,
                true,
                "5000 ms (what was left of timeouts.totalMs 30000)",
            ),
            (
                31_000,
                0,
                true,
                "0 ms (what was left of timeouts.totalMs 30000)",
            ),
        ] {
            let s = b.share_at(t0 + spent * MS, 10_000 * MS);
            assert_eq!(
                s,
                Share {
                    limit: limit * MS,
                    cut
                },
                "after {spent} ms"
            );
            assert_eq!(s.describe(30_000 * MS), text);
        }
    }

    #[test]
    fn the_shares_never_exceed_the_budget() {
        let t0 = Instant::now();
        let b = Budget::starting_at(t0, 30_000 * MS);
        // The sum of the shares never exceeds the budget.
        let ipam = b.share_at(t0, 20_000 * MS);
        let ra = b.share_at(t0 + ipam.limit, 10_000 * MS);
        let gid = b.share_at(t0 + ipam.limit + ra.limit, 10_000 * MS);
        assert_eq!(ipam.limit + ra.limit + gid.limit, 30_000 * MS);
        assert!(!ipam.cut && gid.cut);
    }

    #[test]
    fn nothing_is_left_after_the_deadline() {
        let t0 = Instant::now();
        let b = Budget::starting_at(t0, 1_000 * MS);
        assert_eq!(b.remaining_at(t0 + 5_000 * MS), Duration::ZERO);
        assert_eq!(b.share_at(t0 + 5_000 * MS, 10 * MS).limit, Duration::ZERO);
        assert_eq!(b.remaining_at(t0 + 400 * MS), 600 * MS);
    }

    /// Suspected and confirmed (issue #25, item 7): the undo waited for the pod lock with what
    /// was left of the budget, nothing once IPAM or the GID wait had used it up. It keeps
    /// UNDO_WAIT of its own.
    #[test]
    fn an_undo_waits_for_its_lock_even_when_the_budget_is_spent() {
        let t0 = Instant::now();
        let b = Budget::starting_at(t0, 1000 * MS);
        assert_eq!(b.remaining_at(t0 + 2000 * MS), Duration::ZERO);
        assert_eq!(b.undo_wait_at(t0 + 2000 * MS), UNDO_WAIT);
        assert_eq!(b.undo_wait_at(t0 + 1000 * MS), UNDO_WAIT);
        let long = Budget::starting_at(t0, UNDO_WAIT + 3000 * MS);
        assert_eq!(long.undo_wait_at(t0), UNDO_WAIT + 3000 * MS);
    }
}
