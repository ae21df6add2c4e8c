//! Captures and digests in an S3-compatible object store.
//!
//! Data flow: [`aws`] resolves credentials, region and endpoint the way the
//! AWS CLI does; [`pack`] turns a capture directory into one `.tar.zst`
//! archive with its SHA-256; [`spool`] queues archives, and files shipped
//! as they are (a digest's Parquet windows), on local disk with their
//! metadata and upload state; [`remote`] puts them (multipart and
//! resumable across restarts for large ones), lists and fetches them;
//! [`ship`] is the background shipper `pileup watch --ship` and
//! `pileup digest --ship` run, which never blocks the caller and reports
//! through a callback.
//!
//! Captures are named `PREFIX/HOST/CAPTURE.tar.zst`, with user metadata
//! `host`, `class`, `verdict`, `unix` and `sha256`; files by the caller's
//! key under `PREFIX`, with `host`, `unix` and `sha256`.

pub mod aws;
mod error;
pub mod pack;
pub mod remote;
pub mod ship;
pub mod spool;
pub mod url;

pub use aws::AwsSettings;
pub use remote::{Remote, RemoteCapture};
pub use ship::{FileArtifact, ShipEvent, Shipper, Supersedes};
pub use spool::{Queued, Spool};
pub use url::StoreUrl;

pub use error::{Result, StoreError};
pub use spool::COMPLETE;
