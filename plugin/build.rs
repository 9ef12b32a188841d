//! Puts the git commit into `roce-ipvlan --version` (env ROCE_IPVLAN_COMMIT at compile time):
//! the ROCE_IPVLAN_COMMIT environment variable when it is set and not empty (a source tarball,
//! a build container without .git, a release naming its commit), else `git rev-parse --short
//! HEAD`, else "unknown". README.md#building says the same.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=ROCE_IPVLAN_COMMIT");
    let commit = std::env::var("ROCE_IPVLAN_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ROCE_IPVLAN_COMMIT={commit}");
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    // Rerun when HEAD moves: HEAD itself (a checkout), the branch it names (a commit), and
    // packed-refs (the branch packed). --git-path resolves worktrees' split git directories.
    // A path that does not exist would make cargo rerun this on every build, so it is left out.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for path in ["HEAD", "packed-refs"]
        .iter()
        .map(|p| p.to_string())
        .chain(branch)
    {
        if let Some(file) = git(&["rev-parse", "--git-path", &path]) {
            if std::path::Path::new(&file).exists() {
                println!("cargo:rerun-if-changed={file}");
            }
        }
    }
    Some(commit)
}
