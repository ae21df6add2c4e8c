//! The experiments by name, and what each asks.

/// The experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    HotRow,
    Accept,
    TableOpen,
    PointSelect,
    Range,
    Durability,
}

impl Name {
    pub const ALL: [Name; 6] =
        [Name::HotRow, Name::Accept, Name::TableOpen, Name::PointSelect, Name::Range, Name::Durability];

    pub fn parse(s: &str) -> Option<Name> {
        Name::ALL.into_iter().find(|n| n.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Name::HotRow => "hot-row",
            Name::Accept => "accept",
            Name::TableOpen => "table-open",
            Name::PointSelect => "point-select",
            Name::Range => "range",
            Name::Durability => "durability",
        }
    }

    /// What the experiment asks.
    pub fn question(self) -> &'static str {
        match self {
            Name::HotRow => "one row updated by N threads: does throughput collapse, and does deadlock detection cost it?",
            Name::Accept => "a connection avalanche: how many connections a second does the server accept, beside PostgreSQL?",
            Name::TableOpen => "thousands of tables opened by N connections through a small table cache: how fast can tables be opened?",
            Name::PointSelect => "primary-key lookups: how does a snapshot per statement (autocommit) cost, beside PostgreSQL plain and prepared?",
            Name::Range => "100-row primary-key ranges, returning the rows or aggregating them, with and without innodb_thread_concurrency, beside PostgreSQL",
            Name::Durability => "one-row updates committed at each durability setting, MariaDB beside PostgreSQL at the same durability",
        }
    }

    pub(crate) fn unit(self) -> &'static str {
        match self {
            Name::HotRow => "updates/s",
            Name::Accept => "connects/s",
            Name::TableOpen => "selects/s",
            Name::PointSelect => "selects/s",
            Name::Range => "ranges/s",
            Name::Durability => "commits/s",
        }
    }

    /// Whether it compares with PostgreSQL.
    pub fn uses_postgres(self) -> bool {
        matches!(self, Name::Accept | Name::PointSelect | Name::Range | Name::Durability)
    }
}

/// innodb_thread_concurrency in the range experiment's limited curve.
pub(crate) const THREAD_CONCURRENCY_LIMIT: &str = "8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in Name::ALL {
            assert_eq!(Name::parse(n.as_str()), Some(n));
        }
        assert_eq!(Name::parse("hot_row"), None);
    }
}
