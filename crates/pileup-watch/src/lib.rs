//! `pileup-watch`: the per-second flight recorder behind `pileup watch`
//! and `pileup top`.
//!
//! Data flow, one module per step:
//!
//! ```text
//! poll ─▶ store ─▶ derive ─▶ trigger ─▶ capture ─▶ report
//!                    └─▶ expo (Prometheus), top (terminal view)
//! ```
//!
//! [`poll`] takes one round of raw values from the server and the OS;
//! [`store`] keeps the history in SQLite; [`derive`] turns two snapshots
//! into rates, gauges and read-workload ratios; [`trigger`]
//! evaluates stall conditions with a hold time; [`capture`] gathers the
//! evidence while a stall lasts and [`report`] writes it up as one HTML
//! file; [`watch`] is the loop that ties them together. [`derive`] and
//! [`trigger`] are pure functions of their inputs, tested without a server.

// Query rows are read as tuples of their column types; naming each one
// would only restate the SELECT next to it.
#![allow(clippy::type_complexity)]

pub mod capture;
pub mod capture_dir;
pub mod derive;
pub mod expo;
pub mod poll;
pub mod report;
pub mod schedule;
pub mod store;
pub mod top;
pub mod trigger;
pub mod verdict;
pub mod watch;
