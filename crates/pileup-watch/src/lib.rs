//! `pileup-watch`: the per-second flight recorder behind `pileup watch`
//! and `pileup top`.
//!
//! Data flow, one module per step:
//!
//! ```text
//! scan ─┐
//! poll ─▶ derive ─▶ store ─▶ trigger ─▶ decide ─▶ schedule ─▶ capture ─▶ verdict (holder, classes) ─▶ capture_dir ─▶ report
//!   ▲       └─▶ expo (Prometheus), top (terminal view)
//!   └── pace (when the next poll starts)
//! ```
//!
//! [`poll`] takes one round of raw values from the server and the OS, when
//! [`pace`] says (every interval, faster while the [`scan`] of thread
//! states stirs or a trigger's condition awaits its hold);
//! [`derive`](mod@crate::derive) turns two snapshots into rates, gauges and read-workload
//! ratios; [`store`] keeps the history in SQLite; [`trigger`] evaluates
//! stall conditions with a hold time; [`decide`] turns them and the scan's
//! pulses into captures begun, kept or dropped and short stalls recorded; [`schedule`] says when a capture may
//! run; [`capture`] gathers the evidence while a stall lasts, [`verdict`]
//! names the likely culprit ([`holder`]: who holds the lock a pile-up
//! waits for, exact or inferred; [`classes`]: the stall classes without one
//! lock holder, from counters, stacks and the processlist), [`capture_dir`] writes the capture's files
//! (and reads them back), and [`report`] renders them as text and one
//! HTML file; [`watch`] is the loop that ties them together. [`derive`](mod@crate::derive),
//! [`trigger`], [`decide`], [`pace`], [`schedule`], [`verdict`], [`holder`] and [`classes`] are pure functions or objects
//! of their inputs, tested without a server.

// Query rows are read as tuples of their column types; naming each one
// would only restate the SELECT next to it.
#![allow(clippy::type_complexity)]

pub mod capture;
pub mod capture_dir;
pub mod classes;
pub mod decide;
pub mod derive;
mod error;
pub mod evidence;
pub mod expo;
pub mod holder;
pub mod last_statement;
pub mod listing;
pub mod narrate;
pub mod pace;
pub mod poll;
pub mod profiles;
pub mod report;
pub mod scan;
pub mod schedule;
pub mod store;
pub mod tls;
pub mod top;
pub mod trigger;
pub mod verdict;
pub mod watch;
pub mod web;

pub use error::WatchError;
