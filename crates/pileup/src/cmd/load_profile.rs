//! `pileup load --profile`: the server's threads sampled while the load
//! runs (no thread stopped), their stacks written folded, and where their
//! time went said.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use pileup_conn::ConnSpec;
use pileup_profile::background::{Background, WhereTimeWent};

/// How often the server's threads are sampled while loading.
const INTERVAL: Duration = Duration::from_millis(100);

pub struct Profiler(Background);

impl Profiler {
    /// Find the server's process from its pid file and start sampling it;
    /// errors (not on this machine, no permission) come back before the
    /// load starts.
    pub fn start(spec: &ConnSpec) -> Result<Profiler> {
        let mut c = spec.connect()?;
        let pid = match pileup_annotate::server_pid_file(&mut c)? {
            Ok(p) => p,
            Err(file) => anyhow::bail!("--profile samples the server's threads, so the server must run on this machine (its pid file {file} cannot be read here)"
            ),
        };
        let b =
            Background::start(pid, INTERVAL).map_err(|e| anyhow::anyhow!("--profile cannot sample the server: {e}"))?;
        Ok(Profiler(b))
    }

    /// Stop sampling, write the folded stacks to `path` and say where the
    /// time went.
    pub fn finish(self, path: &Path, sink: &mut crate::output::Sink) -> Result<()> {
        let p = self.0.finish()?;
        let mut folded = vec![];
        pileup_profile::profile_stacks(&p, true).folded(&mut folded)?;
        pileup_files::write_private_bytes(path, &folded)
            .with_context(|| format!("writing the load profile to {}", path.display()))?;
        sink.result(&WhereTimeWent::of(&p, INTERVAL, path))
    }
}
