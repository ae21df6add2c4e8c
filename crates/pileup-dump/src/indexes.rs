//! Secondary indexes added after the data: a table is created with its
//! primary key only, its chunks are loaded, and its other indexes are then
//! built in one `ALTER TABLE … ADD …`, which InnoDB does by sorting the
//! rows once instead of inserting every row into every index tree.
//!
//! Works on `SHOW CREATE TABLE` text, which puts every column, index and
//! constraint on a line of its own between the `(` line and the `)` line.
//! A table whose text does not look like that, or where dropping an index
//! could change what the table accepts or how it is created, keeps its
//! indexes: see [`split`].

/// A table's create statement without the indexes that can wait, and
/// those indexes as `ALTER TABLE` clauses with their names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferred {
    pub create: String,
    /// `(index name, "ADD KEY `name` (...)")`, in the table's order.
    pub indexes: Vec<(String, String)>,
}

/// Split `create` (one table's `SHOW CREATE TABLE`) into the statement to
/// create it with and the indexes to add after its data. `None` keeps the
/// table as it is:
/// - not InnoDB (other engines build indexes their own way);
/// - it has foreign keys, or `referenced` (another table's foreign key
///   points at it): a foreign key needs its index when it is created;
/// - no primary key (InnoDB would cluster on a unique key instead);
/// - no secondary index that can wait.
///
/// Indexes that stay: the primary key; FULLTEXT (adding one later rebuilds
/// the whole table for its hidden document id) and SPATIAL; any index
/// holding the AUTO_INCREMENT column (the table cannot be created without
/// one).
pub fn split(create: &str, referenced: bool) -> Option<Deferred> {
    if referenced || !engine_is_innodb(create) {
        return None;
    }
    let lines: Vec<&str> = create.lines().collect();
    let open = lines.iter().position(|l| l.trim_end().ends_with('('))?;
    let close = lines.iter().rposition(|l| l.starts_with(')'))?;
    if close <= open + 1 {
        return None;
    }
    let body = &lines[open + 1..close];
    if body.iter().any(|l| !l.starts_with("  ")) {
        return None;
    }
    let elements: Vec<&str> = body.iter().map(|l| l.trim().trim_end_matches(',')).collect();
    if elements
        .iter()
        .any(|e| e.starts_with("CONSTRAINT") && e.contains(" FOREIGN KEY ") || e.starts_with("FOREIGN KEY"))
    {
        return None;
    }
    let auto_inc: Vec<&str> = elements
        .iter()
        .filter(|e| e.starts_with('`') && e.contains(" AUTO_INCREMENT"))
        .filter_map(|e| e.get(1..).and_then(|r| r.split('`').next()))
        .collect();
    let mut keep = vec![];
    let mut indexes = vec![];
    for e in elements {
        let kind = ["KEY `", "UNIQUE KEY `"].iter().find(|k| e.starts_with(**k));
        let Some(kind) = kind else {
            keep.push(e);
            continue;
        };
        let rest = &e[kind.len()..];
        let Some(name) = rest.split('`').next() else {
            keep.push(e);
            continue;
        };
        // The column list follows the name; an AUTO_INCREMENT column in it
        // pins the index.
        let cols = rest[name.len()..].split(')').next().unwrap_or("");
        if auto_inc.iter().any(|c| cols.contains(&format!("`{c}`"))) {
            keep.push(e);
            continue;
        }
        indexes.push((name.to_string(), format!("ADD {e}")));
    }
    // Without a primary key InnoDB clusters on the first NOT NULL unique
    // key: adding that one later would rebuild the table.
    if indexes.is_empty() || !keep.iter().any(|e| e.starts_with("PRIMARY KEY")) {
        return None;
    }
    let mut out: Vec<String> = lines[..=open].iter().map(|l| l.to_string()).collect();
    let n = keep.len();
    for (i, e) in keep.into_iter().enumerate() {
        out.push(format!("  {e}{}", if i + 1 < n { "," } else { "" }));
    }
    out.extend(lines[close..].iter().map(|l| l.to_string()));
    Some(Deferred { create: out.join("\n"), indexes })
}

/// Whether the table options after the closing `)` name InnoDB.
fn engine_is_innodb(create: &str) -> bool {
    create.rsplit_once("\n)").is_some_and(|(_, opts)| opts.contains("ENGINE=InnoDB"))
}

/// Whether any of `creates` has a foreign key that references a table
/// named `name` (in any database: a name alone is enough to keep the
/// table's indexes).
pub fn referenced(name: &str, creates: &[&str]) -> bool {
    let needle = format!("REFERENCES `{}`", name.replace('`', "``"));
    let qualified = format!("`.`{}` (", name.replace('`', "``"));
    creates
        .iter()
        .any(|c| c.contains(&needle) || c.lines().any(|l| l.contains(" FOREIGN KEY ") && l.contains(&qualified)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "CREATE TABLE `sbtest1` (\n  `id` int(11) NOT NULL AUTO_INCREMENT,\n  `k` int(11) NOT NULL DEFAULT 0,\n  `c` char(120) NOT NULL DEFAULT '',\n  `pad` char(60) NOT NULL DEFAULT '',\n  PRIMARY KEY (`id`),\n  KEY `k_1` (`k`),\n  UNIQUE KEY `u` (`c`,`pad`) COMMENT 'a, b'\n) ENGINE=InnoDB AUTO_INCREMENT=10001 DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci";

    #[test]
    fn secondary_indexes_move_to_an_alter_and_the_commas_stay_right() {
        let d = split(T, false).unwrap();
        assert_eq!(
            d.create,
            "CREATE TABLE `sbtest1` (\n  `id` int(11) NOT NULL AUTO_INCREMENT,\n  `k` int(11) NOT NULL DEFAULT 0,\n  `c` char(120) NOT NULL DEFAULT '',\n  `pad` char(60) NOT NULL DEFAULT '',\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB AUTO_INCREMENT=10001 DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci"
        );
        assert_eq!(
            d.indexes,
            vec![
                ("k_1".to_string(), "ADD KEY `k_1` (`k`)".to_string()),
                ("u".to_string(), "ADD UNIQUE KEY `u` (`c`,`pad`) COMMENT 'a, b'".to_string())
            ]
        );
    }

    #[test]
    fn tables_that_need_their_indexes_keep_them() {
        // Referenced by another table's foreign key, or not InnoDB.
        assert_eq!(split(T, true), None);
        assert_eq!(split(&T.replace("InnoDB", "Aria"), false), None);
        // Has a foreign key.
        let fk = T.replace(
            "  KEY `k_1` (`k`),",
            "  KEY `k_1` (`k`),\n  CONSTRAINT `f` FOREIGN KEY (`k`) REFERENCES `p` (`id`),",
        );
        assert_eq!(split(&fk, false), None);
        // Only a primary key, or only FULLTEXT / SPATIAL besides it.
        let pk = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB";
        assert_eq!(split(pk, false), None);
        let ft = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `b` text,\n  PRIMARY KEY (`id`),\n  FULLTEXT KEY `f` (`b`)\n) ENGINE=InnoDB";
        assert_eq!(split(ft, false), None);
        // No primary key: InnoDB clusters on the unique key.
        let nopk = "CREATE TABLE `t` (\n  `a` int(11) NOT NULL,\n  `b` int(11),\n  UNIQUE KEY `a` (`a`),\n  KEY `b` (`b`)\n) ENGINE=InnoDB";
        assert_eq!(split(nopk, false), None);
    }

    #[test]
    fn an_index_on_the_auto_increment_column_stays() {
        let t = "CREATE TABLE `t` (\n  `a` int(11) NOT NULL,\n  `n` int(11) NOT NULL AUTO_INCREMENT,\n  `k` int(11) DEFAULT NULL,\n  PRIMARY KEY (`a`),\n  KEY `n` (`n`),\n  KEY `k` (`k`)\n) ENGINE=InnoDB";
        let d = split(t, false).unwrap();
        assert!(d.create.contains("  PRIMARY KEY (`a`),\n  KEY `n` (`n`)\n)"), "{}", d.create);
        assert_eq!(d.indexes, vec![("k".to_string(), "ADD KEY `k` (`k`)".to_string())]);
    }

    #[test]
    fn references_are_found_by_table_name() {
        let child = "CREATE TABLE `c` (\n  `p` int(11),\n  KEY `p` (`p`),\n  CONSTRAINT `f` FOREIGN KEY (`p`) REFERENCES `parent` (`id`)\n) ENGINE=InnoDB";
        let other = "CREATE TABLE `c` (\n  `p` int(11),\n  CONSTRAINT `f` FOREIGN KEY (`p`) REFERENCES `db2`.`parent` (`id`)\n) ENGINE=InnoDB";
        assert!(referenced("parent", &[child]));
        assert!(referenced("parent", &[other]));
        assert!(!referenced("par", &[child, other]));
    }
}
