//! What can stop `watch`, `top`, `captures` and `report`, in their terms.

use std::path::PathBuf;

/// Why watching, or reading what it kept, failed.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("creating {}: {source}", path.display())]
    Create { path: PathBuf, source: std::io::Error },
    /// A directory could not be made: `file`, it or one above it, is a file.
    #[error("{}: {} is a file, not a directory; give a directory (it is created where it is missing)", dir.display(), file.display())]
    NotADirectory { dir: PathBuf, file: PathBuf },
    #[error("the metric store {}: {source}", path.display())]
    Store { path: PathBuf, source: rusqlite::Error },
    #[error("the metric store: {0}")]
    Query(#[from] rusqlite::Error),
    #[error("another pileup watch{who} is writing {}; stop it or give this one its own data directory", dir.display())]
    InUse { who: String, dir: PathBuf },
    #[error("the data directory {} holds the history of {held}, not {server}; give each server its own data directory", dir.display())]
    OtherServer { dir: PathBuf, held: String, server: String },
    #[error("cannot listen on {addr} ({why}); is the address in use, or not HOST:PORT?")]
    Listen { addr: String, why: String },
    #[error("--web.config.file {0}")]
    WebConfig(String),
    #[error("metadata_lock_info is a MariaDB plugin; on MySQL turn on performance_schema's wait/lock/metadata/sql/mdl instrument instead")]
    PluginIsMariadbs,
    #[error(
        "cannot install metadata_lock_info ({0}); connect as a user with INSERT on mysql.plugin, or do without it"
    )]
    PluginRefused(pileup_conn::SqlError),
    #[error("{}: not a pileup capture (no evidence.json)", .0.display())]
    NotACapture(PathBuf),
    #[error("{}: evidence.json is damaged ({source})", path.display())]
    Damaged { path: PathBuf, source: serde_json::Error },
    #[error("{what}: {source}")]
    Sql { what: &'static str, source: pileup_conn::SqlError },
    #[error(transparent)]
    Connect(#[from] pileup_conn::ConnError),
    #[error(transparent)]
    File(#[from] pileup_files::FileError),
    #[error(transparent)]
    Output(#[from] pileup_output::OutputError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Fmt(#[from] std::fmt::Error),
    #[error(transparent)]
    ObjectStore(#[from] pileup_store::StoreError),
}

impl From<mysql::Error> for WatchError {
    fn from(e: mysql::Error) -> WatchError {
        WatchError::Sql { what: "querying the server", source: e.into() }
    }
}

impl From<pileup_conn::SqlError> for WatchError {
    fn from(source: pileup_conn::SqlError) -> WatchError {
        WatchError::Sql { what: "asking the server", source }
    }
}

impl WatchError {
    /// `dir` could not be created: a file in its place, or in the place of
    /// a directory above it, is named as that; any other cause as it is.
    pub fn creating_dir(dir: &std::path::Path, source: std::io::Error) -> WatchError {
        match dir.ancestors().find(|p| p.exists()).filter(|p| !p.is_dir()) {
            Some(file) => WatchError::NotADirectory { dir: dir.into(), file: file.into() },
            None => WatchError::Create { path: dir.into(), source },
        }
    }
}

pub type Result<T, E = WatchError> = std::result::Result<T, E>;
