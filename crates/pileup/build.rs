//! The version line names the build: the commit it was built from (when
//! built from a git checkout) and the target it runs on.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| !o.stdout.is_empty());
    let commit = match commit {
        Some(c) if dirty => format!("commit {c}, modified"),
        Some(c) => format!("commit {c}"),
        None => "not built from a git checkout".into(),
    };
    println!("cargo:rustc-env=PILEUP_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=PILEUP_BUILD_TARGET={}", std::env::var("TARGET").unwrap_or_default());
    println!("cargo:rustc-env=PILEUP_BUILD_PROFILE={}", std::env::var("PROFILE").unwrap_or_default());
    // Rebuilt when HEAD moves (a commit or a checkout); the index changes
    // with staging, which may mark the build modified.
    for f in ["../../.git/HEAD", "../../.git/index"] {
        if std::path::Path::new(f).exists() {
            println!("cargo:rerun-if-changed={f}");
        }
    }
    if let Ok(head) = std::fs::read_to_string("../../.git/HEAD") {
        if let Some(r) = head.strip_prefix("ref: ") {
            let p = format!("../../.git/{}", r.trim());
            if std::path::Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
}
