//! InnoDB's history list: transactions whose undo purge has not processed.

use mysql::prelude::Queryable;

use crate::error::ReplicaError;

/// The history list length: MariaDB's status variable, else MySQL's metric.
pub fn history_length(c: &mut mysql::Conn) -> Result<u64, ReplicaError> {
    let status = pileup_conn::global_status(c, "Innodb_history_list_length").map_err(|source| ReplicaError::Sql {
        what: "reading the history list length",
        source,
        hint: "",
    })?;
    if let Some(v) = status {
        return Ok(v);
    }
    c.query_first::<u64, _>("SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'")
        .map_err(ReplicaError::sql("reading INNODB_METRICS"))?
        .ok_or(ReplicaError::Missing("the server reports no history list length (neither Innodb_history_list_length nor INNODB_METRICS trx_rseg_history_len)"))
}
