//! pileup-prefetch: read a replica's relay log ahead of its SQL thread and
//! issue the reads its upcoming writes will need, so the pages are in the
//! buffer pool when the applier gets there.
//!
//! Data flow: relay log (pileup-binlog) → [`plan`] (row images → index keys,
//! using the table definitions from [`schema`]) → [`sql`] (batched,
//! index-only lookups) → fetch (a pool of readers on the replica).
//! With `--warm pages`, keys of integer indexes go instead through [`pages`]
//! (key → leaf page number, from the index's upper levels in its file) to
//! [`load`] (InnoDB's buffer pool load reads those pages, latching no index).
//! Beside it, [`purge`] can hold InnoDB's purge off while the replica lags.

pub mod load;
pub mod pages;
pub mod plan;
pub mod purge;
pub mod run;
pub mod sql;
pub mod stmt;
