//! A sandbox's disk made slow on purpose: its server moved into a cgroup
//! that caps reads or writes on the device holding its datadir (cgroup v1
//! `blkio` throttling or v2 `io.max`), as a modest cloud volume would. The
//! machines the tests run on have disks that outrun their two cores, so an
//! I/O-bound stall has to be provoked this way.

use std::path::{Path, PathBuf};

use crate::error::{Ctx, Result};

use crate::Sandbox;

/// What a [`Throttle`] caps on the datadir's device.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// Read requests per second.
    ReadIops(u32),
    /// Bytes written per second.
    WriteBytesPerSec(u64),
    /// One read and one write request a second: a device that has all but
    /// stopped answering (a failing disk, a detached network volume). The
    /// kernel's throttle takes no zero, and one request a second holds up
    /// every commit and every page read that misses the buffer pool.
    Stalled,
}

/// The server's process in a throttling cgroup; moved back to the root
/// cgroup and the cgroup removed when dropped. Needs root.
///
/// On a host that mounts both hierarchies (v1 `blkio` for the limit, v2 at
/// `/sys/fs/cgroup/unified`), the server also gets a v2 cgroup of its own,
/// as a systemd service has: the kernel keeps its I/O stall time
/// (`io.pressure`) there.
pub struct Throttle {
    dir: PathBuf,
    root_procs: PathBuf,
    /// The v2 cgroup made beside a v1 limit, and its root's `cgroup.procs`.
    v2: Option<(PathBuf, PathBuf)>,
    pid: u32,
}

impl Throttle {
    /// Throttle `sb`'s datadir device to `limit`.
    pub fn new(sb: &Sandbox, limit: Limit) -> Result<Throttle> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(&sb.endpoint.dir)?.dev();
        let (maj, min) = (libc::major(dev), libc::minor(dev));
        let pid = sb.pid();
        let name = format!("pileup-throttle-{}-{pid}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/blkio");
        // (v1 file, v2 key, value) for each cap.
        let caps: Vec<(&str, &str, u64)> = match limit {
            Limit::ReadIops(n) => vec![("blkio.throttle.read_iops_device", "riops", u64::from(n))],
            Limit::WriteBytesPerSec(n) => vec![("blkio.throttle.write_bps_device", "wbps", n)],
            Limit::Stalled => {
                vec![("blkio.throttle.read_iops_device", "riops", 1), ("blkio.throttle.write_iops_device", "wiops", 1)]
            }
        };
        let write = |p: &Path, s: String| std::fs::write(p, s).with_ctx(|| format!("writing {}", p.display()));
        let v1_limit = v1.join(caps[0].0).exists();
        let (dir, root_procs) = if v1_limit {
            (v1.join(&name), v1.join("cgroup.procs"))
        } else {
            let root = Path::new("/sys/fs/cgroup");
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+io");
            (root.join(&name), root.join("cgroup.procs"))
        };
        std::fs::create_dir_all(&dir).with_ctx(|| format!("creating cgroup {} (needs root)", dir.display()))?;
        let mut t = Throttle { dir, root_procs, v2: None, pid };
        if v1_limit {
            for (file, _, n) in &caps {
                write(&t.dir.join(file), format!("{maj}:{min} {n}"))?;
            }
        } else {
            let keys: Vec<String> = caps.iter().map(|(_, k, n)| format!("{k}={n}")).collect();
            write(&t.dir.join("io.max"), format!("{maj}:{min} {}", keys.join(" ")))?;
        }
        write(&t.dir.join("cgroup.procs"), pid.to_string())?;
        let unified = Path::new("/sys/fs/cgroup/unified");
        if v1_limit && unified.join("cgroup.procs").exists() {
            let own = unified.join(&name);
            std::fs::create_dir_all(&own).with_ctx(|| format!("creating cgroup {}", own.display()))?;
            t.v2 = Some((own.clone(), unified.join("cgroup.procs")));
            write(&own.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(t)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.root_procs, self.pid.to_string());
        let _ = std::fs::remove_dir(&self.dir);
        if let Some((own, root_procs)) = &self.v2 {
            let _ = std::fs::write(root_procs, self.pid.to_string());
            let _ = std::fs::remove_dir(own);
        }
    }
}
