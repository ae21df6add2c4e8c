//! Why an experiment could not run or finish.

/// Why an experiment could not run, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The server is not a pileup sandbox and `--i-know` was not given.
    #[error(
        "{server} is not a pileup sandbox (its datadir {datadir} is not one): the experiments create tables, write and churn connections; run them with --sandbox, or give --i-know to run them on this server anyway"
    )]
    NotASandbox { server: String, datadir: String },
    #[error("{0}")]
    Server(String),
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    #[error("{0}")]
    Usage(String),
    /// The server went away or failed mid-run; the points measured before
    /// are in the report the run returns with it.
    #[error("{why}")]
    Stopped { why: String },
}

pub type Result<T, E = ExperimentError> = std::result::Result<T, E>;
