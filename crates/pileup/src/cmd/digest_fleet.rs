//! `pileup digest --from`: a fleet's shipped per-minute digests, read from
//! the store (only the hours and hosts the question names) and merged into
//! one report with the hosts as a dimension.

use std::sync::mpsc;
use std::sync::Mutex;

use anyhow::{Context, Result};
use pileup_digest::fleet::compare::{compare, Changes};
use pileup_digest::fleet::merge::{parse_when, Merge, Merged, Question};
use pileup_digest::fleet::rows::Keep;
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
    /// Fold the windows of each hour (of --since to --until, hours that ended at least an hour
    /// ago) of every host into one file for the hour, and delete the windows. Counts and sums
    /// stay per minute; the statement-time histogram is kept per host, class and hour.
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
    let read_of = if view.profile_only { Read::Profile(view.rank) } else { Read::All };
    let m = read(url, &q, jobs, Want { read: read_of, rates: before.is_some() })?;
    if m.digest.events == 0 {
        note!("note: {}: no rows of these minutes and hosts", m.digest.inputs.join(", "));
    }
    let changes = match &before {
        Some(b) => {
            let e = read(url, b, jobs, Want { read: Read::Rates, rates: true })?;
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

/// What a read is for: the columns it reads, and whether each class's
/// rows are kept for a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub read: Read,
    pub rates: bool,
}

/// The stored columns a read decodes (beyond the minute, host,
/// fingerprint and count every read needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The whole report's: every column.
    All,
    /// The profile alone's, ranked so (`--profile-only`).
    Profile(pileup_digest::rank::Rank),
    /// A comparison's earlier window: each row's statement time.
    Rates,
}

/// The keys of the question's hours and hosts, with their sizes.
fn keys_of(remote: &pileup_store::Remote, prefix: &str, q: &Question) -> Result<Vec<(String, u64)>> {
    let mut keys = vec![];
    for hour in q.hours() {
        for (key, size) in remote.list_keys(&layout::hour_prefix(prefix, hour))? {
            if layout::is_compact(&key) || layout::host_of_key(&key).is_some_and(|h| q.wants_host(&h)) {
                keys.push((key, size));
            }
        }
    }
    Ok(keys)
}

/// Read and merge what the question needs: the keys of its hours'
/// partitions and hosts (compacted hours first, then the files they do not
/// hold), fetched 16 at a time and decoded on `jobs` threads, each merging
/// its files' rows (and keeping each class's rows, as `want` says).
pub fn read(url: &str, q: &Question, jobs: usize, want: Want) -> Result<Merged> {
    let samples = want.rates;
    let columns: Option<Vec<String>> = match want.read {
        Read::All => None,
        Read::Profile(rank) => Some(file::profile_columns(rank)),
        Read::Rates => Some(vec!["query_time_n".into(), "query_time_sum".into()]),
    };
    let columns: Option<Vec<&str>> = columns.as_ref().map(|c| c.iter().map(String::as_str).collect());
    let columns = columns.as_deref();
    let url = pileup_store::StoreUrl::parse(url).context("--from")?;
    let remote = pileup_store::Remote::open(&url, &pileup_store::aws::from_env().context("--from")?)?;
    let keys = keys_of(&remote, &url.prefix, q)?;
    let (compact, windows): (Vec<_>, Vec<_>) = keys.into_iter().partition(|(k, _)| layout::is_compact(k));
    let mut bar = crate::output::Sink::new(false, Some("{spinner} reading [{bar:30}] {pos}/{len} files {msg}"));
    let total = (compact.len() + windows.len()) as u64;
    let mut done = 0u64;
    let keep = match want.read {
        Read::All => Keep::default(),
        Read::Profile(rank) => file::profile_keep(rank),
        Read::Rates => Keep { flags: Default::default(), series: false, labels: false },
    };
    let fresh = || if samples { Merge::keeping_samples() } else { Merge::default() }.keeping(keep);
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
        let (m, sources) = fetch_merge(&remote, &url, &names, (q, columns), jobs, fresh, |n| {
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
/// windows the compacted files among them hold. A file of several row
/// groups (a compacted hour) is read a row group per thread.
fn fetch_merge(
    remote: &pileup_store::Remote,
    url: &pileup_store::StoreUrl,
    keys: &[String],
    (q, columns): (&Question, Option<&[&str]>),
    jobs: usize,
    fresh: impl Fn() -> Merge + Sync,
    mut progress: impl FnMut(u64),
) -> Result<(Merge, Vec<String>)> {
    let (tx, rx) = mpsc::sync_channel::<(String, bytes::Bytes)>(jobs * 2);
    let rx = Mutex::new(rx);
    // Row groups after the first of files already opened.
    let groups: Mutex<Vec<(String, file::Opened, usize)>> = Mutex::new(vec![]);
    let read = |key: &str, f: &file::Opened, group: Option<usize>, m: &mut Merge| {
        f.batches(columns, group, |b| m.add_batch(b, q)).with_context(|| url.url_of(key))
    };
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                s.spawn(|| -> Result<(Merge, Vec<String>)> {
                    let (mut m, mut held) = (fresh(), vec![]);
                    loop {
                        if let Some((key, f, g)) = groups.lock().unwrap_or_else(|e| e.into_inner()).pop() {
                            read(&key, &f, Some(g), &mut m)?;
                            continue;
                        }
                        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok((key, data)) = next else {
                            if groups.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                                return Ok((m, held));
                            }
                            continue;
                        };
                        let f = file::Opened::open(data).with_context(|| url.url_of(&key))?;
                        held.extend(f.sources(&key));
                        let n = f.row_groups();
                        if n > 1 {
                            let mut g = groups.lock().unwrap_or_else(|e| e.into_inner());
                            g.extend((1..n).map(|i| (key.clone(), f.clone(), i)));
                        }
                        read(&key, &f, (n > 1).then_some(0), &mut m)?;
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

/// `pileup digest --from URL --compact`: the windows of each hour that
/// ended at least an hour ago, of every host (or those of --hosts), folded
/// into one file for the hour that names them in its metadata; then the
/// windows are deleted. Windows that come later (a part logged late) are
/// folded by the next compaction into a file of their own beside it
/// (`compact-…-2.parquet`).
pub fn compact(a: &FromArgs) -> Result<()> {
    let url = pileup_store::StoreUrl::parse(a.from.as_deref().expect("--from given")).context("--from")?;
    let q = a.question(now())?;
    let settled = now() - 3600;
    let hours: Vec<i64> = q.hours().into_iter().filter(|h| h + 3600 <= settled).collect();
    if hours.len() < q.hours().len() {
        note!("note: hours that ended less than an hour ago are left as they are (their windows may still come)");
    }
    let remote = pileup_store::Remote::open(&url, &pileup_store::aws::from_env().context("--from")?)?;
    let (mut made, mut files, mut before, mut after) = (0u64, 0u64, 0u64, 0u64);
    for hour in hours {
        let hq = Question { since: hour, until: hour + 3600, hosts: q.hosts.clone() };
        let (done, windows): (Vec<_>, Vec<_>) =
            keys_of(&remote, &url.prefix, &hq)?.into_iter().partition(|(k, _)| layout::is_compact(k));
        if windows.is_empty() {
            continue;
        }
        // The windows the hour's compacted files hold already (shipped
        // again since) are deleted without being folded in twice.
        let mut held = std::collections::HashSet::new();
        let names: Vec<String> = done.iter().map(|(k, _)| k.clone()).collect();
        each_file(&remote, &url, &names, |k, f| {
            held.extend(f.sources(k));
            Ok(())
        })?;
        let (again, fresh): (Vec<_>, Vec<_>) = windows.into_iter().partition(|(k, _)| held.contains(k));
        if !fresh.is_empty() {
            let key = layout::compact_key(&url.prefix, hour, done.len() as u32);
            let out = fold_hour(&remote, &url, &key, &fresh)?;
            after += out.len() as u64;
            remote.put(&key, out)?;
            made += 1;
        }
        for (k, _) in fresh.iter().chain(&again) {
            remote.delete(k)?;
        }
        files += (fresh.len() + again.len()) as u64;
        before += fresh.iter().chain(&again).map(|(_, n)| n).sum::<u64>();
    }
    note!(
        "compacted {} into {} ({} into {})",
        super::plural(files, "file", "files"),
        super::plural(made, "hour", "hours"),
        indicatif::HumanBytes(before),
        indicatif::HumanBytes(after)
    );
    Ok(())
}

/// Hosts whose windows are folded at once: a compacted hour of any fleet
/// is made in bounded memory.
const HOSTS_AT_ONCE: usize = 64;

/// The windows `fresh` of one hour as one compacted file `key`: each
/// host's rows of a minute and class folded, its distributions kept per
/// class for the hour ([`pileup_digest::fleet::hourly_histograms`]), rows
/// by host, class and minute.
fn fold_hour(
    remote: &pileup_store::Remote,
    url: &pileup_store::StoreUrl,
    key: &str,
    fresh: &[(String, u64)],
) -> Result<Vec<u8>> {
    let mut by_host: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (k, _) in fresh {
        by_host.entry(layout::host_of_key(k).unwrap_or_default()).or_default().push(k.clone());
    }
    let list: Vec<&str> = fresh.iter().map(|(k, _)| layout::relative(key, k)).collect();
    let meta = vec![(file::SOURCES.to_string(), list.join("\n"))];
    let mut w = file::Writer::new(pileup_digest::fleet::Samples::Full, meta, file::Codec::Zstd)?;
    let hosts: Vec<Vec<String>> = by_host.into_values().collect();
    for group in hosts.chunks(HOSTS_AT_ONCE) {
        let keys: Vec<String> = group.iter().flatten().cloned().collect();
        let mut rows = vec![];
        each_file(remote, url, &keys, |_, f| f.read(None, None, |r| rows.extend(r)))?;
        let mut rows = pileup_digest::fleet::fold_rows(rows);
        pileup_digest::fleet::hourly_histograms(&mut rows);
        rows.sort_by(|a, b| (&a.host, &a.class.fingerprint, a.minute).cmp(&(&b.host, &b.class.fingerprint, b.minute)));
        w.write(&rows)?;
    }
    Ok(w.finish()?)
}

/// Fetch `keys`, 16 at a time, and hand each file, opened, to `each`;
/// the first failure is the error, naming the file.
fn each_file(
    remote: &pileup_store::Remote,
    url: &pileup_store::StoreUrl,
    keys: &[String],
    mut each: impl FnMut(&str, file::Opened) -> Result<(), pileup_digest::Error>,
) -> Result<()> {
    let mut failed = None;
    remote.get_each(keys, 16, |k, data| match file::Opened::open(data).and_then(|f| each(k, f)) {
        Ok(()) => true,
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
