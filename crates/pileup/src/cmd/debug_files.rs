//! Where the tools that name a server's frames (`stacks`, `locks`) find
//! its debug files: directories searched as gdb searches them, and
//! debuginfod servers with the client cache gdb and eu-stack share.

use std::path::PathBuf;
use std::time::Duration;

use pileup_engine::debug_files::DebuginfodOptions;

#[derive(clap::Args, Debug, Clone)]
pub struct DebugFileArgs {
    /// Look for separate debug files (by build-id and .gnu_debuglink) in
    /// DIR, as gdb's debug-file-directory; repeat for several, searched in
    /// order.
    #[arg(long = "debug-dir", value_name = "DIR", default_values_t = pileup_engine::default_debug_dirs().into_iter().map(|p| p.display().to_string()))]
    pub debug_dirs: Vec<String>,
    /// Fetch missing debug files from this debuginfod server (repeat for
    /// several; default: DEBUGINFOD_URLS). Files go to the client cache
    /// (DEBUGINFOD_CACHE_PATH, else ~/.cache/debuginfod_client) that gdb
    /// and eu-stack share. `stacks` with one sample and `locks` wait for
    /// them; a longer `stacks` run starts at once and names its stacks as
    /// they arrive.
    #[arg(long = "debuginfod", value_name = "URL")]
    pub debuginfod: Vec<String>,
    /// Fetch nothing from debuginfod servers (their cache is still read).
    #[arg(long, conflicts_with = "debuginfod")]
    pub no_debuginfod: bool,
    /// Longest one debuginfod fetch may take (default: DEBUGINFOD_TIMEOUT,
    /// else 90s).
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration)]
    pub debuginfod_timeout: Option<Duration>,
}

impl DebugFileArgs {
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.debug_dirs.iter().map(PathBuf::from).collect()
    }

    /// The debuginfod servers and cache to use: --debuginfod, else
    /// DEBUGINFOD_URLS; with --no-debuginfod (or none named) the cache alone.
    pub fn debuginfod(&self) -> DebuginfodOptions {
        let mut o = if self.no_debuginfod {
            DebuginfodOptions::cache_only()
        } else if !self.debuginfod.is_empty() {
            pileup_debuginfod::for_servers(&self.debuginfod).unwrap_or_else(DebuginfodOptions::cache_only)
        } else {
            pileup_debuginfod::from_env().unwrap_or_else(DebuginfodOptions::cache_only)
        };
        if let Some(t) = self.debuginfod_timeout {
            o.timeout = t;
        }
        o
    }

    /// [`DebugFileArgs::debuginfod`] drawing a bar in `bars` for each fetch
    /// ("fetching debug info for mariadbd [====>   ] 45/212 MiB").
    pub fn debuginfod_with_bars(&self, bars: &indicatif::MultiProgress) -> DebuginfodOptions {
        use pileup_engine::debug_files::{FetchProgress, OnProgress};
        let mut o = self.debuginfod();
        let bars = bars.clone();
        let current = std::sync::Mutex::new(None::<indicatif::ProgressBar>);
        o.on_progress = Some(OnProgress(std::sync::Arc::new(move |p: &FetchProgress| {
            let mut cur = current.lock().unwrap();
            let b = cur.get_or_insert_with(|| {
                let b = bars.add(super::progress_bar(
                    p.total.unwrap_or(0),
                    "fetching debug info for {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
                ));
                b.set_message(p.module.clone());
                b
            });
            b.set_position(p.bytes);
            if p.done {
                b.finish_and_clear();
                *cur = None;
            }
        })));
        o
    }
}

/// Where debuginfod fetches draw their bars: stderr on a terminal, else nowhere.
pub fn fetch_bars() -> indicatif::MultiProgress {
    let bars = indicatif::MultiProgress::new();
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        bars.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bars
}
