//! The index advisor's copy: the tables its classes read, dumped from the
//! user's server by pileup's dump (each thread in its own snapshot, no
//! lock, out of the slow log; `--sample` of the rows sent when asked) and
//! loaded into a sandbox of pileup's own in a private directory, which is
//! stopped and removed when the copy is dropped.

use std::time::{Duration, Instant};

use pileup_digest::advise::index::{Copied, Copier, CopyCost};
use pileup_digest::advise::kept::TableName;

pub struct SandboxCopy {
    source: pileup_conn::ConnSpec,
    /// The share of each table's rows copied, or all of them.
    sample: Option<f64>,
    threads: usize,
    sandbox: Option<pileup_sandbox::Sandbox>,
    /// The sandbox's base directory: private, since the copy holds the
    /// user's rows and its root account has no password.
    base: Option<tempfile::TempDir>,
}

impl SandboxCopy {
    pub fn new(source: pileup_conn::ConnSpec, sample: Option<f64>) -> SandboxCopy {
        SandboxCopy { source, sample, threads: 2, sandbox: None, base: None }
    }
}

impl Drop for SandboxCopy {
    fn drop(&mut self) {
        if let Some(s) = self.sandbox.take() {
            let _ = s.stop();
        }
    }
}

/// What a copy may make the server scan at most (its tables' data and
/// indexes: a sample is drawn from every row, so it scans them all).
const MAX_BYTES: f64 = 4.0 * (1u64 << 30) as f64;

impl Copier for SandboxCopy {
    fn copy(&mut self, tables: &[TableName], size: u64, progress: &mut dyn FnMut(&str)) -> Result<Copied, String> {
        if tables.is_empty() {
            return Err("no table to copy".into());
        }
        if size as f64 > MAX_BYTES {
            return Err(format!(
                "the tables hold {:.1} GiB on the server, more than the 4 GiB a copy may scan (a sample scans every row \
                 too); advise on a smaller server or a replica of a part",
                size as f64 / (1u64 << 30) as f64
            ));
        }
        // Private: the rows copied are the user's data.
        let base = tempfile::Builder::new()
            .prefix("pileup-advise-")
            .tempdir()
            .map_err(|e| format!("a directory for the copy in {}: {e}", std::env::temp_dir().display()))?;
        progress("starting the copy's server");
        let sandbox = pileup_sandbox::Sandbox::start(pileup_sandbox::Options {
            name: Some("copy".into()),
            base_dir: Some(base.path().to_path_buf()),
            cnf: vec![("innodb_buffer_pool_size".into(), "256M".into())],
            ..Default::default()
        })
        .map_err(|e| format!("starting the copy's server: {e}"))?;
        let spec = sandbox.conn_spec();
        self.sandbox = Some(sandbox);
        let include = tables
            .iter()
            .map(|(d, t)| regex::Regex::new(&format!("^{}\\.{}$", regex::escape(d), regex::escape(t))))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let o = pileup_dump::DumpOptions {
            dir: base.path().join("dump"),
            threads: self.threads,
            filter: pileup_dump::schema::Filter { databases: vec![], include, exclude: vec![] },
            where_: self.sample.map(|f| format!("RAND() < {f}")),
            chunk_rows: 100_000,
            compress: pileup_dump::files::Compress::None,
            format: pileup_dump::dump::Format::Pileup,
            lock: pileup_dump::snapshot::LockOptions { wait: Duration::from_secs(10), kill: false, unlocked: true },
            users: false,
            unlogged: true,
            watchdog: Some(super::dump::WATCHDOG),
        };
        self.base = Some(base);
        let t0 = Instant::now();
        let (mut rows, mut bytes) = (0u64, 0u64);
        pileup_dump::dump(&self.source, &o, &mut |e| {
            if let pileup_dump::dump::Event::Chunk { rows: r, bytes: b, .. } = e {
                rows += r;
                bytes += b;
                progress(&format!("copying: {rows} rows sent"));
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
            load_data: false,
            indexes_after_data: true,
            watchdog: Some(super::dump::WATCHDOG),
        };
        progress("loading the copy");
        pileup_dump::load(&spec, &l, &mut |_| {}).map_err(|e| format!("loading the copy: {e}"))?;
        // The rows are in the copy now; their files go at once.
        let _ = std::fs::remove_dir_all(&o.dir);
        Ok(Copied {
            spec,
            cost: CopyCost {
                tables: tables.len(),
                scanned_bytes: size,
                rows,
                bytes,
                seconds,
                sample: self.sample,
                how: format!("{} threads, each in its own snapshot, no lock", self.threads),
            },
        })
    }
}
