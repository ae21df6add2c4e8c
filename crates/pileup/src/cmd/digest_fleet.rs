//! `pileup digest --from`: a fleet's shipped per-minute digests, read from
//! the store (only the hours and hosts the question names) and merged into
//! one report with the hosts as a dimension.

use std::sync::mpsc;
use std::sync::Mutex;

use anyhow::{Context, Result};
use pileup_digest::fleet::compare::{compare, Changes};
use pileup_digest::fleet::merge::{parse_when, Merge, Merged, Question};
use pileup_digest::fleet::{file, layout};
use pileup_digest::output::DigestReport;
use pileup_digest::report::View;

/// The flags of `pileup digest --from`.
#[derive(clap::Args, Debug)]
pub struct FromArgs {
    /// Read the per-minute digests a fleet shipped (--ship) to s3://BUCKET[/PREFIX] and merge
    /// them into one report, with each class's hosts and each host's classes.
    #[arg(long, value_name = "URL", help_heading = "A fleet's digests")]
    pub from: Option<String>,
    /// The first minute read: a time ago (30m, 1h, 2d) or a UTC time (2026-11-30T04:00Z).
    #[arg(long, default_value = "1h", value_name = "WHEN", requires = "from", help_heading = "A fleet's digests")]
    pub since: String,
    /// The end of the minutes read (not included), as --since.
    #[arg(long, default_value = "now", value_name = "WHEN", requires = "from", help_heading = "A fleet's digests")]
    pub until: String,
    /// Only hosts whose name matches this glob (*, ?, [a-c], {a,b}).
    #[arg(long, value_name = "GLOB", requires = "from", help_heading = "A fleet's digests")]
    pub hosts: Option<String>,
    /// Fold each host's windows of each hour (of --since to --until, hours that ended at
    /// least an hour ago) into one file per host-hour, and delete the windows.
    #[arg(long, requires = "from", help_heading = "A fleet's digests")]
    pub compact: bool,
    /// Compare with an earlier window as long as --since to --until, starting at WHEN (a time
    /// ago or a UTC time): the classes whose time per execution or executions per minute
    /// changed, each with its 95% interval, and the classes new in the later window.
    #[arg(long, value_name = "WHEN", requires = "from", help_heading = "A fleet's digests")]
    pub compare_to: Option<String>,
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

impl FromArgs {
    /// The question the flags ask.
    pub fn question(&self, now: i64) -> Result<Question> {
        let since = parse_when(&self.since, now).map_err(|e| super::Usage(format!("--since {e}")))?;
        let until = parse_when(&self.until, now).map_err(|e| super::Usage(format!("--until {e}")))?;
        if until <= since {
            super::usage!("--until ({}) is not after --since ({})", self.until, self.since);
        }
        // 2000-01-01, and a year and a day: no fleet's digests are older,
        // and a longer question is a mistyped one.
        if since < 946_684_800 || until - since > 366 * 86_400 {
            super::usage!(
                "--since {} to --until {} is not a window pileup reads (from 2000 on, a year at most)",
                self.since,
                self.until
            );
        }
        // Rows are stamped with their minute's start: until now is until
        // the end of this minute.
        let until = if until == now { now - now.rem_euclid(60) + 60 } else { until };
        let hosts = match &self.hosts {
            Some(g) => Some(
                globset::Glob::new(g)
                    .map_err(|e| super::Usage(format!("--hosts '{g}' is not a glob: {}", e.kind())))?
                    .compile_matcher(),
            ),
            None => None,
        };
        Ok(Question { since, until, hosts })
    }
}

/// `pileup digest --from`: the window's report, with the earlier window's
/// changes when --compare-to is given.
pub fn run(a: &FromArgs, jobs: Option<usize>, view: View, targets: &[crate::output::Target]) -> Result<()> {
    if a.compact {
        return compact(a);
    }
    let url = a.from.as_deref().expect("--from given");
    let now = now();
    let q = a.question(now)?;
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let before = match &a.compare_to {
        Some(w) => {
            let since = parse_when(w, now).map_err(|e| super::Usage(format!("--compare-to {e}")))?;
            // As long as the window asked for (not its current minute's
            // rounding up).
            let asked = parse_when(&a.until, now).unwrap_or(q.until) - q.since;
            let b = Question { since, until: since + asked, hosts: q.hosts.clone() };
            if b.until > q.since {
                super::usage!("--compare-to {w}: the earlier window overlaps --since to --until");
            }
            Some(b)
        }
        None => None,
    };
    let m = read(url, &q, jobs, before.is_some())?;
    if m.digest.events == 0 {
        note!("note: {}: no rows of these minutes and hosts", m.digest.inputs.join(", "));
    }
    let changes = match &before {
        Some(b) => {
            let e = read(url, b, jobs, true)?;
            if e.digest.events == 0 {
                note!("note: {}: no rows in the earlier window", e.digest.inputs.join(", "));
            }
            // Executions per host-minute with rows: the later window's last
            // minutes, not shipped yet, and hosts that came or went do not
            // read as a change of rate.
            let minutes = |m: &Merged| m.hosts.hosts.values().map(|h| h.minutes.len()).sum::<usize>().max(1) as f64;
            let empty = Default::default();
            let classes = compare(
                e.samples.as_ref().unwrap_or(&empty),
                m.samples.as_ref().unwrap_or(&empty),
                (minutes(&e), minutes(&m)),
            );
            Some(Changes { before: (b.since, b.until), after: (q.since, q.until), classes })
        }
        None => None,
    };
    let report = DigestReport {
        digest: &m.digest,
        view,
        advice: None,
        indexes: None,
        hosts: Some(&m.hosts),
        changes: changes.as_ref(),
    };
    crate::output::emit(&report, targets, &Default::default())
}

/// The keys of the question's hours and hosts, with their sizes.
fn keys_of(remote: &pileup_store::Remote, prefix: &str, q: &Question) -> Result<Vec<(String, u64)>> {
    let mut keys = vec![];
    for hour in q.hours() {
        for (key, size) in remote.list_keys(&layout::hour_prefix(prefix, hour))? {
            if layout::host_of_key(&key).is_some_and(|h| q.wants_host(&h)) {
                keys.push((key, size));
            }
        }
    }
    Ok(keys)
}

/// Read and merge what the question needs: the keys of its hours'
/// partitions and hosts (compacted hours first, then the files they do not
/// hold), fetched 16 at a time and decoded on `jobs` threads, each merging
/// its files' rows (and keeping each class's rows when `samples`).
pub fn read(url: &str, q: &Question, jobs: usize, samples: bool) -> Result<Merged> {
    let url = pileup_store::StoreUrl::parse(url).context("--from")?;
    let remote = pileup_store::Remote::open(&url, &pileup_store::aws::from_env().context("--from")?)?;
    let keys = keys_of(&remote, &url.prefix, q)?;
    let (compact, windows): (Vec<_>, Vec<_>) = keys.into_iter().partition(|(k, _)| layout::is_compact(k));
    let mut bar = crate::output::Sink::new(false, Some("{spinner} reading [{bar:30}] {pos}/{len} files {msg}"));
    let total = (compact.len() + windows.len()) as u64;
    let mut done = 0u64;
    let fresh = || if samples { Merge::keeping_samples() } else { Merge::default() };
    let mut all = fresh();
    let mut read = 0;
    let mut bytes = 0;
    let mut held = std::collections::HashSet::new();
    for (i, group) in [compact, windows].into_iter().enumerate() {
        // The windows a compacted hour holds are not read again.
        let group: Vec<(String, u64)> = group.into_iter().filter(|(k, _)| i == 0 || !held.contains(k)).collect();
        let names: Vec<String> = group.iter().map(|(k, _)| k.clone()).collect();
        bytes += group.iter().map(|(_, n)| n).sum::<u64>();
        read += names.len();
        let (m, sources) = fetch_merge(&remote, &url, &names, q, jobs, fresh, |n| {
            done += n;
            bar.event(&pileup_output::Step { done, total: Some(total) });
        })?;
        all.join(m);
        held.extend(sources);
    }
    bar.finish();
    let what = format!("{} ({} files, {} hours)", url, read, q.hours().len());
    Ok(all.finish(vec![what], bytes))
}

/// Fetch `keys` and merge their rows on `jobs` threads: the merge and the
/// windows the compacted files among them hold.
fn fetch_merge(
    remote: &pileup_store::Remote,
    url: &pileup_store::StoreUrl,
    keys: &[String],
    q: &Question,
    jobs: usize,
    fresh: impl Fn() -> Merge + Sync,
    mut progress: impl FnMut(u64),
) -> Result<(Merge, Vec<String>)> {
    let (tx, rx) = mpsc::sync_channel::<(String, bytes::Bytes)>(jobs * 2);
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                s.spawn(|| -> Result<(Merge, Vec<String>)> {
                    let (mut m, mut held) = (fresh(), vec![]);
                    loop {
                        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok((key, data)) = next else { return Ok((m, held)) };
                        let (rows, meta) = file::read_with(data, None).with_context(|| url.url_of(&key))?;
                        held.extend(file::sources(&meta));
                        m.add(rows, q);
                    }
                })
            })
            .collect();
        // A worker gone has failed: its error is told below.
        let fetched = remote.get_each(keys, 16, |key, data| {
            progress(1);
            tx.send((key.to_string(), data)).is_ok()
        });
        drop(tx);
        let (mut all, mut held) = (fresh(), vec![]);
        for w in workers {
            match w.join() {
                Ok(r) => {
                    let (m, h) = r?;
                    all.join(m);
                    held.extend(h);
                }
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        fetched?;
        Ok((all, held))
    })
}

/// `pileup digest --from URL --compact`: each host's windows of each hour
/// that ended at least an hour ago, folded into one file per host-hour that
/// names them in its metadata; then the windows are deleted. A window that
/// comes later (a part logged late) is folded in by the next compaction,
/// and read beside the compacted file meanwhile.
pub fn compact(a: &FromArgs) -> Result<()> {
    let url = pileup_store::StoreUrl::parse(a.from.as_deref().expect("--from given")).context("--from")?;
    let q = a.question(now())?;
    let settled = now() - 3600;
    let hours: Vec<i64> = q.hours().into_iter().filter(|h| h + 3600 <= settled).collect();
    if hours.len() < q.hours().len() {
        note!("note: hours that ended less than an hour ago are left as they are (their windows may still come)");
    }
    let remote = pileup_store::Remote::open(&url, &pileup_store::aws::from_env().context("--from")?)?;
    let (mut groups, mut files, mut before, mut after) = (0u64, 0u64, 0u64, 0u64);
    for hour in hours {
        let hq = Question { since: hour, until: hour + 3600, hosts: q.hosts.clone() };
        let mut by_host: std::collections::BTreeMap<String, Vec<(String, u64)>> = Default::default();
        for (k, n) in keys_of(&remote, &url.prefix, &hq)? {
            by_host.entry(layout::host_of_key(&k).unwrap_or_default()).or_default().push((k, n));
        }
        for (host, keys) in by_host {
            let windows: Vec<&String> = keys.iter().map(|(k, _)| k).filter(|k| !layout::is_compact(k)).collect();
            if windows.is_empty() {
                continue;
            }
            // The compacted file first: the windows it names are already
            // in it (shipped again since), deleted without being folded in
            // twice.
            let (held, fresh): (Vec<String>, Vec<String>) =
                keys.iter().map(|(k, _)| k.clone()).partition(|k| layout::is_compact(k));
            let (mut rows, mut sources) = (vec![], std::collections::BTreeSet::new());
            fold_files(&remote, &url, &held, &mut rows, &mut sources)?;
            let fresh: Vec<String> = fresh.into_iter().filter(|k| !sources.contains(k)).collect();
            fold_files(&remote, &url, &fresh, &mut rows, &mut sources)?;
            let rows = pileup_digest::fleet::fold_rows(rows);
            let list = sources.into_iter().collect::<Vec<_>>().join("\n");
            let meta = vec![(file::SOURCES.to_string(), list)];
            let out = file::write_with(&rows, pileup_digest::fleet::Samples::Full, meta)?;
            after += out.len() as u64;
            remote.put(&layout::compact_key(&url.prefix, &host, hour), out)?;
            for k in windows {
                remote.delete(k)?;
            }
            groups += 1;
            files += keys.len() as u64;
            before += keys.iter().map(|(_, n)| n).sum::<u64>();
        }
    }
    note!(
        "compacted {} into {} ({} into {})",
        super::plural(files, "file", "files"),
        super::plural(groups, "host-hour", "host-hours"),
        indicatif::HumanBytes(before),
        indicatif::HumanBytes(after)
    );
    Ok(())
}

/// Fetch `keys` and add their rows to `rows`, and the windows they hold to
/// `sources` (a window's own key; a compacted file's list).
fn fold_files(
    remote: &pileup_store::Remote,
    url: &pileup_store::StoreUrl,
    keys: &[String],
    rows: &mut Vec<pileup_digest::fleet::Row>,
    sources: &mut std::collections::BTreeSet<String>,
) -> Result<()> {
    let mut failed = None;
    remote.get_each(keys, 16, |k, data| match file::read_with(data, None) {
        Ok((r, meta)) => {
            sources.extend(file::sources(&meta));
            if !layout::is_compact(k) {
                sources.insert(k.to_string());
            }
            rows.extend(r);
            true
        }
        Err(e) => {
            failed = Some(format!("{}: {e}", url.url_of(k)));
            false
        }
    })?;
    match failed {
        Some(f) => anyhow::bail!("{f}"),
        None => Ok(()),
    }
}
