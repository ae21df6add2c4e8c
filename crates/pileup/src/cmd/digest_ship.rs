//! `pileup digest --ship`: each window of per-minute classes as a Parquet
//! file, queued on local disk and shipped to the store.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use pileup_digest::fleet::{self, layout, window::Window, Samples};
use pileup_store::{FileArtifact, ShipEvent, Shipper};

/// The flags of `pileup digest --ship`.
#[derive(clap::Args, Debug)]
pub struct ShipArgs {
    /// Ship per-minute digests to an S3-compatible store, s3://BUCKET[/PREFIX] (credentials,
    /// region and endpoint as for the AWS CLI): one row per class per minute, one Parquet file
    /// per --ship-window under PREFIX/dt=DAY/hour=HH/host=NAME/. With --follow, each window
    /// once it is complete; else every window at the end.
    #[arg(long, value_name = "URL", help_heading = "Shipping")]
    pub ship: Option<String>,
    /// The host name the rows and files carry [default: this machine's name].
    #[arg(long, value_name = "NAME", requires = "ship", help_heading = "Shipping")]
    pub ship_host: Option<String>,
    /// A label every row carries (repeatable): environment, cluster, role…
    #[arg(long, value_name = "KEY=VALUE", requires = "ship", value_parser = parse_label, help_heading = "Shipping")]
    pub label: Vec<(String, String)>,
    /// Each class's sample statement as shipped: none, redacted (literals replaced by ?,
    /// comments dropped) or full. Literals can be personal data. Cut at 1 KiB.
    #[arg(long, default_value = "redacted", value_parser = ["none", "redacted", "full"], requires = "ship", help_heading = "Shipping")]
    pub samples: String,
    /// Minutes each shipped file holds, aligned on the hour: 1, 2, 3, 4, 5, 6, 10, 12, 15, 20,
    /// 30 or 60.
    #[arg(long, default_value_t = 10, value_name = "MINUTES", requires = "ship", help_heading = "Shipping")]
    pub ship_window: u32,
    /// With --follow, a window is shipped this long after it ends: statements are logged when
    /// they end, stamped with when they began. Later ones go in a part file of their own.
    #[arg(long, default_value = "2m", value_name = "DURATION", value_parser = super::parse_duration, requires = "ship", help_heading = "Shipping")]
    pub ship_grace: Duration,
    /// At the end, wait this long at most for the store to take every queued file; what it
    /// has not taken waits in the queue for the next run.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = super::parse_duration, requires = "ship", help_heading = "Shipping")]
    pub ship_wait: Duration,
    /// Where files wait for the store [default: $PILEUP_DATA_DIR/digest-ship, else
    /// ~/.local/state/pileup/digest-ship].
    #[arg(long, value_name = "DIR", requires = "ship", help_heading = "Shipping")]
    pub spool_dir: Option<PathBuf>,
    /// Queue nothing that would leave less than this free where files wait (MiB).
    #[arg(long, default_value_t = 1024, value_name = "MIB", requires = "ship", help_heading = "Shipping")]
    pub min_free_mib: u64,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("'{s}' is not KEY=VALUE"))?;
    let ok =
        !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') && !k.as_bytes()[0].is_ascii_digit();
    if !ok {
        return Err(format!("'{k}' is not a label name: letters, digits and _, not starting with a digit"));
    }
    Ok((k.to_string(), v.to_string()))
}

impl ShipArgs {
    /// The checks clap does not make.
    pub fn check(&self) -> Result<()> {
        if let Some(u) = &self.ship {
            pileup_store::StoreUrl::parse(u).map_err(|e| super::Usage(format!("--ship {e}")))?;
            if layout::window_minutes(self.ship_window) != self.ship_window {
                super::usage!(
                    "--ship-window {} does not divide the hour: use 1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60",
                    self.ship_window
                );
            }
            let mut seen = std::collections::HashSet::new();
            if let Some((k, _)) = self.label.iter().find(|(k, _)| !seen.insert(k)) {
                super::usage!("--label {k} is given twice");
            }
        }
        Ok(())
    }

    /// How the digest hands over its windows, when shipping.
    pub fn windows(&self) -> Option<pileup_digest::WindowOptions> {
        self.ship.as_ref().map(|_| pileup_digest::WindowOptions {
            minutes: self.ship_window,
            grace_s: self.ship_grace.as_secs() as i64,
        })
    }
}

/// What the shipper has done, as its thread tells it.
#[derive(Default)]
struct Tally {
    queued_bytes: HashMap<String, u64>,
    shipped: u64,
    shipped_bytes: u64,
    last_error: Option<String>,
    /// Windows the queue refused (the disk guard): not kept.
    not_queued: Vec<String>,
    /// The store refused to delete what a window replaces (said once).
    not_replaced: bool,
}

/// The shipping half of a digest run.
pub struct Shipping {
    shipper: Shipper,
    url: String,
    spool: PathBuf,
    host: String,
    labels: Vec<(String, String)>,
    samples: Samples,
    window_minutes: u32,
    wait: Duration,
    tally: Arc<Mutex<Tally>>,
    /// Windows that could not be written (never expected: a bug).
    failed: Vec<String>,
}

impl Shipping {
    /// Start the shipper when --ship is given.
    pub fn start(a: &ShipArgs) -> Result<Option<Shipping>> {
        let Some(u) = &a.ship else { return Ok(None) };
        let url = pileup_store::StoreUrl::parse(u).context("--ship")?;
        let spool = a.spool_dir.clone().unwrap_or_else(|| super::watch::default_data_dir().join("digest-ship"));
        let host = a.ship_host.clone().unwrap_or_else(super::watch::this_host);
        let o = pileup_store::ship::ShipOptions {
            url: url.clone(),
            aws: pileup_store::aws::from_env().context("--ship")?,
            spool_dir: spool.clone(),
            host: host.clone(),
            min_free: a.min_free_mib << 20,
            holds: Some(pileup_store::ship::Holds(std::sync::Arc::new(compacted_holds))),
        };
        let tally = Arc::new(Mutex::new(Tally::default()));
        let t = tally.clone();
        let shipper = Shipper::start(o, move |e| on_event(&t, e))?;
        let samples = match a.samples.as_str() {
            "none" => Samples::None,
            "full" => Samples::Full,
            _ => Samples::Redacted,
        };
        Ok(Some(Shipping {
            shipper,
            url: url.to_string(),
            spool,
            host,
            labels: a.label.clone(),
            samples,
            window_minutes: a.ship_window,
            wait: a.ship_wait,
            tally,
            failed: vec![],
        }))
    }

    /// Queue a window's file.
    pub fn window(&mut self, w: Window) {
        let rows = fleet::rows_of(w.minutes, &self.host, &self.labels);
        let key = layout::piece_key("", &self.host, w.start, self.window_minutes, w.from, w.part);
        match fleet::file::write(&rows, self.samples) {
            Ok(bytes) => {
                let file = key.rsplit('/').next().unwrap_or(&key);
                let name = file.strip_suffix(".parquet").unwrap_or(file).to_string();
                self.shipper.enqueue_file(FileArtifact {
                    name,
                    ext: "parquet".into(),
                    bytes,
                    key,
                    unix: w.start as f64,
                    metadata: Default::default(),
                    // A log's window holds every row this run read for it:
                    // the later parts an earlier run shipped (the same log
                    // digested again) would count twice. Not when a
                    // compacted file of the hour holds the window
                    // (`compacted_holds`): readers keep that one, and this
                    // one's rows are not read beside it.
                    supersedes: w.replaces.then(|| pileup_store::Supersedes {
                        prefix: layout::parts_prefix("", &self.host, w.start, self.window_minutes),
                        unless: Some(format!("{}compact-", layout::hour_prefix("", w.start))),
                    }),
                })
            }
            Err(e) => self.failed.push(format!("{key}: {e}")),
        }
    }

    /// Wait for the store to take what is queued (at most --ship-wait);
    /// an error when something is left.
    pub fn finish(self) -> Result<()> {
        if let Some(f) = self.failed.first() {
            anyhow::bail!("{} could not be written: {f}", super::plural(self.failed.len(), "window", "windows"));
        }
        let left = self.shipper.drain(self.wait);
        let t = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        if t.shipped > 0 {
            note!(
                "shipped {} ({}) to {}",
                super::plural(t.shipped, "file", "files"),
                indicatif::HumanBytes(t.shipped_bytes),
                self.url
            );
        }
        if let Some(first) = t.not_queued.first() {
            anyhow::bail!(
                "{} not queued for the store, the first {first} (the warnings say why); the report is written",
                super::plural(t.not_queued.len(), "window was", "windows were")
            );
        }
        if left > 0 {
            let why = t.last_error.as_deref().unwrap_or("the store did not answer in time");
            anyhow::bail!(
                "{} wait in {} for the store ({why}); the next `pileup digest --ship` sends them first",
                super::plural(left, "file", "files"),
                self.spool.display()
            );
        }
        Ok(())
    }
}

/// Whether the compacted hour at `compact` holds the window at `window`
/// (its metadata names the windows it holds): a window shipped again
/// after its hour was compacted is not read beside the compacted file, so
/// the parts shipped for it must stay.
fn compacted_holds(remote: &pileup_store::Remote, compact: &str, window: &str) -> pileup_store::Result<bool> {
    // A compacted file that cannot be read holds nothing a reader would
    // count: the parts go as for an hour not compacted.
    let mut held = false;
    remote.get_each(&[compact.to_string()], 1, |key, data| {
        held = fleet::file::Opened::open(data).is_ok_and(|f| f.sources(key).iter().any(|k| k == window));
        false
    })?;
    Ok(held)
}

/// The shipper's events: counted; a failure said once per message.
fn on_event(t: &Mutex<Tally>, e: ShipEvent) {
    let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
    match e {
        ShipEvent::Queued { capture_dir, bytes, .. } => {
            t.queued_bytes.insert(capture_dir, bytes);
        }
        ShipEvent::Shipped { capture_dir, .. } => {
            t.shipped += 1;
            let name = capture_dir.rsplit('/').next().unwrap_or(&capture_dir).to_string();
            t.shipped_bytes += t.queued_bytes.remove(&name).unwrap_or(0);
            t.last_error = None;
        }
        ShipEvent::NotQueued { capture_dir, error } => {
            note!("warning: {capture_dir} not shipped: {error}");
            t.not_queued.push(capture_dir);
        }
        ShipEvent::NotReplaced { capture_dir, error } => {
            if !t.not_replaced {
                note!(
                    "warning: {capture_dir} shipped, but the late parts an earlier run may have shipped for its window \
                     were not deleted, and would count twice ({error}); the credentials need to list and delete \
                     under the prefix (said once)"
                );
            }
            t.not_replaced = true;
        }
        ShipEvent::Failed { error, queued, retry_in_s } => {
            if t.last_error.as_deref() != Some(error.as_str()) {
                note!("warning: shipping: {error}; {queued} queued, tried again in {retry_in_s} s and on");
            }
            t.last_error = Some(error);
        }
    }
}

/// The digest's sink while shipping: progress to the terminal's bar,
/// windows to the shipper.
pub struct Sink<'a> {
    pub bar: &'a mut crate::output::Sink,
    pub ship: Option<&'a mut Shipping>,
}

impl pileup_digest::Sink for Sink<'_> {
    fn progress(&mut self, done: u64, total: Option<u64>) {
        self.bar.event(&pileup_output::Step { done, total })
    }

    fn window(&mut self, w: Window) {
        if let Some(s) = self.ship.as_mut() {
            s.window(w);
        }
    }

    fn note(&mut self, line: &str) {
        note!("note: {line}");
    }
}
