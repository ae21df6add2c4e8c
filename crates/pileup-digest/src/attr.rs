//! The attributes a statement carries in a slow log, under one name and unit
//! whatever server wrote them.
//!
//! Times are kept in seconds. MariaDB logs `Engine_time` and
//! `Pages_read_time` in milliseconds; Percona Server logs its `InnoDB_*_wait`
//! fields in seconds; both are converted here, once.

/// What an attribute measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    Seconds,
    Count,
    Bytes,
}

/// One attribute: its name in reports and JSON, its unit, and what it means.
#[derive(Debug)]
pub struct Attr {
    pub name: &'static str,
    pub unit: Unit,
    pub about: &'static str,
}

macro_rules! attrs {
    ($($idx:ident = $name:literal, $unit:ident, $about:literal;)*) => {
        /// Attribute indices, in [`ATTRS`] order.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum A { $($idx,)* }
        /// Every attribute pileup keeps per statement class.
        pub const ATTRS: &[Attr] = &[$(Attr { name: $name, unit: Unit::$unit, about: $about },)*];
        const ALL: &[A] = &[$(A::$idx,)*];
        /// The attribute at index `i` of [`ATTRS`].
        pub fn from_index(i: usize) -> A {
            ALL[i]
        }
    };
}

attrs! {
    QueryTime = "query_time", Seconds, "statement time (Query_time)";
    LockTime = "lock_time", Seconds, "time waiting for table locks (Lock_time)";
    RowsSent = "rows_sent", Count, "rows returned to the client";
    RowsExamined = "rows_examined", Count, "rows the server read to produce them";
    RowsAffected = "rows_affected", Count, "rows changed";
    BytesSent = "bytes_sent", Bytes, "bytes sent to the client";
    BytesReceived = "bytes_received", Bytes, "bytes received from the client (MySQL 8 log_slow_extra)";
    PagesAccessed = "pages_accessed", Count, "buffer pool page accesses (MariaDB Pages_accessed)";
    PagesRead = "pages_read", Count, "pages read from disk (MariaDB Pages_read, Percona InnoDB_IO_r_ops)";
    PagesPrefetched = "pages_prefetched", Count, "pages read ahead (MariaDB Pages_prefetched)";
    PagesUpdated = "pages_updated", Count, "pages changed (MariaDB Pages_updated)";
    PagesDistinct = "pages_distinct", Count, "distinct pages touched (Percona InnoDB_pages_distinct)";
    OldRowsRead = "old_rows_read", Count, "old row versions read from undo (MariaDB Old_rows_read)";
    PagesReadTime = "pages_read_time", Seconds, "time reading pages (MariaDB Pages_read_time, Percona InnoDB_IO_r_wait)";
    EngineTime = "engine_time", Seconds, "time inside the storage engine (MariaDB Engine_time)";
    OptimizerTime = "optimizer_time", Seconds, "time outside the engine: Query_time − Engine_time, mostly parsing and optimization (index dives)";
    RowLockWait = "row_lock_wait", Seconds, "time waiting for row locks (Percona InnoDB_rec_lock_wait)";
    QueueWait = "queue_wait", Seconds, "time queued to enter InnoDB (Percona InnoDB_queue_wait)";
    TmpTables = "tmp_tables", Count, "internal temporary tables";
    TmpDiskTables = "tmp_disk_tables", Count, "internal temporary tables on disk";
    TmpTableSizes = "tmp_table_sizes", Bytes, "size of the temporary tables";
    MergePasses = "merge_passes", Count, "filesort merge passes";
    SortRows = "sort_rows", Count, "rows sorted (MySQL 8 log_slow_extra)";
    ReadRndNext = "read_rnd_next", Count, "rows read by table scans (MySQL 8 Read_rnd_next)";
    Warnings = "warnings", Count, "warnings logged with the statement (MariaDB log_slow_verbosity=warnings)";
}

pub const N_ATTRS: usize = ATTRS.len();

/// Yes/No facts about how a statement ran; a class counts the yeses.
pub const FLAGS: &[(&str, &str)] = &[
    ("qc_hit", "answered from the query cache"),
    ("full_scan", "read a table or index in full"),
    ("full_join", "joined without an index"),
    ("tmp_table", "used an internal temporary table"),
    ("tmp_table_on_disk", "its temporary table went to disk"),
    ("filesort", "sorted"),
    ("filesort_on_disk", "its sort spilled to disk (Filesort_on_disk, or merge passes)"),
    ("priority_queue", "sorted with a priority queue (ORDER BY … LIMIT)"),
    ("error", "ended with an error (Errno / Last_errno not 0)"),
];
pub const N_FLAGS: usize = FLAGS.len();
pub const F_FULL_SCAN: usize = 1;
pub const F_TMP_TABLE: usize = 3;
pub const F_TMP_TABLE_ON_DISK: usize = 4;
pub const F_FILESORT: usize = 5;
pub const F_FILESORT_ON_DISK: usize = 6;
pub const F_ERROR: usize = 8;

/// What a slow-log key means.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field {
    /// A value in the attribute's unit after multiplying by the scale.
    Attr(A, f64),
    /// Yes / No.
    Flag(usize),
    /// A number: not 0 sets the flag.
    NonZeroFlag(usize),
    /// A number: not 0 sets the flag, and the count goes to the attribute.
    CountAndFlag(A, usize),
    Schema,
    ThreadId,
    /// Known and deliberately not kept.
    Ignored,
}

/// The meaning of a `Key:` in a slow log's comment lines, for MariaDB,
/// MySQL 5.7/8.0 (with `log_slow_extra`) and Percona Server.
pub fn field(key: &[u8]) -> Option<Field> {
    use Field::*;
    Some(match key {
        b"Query_time" => Attr(A::QueryTime, 1.0),
        b"Lock_time" => Attr(A::LockTime, 1.0),
        b"Rows_sent" => Attr(A::RowsSent, 1.0),
        b"Rows_examined" => Attr(A::RowsExamined, 1.0),
        b"Rows_affected" => Attr(A::RowsAffected, 1.0),
        b"Bytes_sent" => Attr(A::BytesSent, 1.0),
        b"Bytes_received" => Attr(A::BytesReceived, 1.0),
        b"Pages_accessed" => Attr(A::PagesAccessed, 1.0),
        b"Pages_read" | b"InnoDB_IO_r_ops" => Attr(A::PagesRead, 1.0),
        b"Pages_prefetched" => Attr(A::PagesPrefetched, 1.0),
        b"Pages_updated" => Attr(A::PagesUpdated, 1.0),
        b"InnoDB_pages_distinct" => Attr(A::PagesDistinct, 1.0),
        b"Old_rows_read" | b"Undo_rows_read" => Attr(A::OldRowsRead, 1.0),
        // MariaDB: milliseconds (sql/log.cc prints 1000 × ticks / frequency).
        b"Pages_read_time" => Attr(A::PagesReadTime, 1e-3),
        b"Engine_time" => Attr(A::EngineTime, 1e-3),
        // Percona Server: seconds (microsecond timers / 1e6).
        b"InnoDB_IO_r_wait" => Attr(A::PagesReadTime, 1.0),
        b"InnoDB_rec_lock_wait" => Attr(A::RowLockWait, 1.0),
        b"InnoDB_queue_wait" => Attr(A::QueueWait, 1.0),
        b"Tmp_tables" | b"Created_tmp_tables" => Attr(A::TmpTables, 1.0),
        b"Tmp_disk_tables" => Attr(A::TmpDiskTables, 1.0),
        b"Created_tmp_disk_tables" => CountAndFlag(A::TmpDiskTables, F_TMP_TABLE_ON_DISK),
        b"Tmp_table_sizes" => Attr(A::TmpTableSizes, 1.0),
        // Merge passes mean the sort wrote runs to disk, whatever
        // Filesort_on_disk says (MariaDB 10.11 logs No for such sorts).
        b"Merge_passes" | b"Sort_merge_passes" => CountAndFlag(A::MergePasses, F_FILESORT_ON_DISK),
        b"Sort_rows" => Attr(A::SortRows, 1.0),
        b"Read_rnd_next" => Attr(A::ReadRndNext, 1.0),
        b"QC_hit" | b"QC_Hit" => Flag(0),
        b"Full_scan" => Flag(1),
        b"Full_join" => Flag(2),
        b"Tmp_table" => Flag(3),
        b"Tmp_table_on_disk" => Flag(4),
        b"Filesort" => Flag(5),
        b"Filesort_on_disk" => Flag(6),
        b"Priority_queue" => Flag(7),
        b"Errno" | b"Last_errno" => NonZeroFlag(F_ERROR),
        b"Schema" => Schema,
        b"Thread_id" | b"Id" => ThreadId,
        b"Killed"
        | b"Read_first"
        | b"Read_last"
        | b"Read_key"
        | b"Read_next"
        | b"Read_prev"
        | b"Read_rnd"
        | b"Sort_range_count"
        | b"Sort_scan_count"
        | b"Start"
        | b"End"
        | b"InnoDB_IO_r_bytes"
        | b"InnoDB_trx_id"
        | b"Count_hit_tmp_table_size"
        | b"Stored_routine"
        | b"Log_slow_rate_type"
        | b"Log_slow_rate_limit"
        | b"Max_tmp_disk_space_used" => Ignored,
        _ => return None,
    })
}
