//! `pileup bench`: small, sharp experiments on a MariaDB server (beside
//! PostgreSQL where the question is a comparison), each a curve of
//! throughput against client threads, with the profile that explains it.
//!
//! Data flow:
//!
//! ```text
//! target (the servers; refusal unless a sandbox)
//!   → experiments (schema and data; the curves' variants and their clients)
//!   → drive (threads × rounds: throughput, latency, driver and server CPU)
//!   → knee (where each curve bends, its shape, CPU-bound points)
//!   → profile (at the knee: the server's stacks, and its lock waits
//!              through the caller's profiler)
//!   → why (what the profile says, in sentences)
//!   → report (text, JSON) · plot (SVG) · compare (two JSON results)
//! ```
//!
//! The library prints nothing: progress goes to a [`Sink`], and the lock
//! profile comes from a [`LockProfiler`] the caller provides (pileup's
//! `locks` tool, wired by the CLI).

pub mod compare;
pub mod drive;
mod error;
pub mod experiments;
pub mod knee;
mod name;
mod options;
pub mod output;
pub mod plot;
pub mod profile;
pub mod recovery;
pub mod report;
pub mod syscalls;
pub mod target;
pub mod why;
mod words;

pub use error::{ExperimentError, Result};
pub use name::Name;
pub use options::{Event, Options, Sink};
pub use profile::{LockProfiler, LockSummary};
pub use report::{ExperimentReport, Point, Series};
pub use target::SCHEMA;
