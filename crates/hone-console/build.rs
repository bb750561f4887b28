//! Stamps the build with the commit it was built from (`HONE_COMMIT`), so
//! a result says which code produced it even when the checkout has moved
//! on since.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    if let Some(commit) = commit {
        let suffix = if dirty { "+changes" } else { "" };
        println!("cargo:rustc-env=HONE_COMMIT={commit}{suffix}");
    }
    // Rerun when the checkout moves to another branch or commit, or any
    // source changes (whether the build had uncommitted changes).
    for path in [
        "../../.git/HEAD",
        "../../.git/refs/heads",
        "../../.git/index",
        "../../crates",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
