//! InnoDB's history list: transactions whose undo purge has not processed.

use anyhow::{Context, Result};
use mysql::prelude::Queryable;

/// The history list length: MariaDB's status variable, else MySQL's metric.
pub fn history_length(c: &mut mysql::Conn) -> Result<u64> {
    if let Some(v) = pileup_conn::global_status(c, "Innodb_history_list_length")? {
        return Ok(v);
    }
    c.query_first::<u64, _>("SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'")?
        .context("the server reports no history list length (neither Innodb_history_list_length nor INNODB_METRICS trx_rseg_history_len)")
}
