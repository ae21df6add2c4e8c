//! A loaded InnoDB table's statistics: `STATS_AUTO_RECALC` as its
//! `CREATE TABLE` sets it, turned off while the table loads (in the
//! `CREATE` itself where it can be) and given back after its data with
//! one `ANALYZE TABLE`.

use mysql::prelude::Queryable;

use crate::error::Result;

/// `create` (a `SHOW CREATE TABLE` text that names no `STATS_AUTO_RECALC`)
/// with `STATS_AUTO_RECALC=0` first among its table options, which follow
/// the line-starting `)` that closes the column list (`SHOW CREATE TABLE`
/// escapes the newlines of strings, so no comment or default holds one);
/// `None` when the text has no such line.
pub fn created_with_recalc_off(create: &str) -> Option<String> {
    let at = create.rfind("\n) ENGINE=")? + 2;
    Some(format!("{} STATS_AUTO_RECALC=0{}", &create[..at], &create[at..]))
}

/// Turn InnoDB's statistics recalculation off for `name` (quoted
/// `db.table`) while it loads; an instant ALTER.
pub fn recalc_off(c: &mut mysql::Conn, name: &str) -> Result<()> {
    Ok(c.query_drop(format!("ALTER TABLE {name} STATS_AUTO_RECALC=0"))?)
}

/// Give `name` its own `STATS_AUTO_RECALC` back (`setting`, from
/// [`stats_auto_recalc`]) and, with `analyze`, its statistics in one
/// `ANALYZE TABLE`.
pub fn recalc_back(c: &mut mysql::Conn, name: &str, setting: &str, analyze: bool) -> Result<()> {
    c.query_drop(format!("ALTER TABLE {name} STATS_AUTO_RECALC={setting}"))?;
    if analyze {
        c.query_drop(format!("ANALYZE TABLE {name}"))?;
    }
    Ok(())
}

/// An InnoDB table's `STATS_AUTO_RECALC` as its `CREATE TABLE` sets it
/// (`DEFAULT` when it does not); `None` for other engines.
pub fn stats_auto_recalc(create: &str) -> Option<String> {
    let upper = create.to_ascii_uppercase();
    // The table options follow the last closing parenthesis of the column
    // list; a partitioned table's partitions come after them.
    let options = &upper[upper.rfind(") ENGINE=").map_or(0, |p| p + 2)..];
    if !options.starts_with("ENGINE=INNODB") {
        return None;
    }
    // SHOW CREATE TABLE writes STATS_AUTO_RECALC before any quoted option
    // (COMMENT, CONNECTION): what follows a quote is not an option.
    let options = options.split('\'').next().unwrap_or("");
    let value = options.split_once("STATS_AUTO_RECALC=").and_then(|(_, v)| v.split_whitespace().next());
    Some(match value {
        Some(v @ ("0" | "1")) => v.to_string(),
        _ => "DEFAULT".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_innodb_tables_own_stats_auto_recalc_is_read_from_its_create() {
        let t = "CREATE TABLE `t` (\n  `a` int(11) NOT NULL COMMENT ') ENGINE=Aria',\n  PRIMARY KEY (`a`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";
        assert_eq!(stats_auto_recalc(t).as_deref(), Some("DEFAULT"));
        let t = "CREATE TABLE `t` (\n  `a` int(11)\n) ENGINE=InnoDB DEFAULT CHARSET=latin1 STATS_AUTO_RECALC=0";
        assert_eq!(stats_auto_recalc(t).as_deref(), Some("0"));
        let t = "CREATE TABLE `t` (\n  `a` int(11)\n) ENGINE=InnoDB STATS_AUTO_RECALC=1\n PARTITION BY HASH (`a`)\n(PARTITION `p0` ENGINE = InnoDB)";
        assert_eq!(stats_auto_recalc(t).as_deref(), Some("1"));
        assert_eq!(stats_auto_recalc("CREATE TABLE `t` (\n  `a` int(11)\n) ENGINE=Aria PAGE_CHECKSUM=1"), None);
        let t = "CREATE TABLE `t` (\n  `a` int(11)\n) ENGINE=InnoDB COMMENT='STATS_AUTO_RECALC=0 x'";
        assert_eq!(stats_auto_recalc(t).as_deref(), Some("DEFAULT"), "a comment is not an option");
    }

    #[test]
    fn statistics_go_off_in_the_create_among_the_table_options() {
        let t = "CREATE TABLE `t` (\n  `a` int(11) NOT NULL COMMENT ') ENGINE=Aria',\n  PRIMARY KEY (`a`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";
        assert_eq!(
            created_with_recalc_off(t).unwrap(),
            "CREATE TABLE `t` (\n  `a` int(11) NOT NULL COMMENT ') ENGINE=Aria',\n  PRIMARY KEY (`a`)\n) STATS_AUTO_RECALC=0 ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        );
        let t = "CREATE TABLE `t` (\n  `a` int(11)\n) ENGINE=InnoDB\n PARTITION BY HASH (`a`)\n(PARTITION `p0` ENGINE = InnoDB)";
        assert_eq!(
            created_with_recalc_off(t).unwrap(),
            "CREATE TABLE `t` (\n  `a` int(11)\n) STATS_AUTO_RECALC=0 ENGINE=InnoDB\n PARTITION BY HASH (`a`)\n(PARTITION `p0` ENGINE = InnoDB)"
        );
        assert_eq!(created_with_recalc_off("CREATE TABLE t (a int) ENGINE=InnoDB"), None);
    }
}
