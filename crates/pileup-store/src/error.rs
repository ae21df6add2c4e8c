//! The crate's one error type.

/// What can go wrong; every message is one line naming the problem and,
/// where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} is not an object store URL: give s3://BUCKET[/PREFIX]")]
    BadUrl(String),
    #[error("{file}: {why}")]
    Config { file: String, why: String },
    #[error("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with a profile in ~/.aws/credentials")]
    NoCredentials,
    #[error("the AWS profile {0} is in neither ~/.aws/credentials nor ~/.aws/config")]
    NoProfile(String),
    #[error("{url}: the store refused the credentials ({why}); check AWS_ACCESS_KEY_ID / AWS_PROFILE")]
    Denied { url: String, why: String },
    #[error("{url}: {why}")]
    Store { url: String, why: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(
        "{0}: the archive's SHA-256 does not match the one it was stored with (damaged in the store or on the way)"
    )]
    Checksum(String),
    #[error("{0}: not a pileup capture archive")]
    NotACapture(String),
    #[error("{0}: the capture was cut short (it has no complete.json): not queued for the store")]
    Incomplete(String),
    #[error("{0}: another pileup ships from this queue (each needs its own: give --spool-dir)")]
    SpoolBusy(String),
    #[error(transparent)]
    File(#[from] pileup_files::FileError),
    #[error("{dir}: {free} bytes free, and queueing needs {need} while keeping {min_free} free: not queued for the store ({kept}; free space or lower --min-free-mib)")]
    DiskLow { dir: String, free: u64, need: u64, min_free: u64, kept: &'static str },
}

pub type Result<T> = std::result::Result<T, StoreError>;

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.display().to_string(), source }
}
