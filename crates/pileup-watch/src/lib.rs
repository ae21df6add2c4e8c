//! `pileup-watch`: the per-second flight recorder (work in progress).
//!
//! Data flow, one module per step:
//!
//! ```text
//! poll ─▶ store ─▶ derive ─▶ trigger ─▶ capture ─▶ report
//! ```
//!
//! Built so far: [`derive`] (raw status counters → rates, gauges and the
//! seeds' read-workload ratios) and [`trigger`] (stall conditions as small
//! expressions, evaluated with a "for DURATION" hold). Both are pure
//! functions of their inputs and tested without a server.

pub mod capture;
pub mod derive;
pub mod expo;
pub mod poll;
pub mod report;
pub mod store;
pub mod top;
pub mod trigger;
pub mod watch;
