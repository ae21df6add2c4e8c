//! pileup-replica: what pileup's replica tools (`prefetch`, `lag`) need to
//! know about a replica, each in its own module:
//!
//! * [`applier`]: where the SQL thread is (relay log file and position,
//!   lag) and where the relay logs live;
//! * [`backlog`]: the work in the relay log ahead of the applier (bytes
//!   and primary time), read from the relay log itself;
//! * [`schema`]: table definitions as the replica has them;
//! * [`statement`]: statement fingerprints and the table a write names;
//! * [`session`]: settings for sessions that read beside the applier and
//!   never hold it up;
//! * [`history`]: InnoDB's history list length (purge's backlog);
//! * [`device`]: what the datadir's device and the applier threads read
//!   and wrote (/proc);
//! * [`threads`]: which OS threads are the applier's and a connection's.

pub mod applier;
pub mod backlog;
pub mod device;
mod error;
pub mod history;
pub mod schema;
pub mod session;
pub mod statement;
pub mod threads;

pub use error::ReplicaError;
