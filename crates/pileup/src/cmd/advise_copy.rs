//! The index advisor's copy: the tables its classes read, dumped from the
//! user's server by pileup's dump (each table in its own snapshot, no
//! lock, `--sample` of the rows when asked) and loaded into a sandbox of
//! pileup's own, which is stopped and removed when the copy is dropped.

use std::time::{Duration, Instant};

use pileup_digest::advise::index::{Copied, Copier, CopyCost};
use pileup_digest::advise::kept::TableName;

pub struct SandboxCopy {
    source: pileup_conn::ConnSpec,
    /// The share of each table's rows copied, or all of them.
    sample: Option<f64>,
    threads: usize,
    sandbox: Option<pileup_sandbox::Sandbox>,
    dir: Option<tempfile::TempDir>,
}

impl SandboxCopy {
    pub fn new(source: pileup_conn::ConnSpec, sample: Option<f64>) -> SandboxCopy {
        SandboxCopy { source, sample, threads: 2, sandbox: None, dir: None }
    }
}

impl Drop for SandboxCopy {
    fn drop(&mut self) {
        if let Some(s) = self.sandbox.take() {
            let _ = s.stop();
        }
    }
}

/// What a copy may read from the server at most (data and indexes, times
/// the sample): more is refused, naming --sample.
const MAX_BYTES: f64 = 4.0 * (1u64 << 30) as f64;

impl Copier for SandboxCopy {
    fn copy(&mut self, tables: &[TableName], size: u64, progress: &mut dyn FnMut(&str)) -> Result<Copied, String> {
        let bytes = size as f64 * self.sample.unwrap_or(1.0);
        if bytes > MAX_BYTES {
            return Err(format!(
                "the copy would read {:.1} GiB from the server (at most 4 GiB); copy a share of the rows with --sample PCT",
                bytes / (1u64 << 30) as f64
            ));
        }
        progress("starting the copy's server");
        let sandbox = pileup_sandbox::Sandbox::start(pileup_sandbox::Options {
            name: Some(format!("advise-{}", std::process::id())),
            cnf: vec![("innodb_buffer_pool_size".into(), "256M".into())],
            ..Default::default()
        })
        .map_err(|e| format!("starting the copy's server: {e}"))?;
        let spec = sandbox.conn_spec();
        self.sandbox = Some(sandbox);
        // Private: the rows copied are the user's data.
        let dir = tempfile::Builder::new()
            .prefix("pileup-advise-")
            .tempdir()
            .map_err(|e| format!("a directory for the copy in {}: {e}", std::env::temp_dir().display()))?;
        let include = tables
            .iter()
            .map(|(d, t)| regex::Regex::new(&format!("^{}\\.{}$", regex::escape(d), regex::escape(t))))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let o = pileup_dump::DumpOptions {
            dir: dir.path().join("dump"),
            threads: self.threads,
            filter: pileup_dump::schema::Filter { databases: vec![], include, exclude: vec![] },
            where_: self.sample.map(|f| format!("RAND() < {f}")),
            chunk_rows: 100_000,
            compress: pileup_dump::files::Compress::None,
            format: pileup_dump::dump::Format::Pileup,
            lock: pileup_dump::snapshot::LockOptions { wait: Duration::from_secs(10), kill: false, unlocked: true },
            users: false,
            unlogged: true,
        };
        let t0 = Instant::now();
        let (mut rows, mut bytes) = (0u64, 0u64);
        pileup_dump::dump(&self.source, &o, &mut |e| {
            if let pileup_dump::dump::Event::Chunk { rows: r, bytes: b, .. } = e {
                rows += r;
                bytes += b;
                progress(&format!("copying: {rows} rows read"));
            }
        })
        .map_err(|e| format!("dumping the tables for the copy: {e}"))?;
        let seconds = t0.elapsed().as_secs_f64();
        let l = pileup_dump::LoadOptions {
            dir: o.dir.clone(),
            threads: self.threads,
            existing: pileup_dump::Existing::Refuse,
            rename: vec![],
            no_binlog: true,
            resume: false,
            verify: false,
            indexes_after_data: true,
        };
        progress("loading the copy");
        pileup_dump::load(&spec, &l, &mut |_| {}).map_err(|e| format!("loading the copy: {e}"))?;
        self.dir = Some(dir);
        Ok(Copied {
            spec,
            cost: CopyCost {
                tables: tables.len(),
                rows,
                bytes,
                seconds,
                sample: self.sample,
                how: format!("{} threads, each table in its own snapshot, no lock", self.threads),
            },
        })
    }
}
