//! `pileup load --profile`: the stacks engine samples the server's threads
//! while the load runs, and the result says where their time went.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use pileup_conn::ConnSpec;
use pileup_engine::{CaptureOptions, Mode, Profile, Sampler, SamplerOptions, ThreadFilter};

/// How often the server's threads are sampled while loading.
const INTERVAL: Duration = Duration::from_millis(100);

pub struct Profiler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Result<Profile>>,
}

impl Profiler {
    /// Find the server's process from its pid file and start sampling it
    /// on a thread of its own; errors (not on this machine, no permission)
    /// come back before the load starts.
    pub fn start(spec: &ConnSpec) -> Result<Profiler> {
        let mut c = spec.connect()?;
        let pid = match pileup_annotate::server_pid_file(&mut c)? {
            Ok(p) => p,
            Err(file) => anyhow::bail!("--profile samples the server's threads, so the server must run on this machine (its pid file {file} cannot be read here)"
            ),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
        let flag = stop.clone();
        let handle = std::thread::spawn(move || -> Result<Profile> {
            let opts = SamplerOptions {
                capture: CaptureOptions { mode: Mode::Passive, ..Default::default() },
                filter: ThreadFilter::default(),
                any_process: false,
                debug_info: false,
                sql_refresh: Duration::from_secs(60),
                sql_bracket: false,
                debug_dirs: pileup_engine::default_debug_dirs(),
                debuginfod: None,
                debuginfod_wait: false,
                keep_samples: 1,
            };
            let mut sampler = match Sampler::new(pid, opts, None) {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::anyhow!("--profile cannot sample the server: {e}")));
                    bail!("not started");
                }
            };
            sampler.run_until(usize::MAX, INTERVAL, None, Some(&flag), |_| {})?;
            Ok(sampler.finish())
        });
        ready_rx.recv().context("the profiler thread ended before it started")??;
        Ok(Profiler { stop, handle })
    }

    /// Stop sampling, write the folded stacks to `path` and print where the
    /// time went.
    pub fn finish(self, path: &Path, json: bool) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        let p = self.handle.join().map_err(|_| anyhow::anyhow!("the profiler thread panicked"))??;
        let mut folded = vec![];
        pileup_profile::profile_stacks(&p, true).folded(&mut folded)?;
        pileup_files::write_private_bytes(path, &folded)
            .with_context(|| format!("writing the load profile to {}", path.display()))?;
        let shares = pileup_engine::analysis::where_time_went(&p.stacks, 12);
        let samples = p.stops.samples;
        if json {
            out!(
                "{}",
                serde_json::json!({"event": "profile", "samples": samples, "file": path.display().to_string(),
                    "shares": shares, "named_pct": p.named_pct})
            );
            return Ok(());
        }
        out!(
            "where the server's working threads spent the load ({samples} samples at 10 Hz, no thread stopped; stacks in {}):",
            path.display()
        );
        if shares.is_empty() {
            out!("  no thread was seen on a CPU, waiting on the disk or on a lock");
        }
        for s in &shares {
            out!(
                "  {:5.1}%  {:<9}  {}{}",
                s.pct,
                s.state,
                s.function,
                s.innermost.as_deref().map(|i| format!("  (innermost: {i})")).unwrap_or_default()
            );
        }
        if p.named_pct < 100.0 {
            out!(
                "  frames shown as module+0xOFFSET have no name in the binary (a stripped build: install its debug symbols to name them)"
            );
        }
        Ok(())
    }
}
