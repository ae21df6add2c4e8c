//! One applier-thread sample → where its time went.
//!
//! Pure functions of what a sample holds: the thread's frames (innermost
//! first), its OS state before the stop, the system call it was blocked in,
//! and its processlist state and statement. Works with or without the
//! server's debug symbols: the markers are exported names (`handler::…`,
//! `Xid_log_event::…`, libc's `pread64`, futex waits) and processlist
//! states, which stripped Debian and distribution builds keep.

use pileup_engine::frames::{self, FrameClass};
use serde::Serialize;

/// Where an applier thread was when sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Reading a page from disk itself (a synchronous pread in InnoDB).
    PageRead,
    /// Blocked on a lock, latch or condition inside row apply: a page
    /// another thread is reading or writing, a free buffer-pool page, the
    /// index tree latch, a row lock.
    LatchWait,
    /// Committing: redo/binlog write and fsync, group commit.
    Commit,
    /// Parallel replication: waiting for an earlier transaction to commit first.
    PriorCommit,
    /// On CPU (or runnable): decoding and applying rows.
    Cpu,
    /// Nothing to apply: waiting for the relay log (or, for a parallel
    /// worker, for work from the SQL driver thread).
    RelayWait,
    /// Blocked elsewhere.
    OtherWait,
}

impl Category {
    pub const ALL: [Category; 7] = [
        Category::PageRead,
        Category::LatchWait,
        Category::Commit,
        Category::PriorCommit,
        Category::Cpu,
        Category::RelayWait,
        Category::OtherWait,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Category::PageRead => "page reads",
            Category::LatchWait => "lock/latch waits",
            Category::Commit => "commit and fsync",
            Category::PriorCommit => "waiting for prior commit",
            Category::Cpu => "CPU in row apply",
            Category::RelayWait => "waiting for relay log",
            Category::OtherWait => "other waits",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Category::PageRead => "page_read",
            Category::LatchWait => "latch_wait",
            Category::Commit => "commit",
            Category::PriorCommit => "prior_commit",
            Category::Cpu => "cpu",
            Category::RelayWait => "relay_wait",
            Category::OtherWait => "other_wait",
        }
    }
}

/// Whether one of the innermost frames is of a class `want` accepts (the
/// engine's table of wait and I/O frames).
fn inner_is(inner: &[&str], want: impl Fn(FrameClass) -> bool) -> bool {
    frames::first_class(inner.iter().copied(), want).is_some()
}

fn any(frames: &[&str], needles: &[&str]) -> bool {
    frames.iter().any(|f| needles.iter().any(|n| f.contains(n)))
}

/// Classify one sample of one applier thread.
pub fn classify(frames: &[&str], os_state: char, syscall: Option<&str>, sql_state: Option<&str>) -> Category {
    let state = sql_state.unwrap_or("").to_ascii_lowercase();
    if state.contains("read all relay log")
        || state.contains("waiting for work from")
        || state.contains("waiting for master to send")
    {
        return Category::RelayWait;
    }
    if state.contains("waiting for prior transaction") || any(frames, &["wait_for_prior_commit"]) {
        return Category::PriorCommit;
    }
    // The stack and the interrupted system call are what the thread was
    // doing at the stop. The OS state was read a millisecond or more before
    // it (with every other thread's), longer than a page read takes: it
    // only decides when there is no stack. (Trusting it first counted a
    // third of the page reads as CPU: a thread in a read is stopped as the
    // read returns, with the read's frame innermost.)
    if frames.is_empty() {
        return match os_state {
            'R' => Category::Cpu,
            _ => Category::OtherWait,
        };
    }
    let inner: Vec<&str> = frames.iter().take(3).copied().collect();
    if any(
        frames,
        &[
            "ha_commit_trans",
            "trans_commit",
            "Xid_log_event::do_commit",
            "Xid_apply_log_event::do_apply_event",
            "commit_one_phase",
            "MYSQL_BIN_LOG::write_transaction",
        ],
    ) || inner_is(&inner, |c| c == FrameClass::DiskSync)
    {
        return Category::Commit;
    }
    if syscall.is_some_and(|s| s.contains("pread"))
        || inner_is(&inner, |c| matches!(c, FrameClass::DiskRead | FrameClass::PageRead))
    {
        return Category::PageRead;
    }
    let waiting = syscall.is_some_and(|s| s.contains("futex")) || inner_is(&inner, FrameClass::is_wait);
    let in_apply = any(
        frames,
        &[
            "do_apply_event",
            "do_exec_row",
            "ha_update_row",
            "ha_write_row",
            "ha_delete_row",
            "ha_rnd_pos",
            "ha_index_read",
            "mysql_execute_command",
            "find_row",
            "write_row",
        ],
    );
    if waiting && in_apply {
        return Category::LatchWait;
    }
    if waiting && any(frames, &["next_event", "wait_for_update_relay_log", "read_log_event"]) {
        return Category::RelayWait;
    }
    // Not stopped inside a system call: it was on a CPU (or waiting for one).
    if !waiting && syscall.is_none() {
        return Category::Cpu;
    }
    Category::OtherWait
}

/// The row operation (storage-engine call) a sample was inside: the
/// innermost exported `handler::ha_*` frame, e.g. `ha_rnd_pos` (finding a
/// row event's row by its primary key), `ha_update_row` (changing the row
/// and its secondary index entries), `ha_write_row`, `ha_delete_row`,
/// `ha_index_read_map` (a statement's index lookup). None outside one.
pub fn row_operation<'a>(frames: &[&'a str]) -> Option<&'a str> {
    frames
        .iter()
        .find_map(|f| f.strip_prefix("handler::").filter(|op| op.starts_with("ha_")))
        .filter(|op| !op.starts_with("ha_commit") && !op.starts_with("ha_external_lock"))
}

/// What a row operation does, for the report.
pub fn operation_label(op: &str) -> &'static str {
    match op {
        "ha_rnd_pos" | "ha_rnd_pos_by_record" => "finding the row by its primary key",
        "ha_update_row" => "changing the row and its secondary index entries",
        "ha_write_row" => "inserting: unique checks, the row, its index entries",
        "ha_delete_row" => "deleting the row and its index entries",
        o if o.starts_with("ha_index_") => "an index lookup",
        o if o.starts_with("ha_rnd_next") => "a table scan",
        _ => "",
    }
}

/// The table a sample was applying, from the processlist: row events name
/// it in the state (`Update_rows_log_event::find_row(5) on table `t``),
/// statements in their text.
pub fn table_of(sql_state: Option<&str>, info: Option<&str>, db: Option<&str>) -> Option<String> {
    if let Some(st) = sql_state {
        if let Some(i) = st.find(" on table ") {
            let t = st[i + " on table ".len()..].trim().trim_matches('`').replace("`.`", ".");
            if !t.is_empty() {
                return Some(if t.contains('.') { t } else { format!("{}.{t}", db.unwrap_or("?")) });
            }
        }
    }
    let info = info?;
    let (s, t) = pileup_replica::statement::written_table(info.as_bytes())?;
    Some(format!("{}.{t}", s.as_deref().or(db).unwrap_or("?")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIND_ROW_READ: &[&str] = &[
        "__pread64",
        "mariadbd+0xd72f40",
        "mariadbd+0xe31120",
        "handler::ha_rnd_pos",
        "Rows_log_event::find_row",
        "Update_rows_log_event::do_exec_row",
        "handle_slave_sql",
    ];
    const UPDATE_FUTEX: &[&str] = &[
        "syscall",
        "mariadbd+0xde2ac0",
        "mariadbd+0xe0fb70",
        "handler::ha_update_row",
        "Update_rows_log_event::do_exec_row",
        "handle_slave_sql",
    ];
    const COMMIT: &[&str] = &[
        "__GI___pwrite64",
        "mariadbd+0xd13800",
        "ha_commit_trans",
        "trans_commit",
        "Xid_log_event::do_commit",
        "handle_slave_sql",
    ];
    const IDLE: &[&str] = &[
        "__futex_abstimed_wait_common",
        "__GI___pthread_cond_wait",
        "psi_cond_wait",
        "mariadbd+0x7778b0",
        "handle_slave_sql",
    ];

    #[test]
    fn stacks_from_a_stripped_mariadbd_classify() {
        assert_eq!(
            classify(
                FIND_ROW_READ,
                'D',
                Some("pread64"),
                Some("Update_rows_log_event::find_row(-1) on table `sbtest1`")
            ),
            Category::PageRead
        );
        assert_eq!(classify(FIND_ROW_READ, 'D', None, None), Category::PageRead);
        assert_eq!(classify(UPDATE_FUTEX, 'S', Some("futex"), None), Category::LatchWait);
        assert_eq!(classify(COMMIT, 'D', Some("pwrite64"), None), Category::Commit);
        assert_eq!(
            classify(IDLE, 'S', Some("futex"), Some("Slave has read all relay log; waiting for more updates")),
            Category::RelayWait
        );
        assert_eq!(classify(IDLE, 'S', Some("futex"), Some("Waiting for work from SQL thread")), Category::RelayWait);
        assert_eq!(
            classify(&["handle_rpl_parallel_thread", "wait_for_prior_commit"], 'S', None, None),
            Category::PriorCommit
        );
        // The stack at the stop beats the OS state read before it: a thread
        // seen running a moment earlier and stopped in a read was reading.
        assert_eq!(classify(FIND_ROW_READ, 'R', None, None), Category::PageRead);
        assert_eq!(classify(UPDATE_FUTEX, 'R', Some("futex"), None), Category::LatchWait);
        assert_eq!(classify(&["Field_long::unpack", "Rows_log_event::do_apply_event"], 'D', None, None), Category::Cpu);
        // No stack (unwinding failed): the OS state is all there is.
        assert_eq!(classify(&[], 'R', None, None), Category::Cpu);
        assert_eq!(classify(&[], 'S', None, None), Category::OtherWait);
        // Decoding the next event on a CPU is CPU, not waiting.
        assert_eq!(
            classify(&["Log_event::read_log_event", "next_event", "handle_slave_sql"], 'S', None, None),
            Category::Cpu
        );
        assert_eq!(classify(&["Field_long::unpack", "Rows_log_event::do_apply_event"], 'S', None, None), Category::Cpu);
        assert_eq!(classify(&["epoll_wait", "main"], 'S', Some("epoll_wait"), None), Category::OtherWait);
    }

    #[test]
    fn row_operation_is_the_innermost_handler_call() {
        assert_eq!(row_operation(FIND_ROW_READ), Some("ha_rnd_pos"));
        assert_eq!(row_operation(UPDATE_FUTEX), Some("ha_update_row"));
        assert_eq!(row_operation(COMMIT), None, "commit is not a row operation");
        assert_eq!(row_operation(&["syscall", "handler::ha_commit_trans", "handle_slave_sql"]), None);
        assert_eq!(row_operation(IDLE), None);
        assert_eq!(
            row_operation(&["__pread64", "handler::ha_index_read_map", "handler::ha_update_row"]),
            Some("ha_index_read_map"),
            "innermost wins"
        );
        assert_eq!(operation_label("ha_update_row"), "changing the row and its secondary index entries");
        assert_eq!(operation_label("ha_index_read_idx_map"), "an index lookup");
        assert_eq!(operation_label("ha_something_new"), "");
    }

    #[test]
    fn tables_from_states_and_statements() {
        assert_eq!(
            table_of(Some("Update_rows_log_event::find_row(-1) on table `sbtest1`"), None, Some("sbtest")).as_deref(),
            Some("sbtest.sbtest1")
        );
        assert_eq!(
            table_of(Some("Write_rows_log_event::write_row(7) on table `d`.`t`"), None, None).as_deref(),
            Some("d.t")
        );
        assert_eq!(
            table_of(Some("Updating"), Some("UPDATE sbtest3 SET k=k+1 WHERE id=5"), Some("sbtest")).as_deref(),
            Some("sbtest.sbtest3")
        );
        assert_eq!(table_of(Some("Slave has read all relay log; waiting for more updates"), None, None), None);
    }
}
