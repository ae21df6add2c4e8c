//! pileup-prefetch: read a replica's relay log ahead of its SQL thread and
//! issue the reads its upcoming writes will need, so the pages are in the
//! buffer pool when the applier gets there.
//!
//! Data flow, one room per stage:
//! [`gate`] (whether there is work ahead of the applier, from the relay
//! log itself) → [`relay`] (follow the relay log from the applier's
//! position) →
//! [`window`] (the events read ahead and not yet applied, and the limits
//! on how far ahead) → [`plan`] (an event → index keys and statement reads,
//! a pure function of the event and the table definitions) →
//! [`readers`] (batched index-only lookups, [`sql`], on a pool of
//! connections) or, with `--warm pages`, [`page_warmer`] (key → leaf page
//! number from the index's upper levels, [`pages`], read by InnoDB's buffer
//! pool load, [`load`]). [`progress`] tells the workers where the applier
//! is; [`metrics`] counts what each stage did, and [`reads`] whose page
//! reads the applier's were. Beside them, [`purge`] can
//! hold InnoDB's purge off while the replica lags. [`run`] ties them
//! together.

mod config;
mod error;
pub mod gate;
pub mod load;
pub mod metrics;
pub mod news;
pub mod page_warmer;
pub mod pages;
pub mod plan;
pub mod progress;
pub mod purge;
pub mod readers;
pub mod reads;
pub mod relay;
pub mod run;
pub mod sql;
pub mod window;

pub use config::{Options, Say, Shared, Warm};
pub use error::PrefetchError;
pub use metrics::{reader_advice, Counters};
pub use run::run;
