//! What can go wrong reading a replica, in a replica's terms.

/// Why a replica's state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error("{what}: {source}{hint}")]
    Sql { what: &'static str, source: pileup_conn::SqlError, hint: &'static str },
    #[error("this server is not a replica (SHOW SLAVE STATUS is empty); point pileup at the replica")]
    NotAReplica,
    #[error("{0}")]
    Missing(&'static str),
    #[error("table {schema}.{name} not found on the replica")]
    NoTable { schema: String, name: String },
}

impl ReplicaError {
    /// A query of `what` failed.
    pub(crate) fn sql(what: &'static str) -> impl FnOnce(mysql::Error) -> ReplicaError {
        move |e| ReplicaError::Sql { what, source: e.into(), hint: "" }
    }
}
