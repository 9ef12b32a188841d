//! `roce-ipvlan env --exec -- CMD ARGS...`: the settings of [`super::plan`] applied to this
//! process's environment, then `execve` of the command (no shell), so that a container's
//! entrypoint is the only thing a job changes.
//!
//! A variable the container already sets can defeat the selection: a global
//! `NCCL_IB_GID_INDEX` baked into an image, an `NCCL_IB_HCA` from a job template written for
//! another node, a `UCX_IB_ROCE_SUBNETS` that UCX refuses next to `UCX_IB_GID_INDEX`. Such a
//! value is a conflict when it differs from the value the plan sets, or when the plan needs
//! the variable unset. The plan's values were checked against this pod's live GID table and
//! the libraries' selection; the container's were written without knowing the table (GID
//! indexes are first-free slots and differ between nodes), so by default the plan's replace
//! them with a warning per variable. `--on-conflict refuse` stops instead.

use std::ffi::{OsStr, OsString};
use std::fmt;

use super::Plan;

/// What to do with a variable already set to something the plan does not want.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Replace (or unset) it and say so on stderr.
    Replace,
    /// Do not start the command.
    Refuse,
}

/// A variable of the current environment that the plan overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub key: &'static str,
    /// The value found in the environment (lossy if not UTF-8: it is only printed).
    pub found: String,
    /// The value the plan sets, or `None` when the plan needs the variable unset.
    pub wanted: Option<String>,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.wanted {
            Some(v) => write!(f, "{}={:?} (env sets {:?})", self.key, self.found, v),
            None => write!(f, "{}={:?} (env unsets it)", self.key, self.found),
        }
    }
}

/// The environment changes for the command: what to set, what to remove, and which of them
/// overrode a value the container had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    pub set: Vec<(&'static str, String)>,
    pub remove: Vec<&'static str>,
    pub replaced: Vec<Conflict>,
}

/// Compares the plan with the current environment (`current` looks a variable up).
/// A variable already holding the planned value, or an unset one the plan wants unset, is no
/// conflict. With [`OnConflict::Refuse`] any conflict is an error listing all of them.
pub fn changes(
    plan: &Plan,
    current: impl Fn(&str) -> Option<OsString>,
    mode: OnConflict,
) -> Result<Changes, Vec<Conflict>> {
    let mut replaced = Vec::new();
    for (key, value) in &plan.env {
        if let Some(found) = current(key) {
            if found != OsStr::new(value) {
                replaced.push(Conflict {
                    key,
                    found: found.to_string_lossy().into_owned(),
                    wanted: Some(value.clone()),
                });
            }
        }
    }
    for key in &plan.unset {
        if let Some(found) = current(key) {
            replaced.push(Conflict {
                key,
                found: found.to_string_lossy().into_owned(),
                wanted: None,
            });
        }
    }
    if mode == OnConflict::Refuse && !replaced.is_empty() {
        return Err(replaced);
    }
    Ok(Changes {
        set: plan.env.clone(),
        remove: plan.unset.clone(),
        replaced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan_same_index() -> Plan {
        Plan {
            env: vec![
                ("NCCL_IB_HCA", "=rxe0:1,rxe1:1".into()),
                ("NCCL_IB_GID_INDEX", "3".into()),
                ("UCX_NET_DEVICES", "rxe0:1,rxe1:1".into()),
                ("UCX_IB_GID_INDEX", "3".into()),
            ],
            unset: vec![
                "NCCL_IB_ADDR_FAMILY",
                "NCCL_IB_ADDR_RANGE",
                "NCCL_IB_ROCE_VERSION_NUM",
                "UCX_IB_ROCE_SUBNETS",
            ],
            notes: vec![],
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn clean_environment_sets_everything_and_replaces_nothing() {
        let plan = plan_same_index();
        for mode in [OnConflict::Replace, OnConflict::Refuse] {
            let c = changes(&plan, env_of(&[("PATH", "/bin")]), mode).unwrap();
            assert_eq!(c.set, plan.env);
            assert_eq!(c.remove, plan.unset);
            assert!(c.replaced.is_empty());
        }
    }

    #[test]
    fn the_same_value_is_no_conflict() {
        let plan = plan_same_index();
        let env = env_of(&[
            ("NCCL_IB_GID_INDEX", "3"),
            ("UCX_NET_DEVICES", "rxe0:1,rxe1:1"),
        ]);
        let c = changes(&plan, env, OnConflict::Refuse).unwrap();
        assert!(c.replaced.is_empty());
    }

    #[test]
    fn a_different_value_is_replaced_with_its_old_and_new_value() {
        let plan = plan_same_index();
        let env = env_of(&[("NCCL_IB_GID_INDEX", "0"), ("NCCL_IB_HCA", "mlx5")]);
        let c = changes(&plan, env, OnConflict::Replace).unwrap();
        assert_eq!(c.set, plan.env, "the plan's values win");
        assert_eq!(
            c.replaced,
            vec![
                Conflict {
                    key: "NCCL_IB_HCA",
                    found: "mlx5".into(),
                    wanted: Some("=rxe0:1,rxe1:1".into()),
                },
                Conflict {
                    key: "NCCL_IB_GID_INDEX",
                    found: "0".into(),
                    wanted: Some("3".into()),
                },
            ]
        );
        assert_eq!(
            c.replaced[1].to_string(),
            r#"NCCL_IB_GID_INDEX="0" (env sets "3")"#
        );
    }

    #[test]
    fn a_variable_the_plan_unsets_is_a_conflict_even_when_empty() {
        // An empty UCX_IB_ROCE_SUBNETS is still "set" for UCX's config parser.
        let plan = plan_same_index();
        let env = env_of(&[
            ("UCX_IB_ROCE_SUBNETS", ""),
            ("NCCL_IB_ADDR_FAMILY", "AF_INET6"),
        ]);
        let c = changes(&plan, env, OnConflict::Replace).unwrap();
        assert_eq!(c.remove, plan.unset);
        let keys: Vec<&str> = c.replaced.iter().map(|x| x.key).collect();
        assert_eq!(keys, ["NCCL_IB_ADDR_FAMILY", "UCX_IB_ROCE_SUBNETS"]);
        assert_eq!(
            c.replaced[0].to_string(),
            r#"NCCL_IB_ADDR_FAMILY="AF_INET6" (env unsets it)"#
        );
    }

    #[test]
    fn refuse_lists_every_conflict() {
        let plan = Plan {
            env: vec![
                ("NCCL_IB_HCA", "=rxe0:1".into()),
                ("NCCL_IB_ADDR_FAMILY", "AF_INET6".into()),
                ("UCX_NET_DEVICES", "rxe0:1".into()),
                ("UCX_IB_ROCE_SUBNETS", "2001:db8::5/128".into()),
            ],
            unset: vec!["NCCL_IB_GID_INDEX", "UCX_IB_GID_INDEX"],
            notes: vec![],
        };
        let env = env_of(&[
            ("UCX_IB_GID_INDEX", "3"),
            ("NCCL_IB_GID_INDEX", "3"),
            ("UCX_NET_DEVICES", "mlx5_0:1"),
            ("NCCL_IB_ADDR_FAMILY", "AF_INET6"),
        ]);
        let err = changes(&plan, env, OnConflict::Refuse).unwrap_err();
        let keys: Vec<&str> = err.iter().map(|x| x.key).collect();
        assert_eq!(
            keys,
            ["UCX_NET_DEVICES", "NCCL_IB_GID_INDEX", "UCX_IB_GID_INDEX"]
        );
    }
}
