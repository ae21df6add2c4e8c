//! pileup-prefetch: read a replica's relay log ahead of its SQL thread and
//! issue the reads its upcoming writes will need, so the pages are in the
//! buffer pool when the applier gets there.
//!
//! Data flow: relay log (pileup-binlog) → [`plan`] (row images → index keys,
//! using the table definitions from [`schema`]) → [`sql`] (batched,
//! index-only lookups) → fetch (a pool of readers on the replica).
//! Beside it, [`purge`] can hold InnoDB's purge off while the replica lags.

pub mod plan;
pub mod purge;
pub mod replica;
pub mod run;
pub mod schema;
pub mod sql;
pub mod stmt;
