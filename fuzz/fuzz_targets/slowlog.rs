//! Fuzz the slow-log reader: any bytes, as a file (plain, or gzip or zstd
//! when they start with those magic bytes), digested on one thread and on
//! two. Must never panic, hang or allocate without bound; a garbled entry
//! is a problem the report names. Run: `cargo +nightly fuzz run slowlog
//! fuzz/corpus/slowlog` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("pileup-fuzz-slowlog-{}.log", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        for jobs in [1, 2] {
            let o = pileup_digest::Options { jobs, block_size: 4096, ..Default::default() };
            let _ = pileup_digest::digest(&[pileup_digest::input::Input::File(path.clone())], &o, &mut pileup_digest::Quiet);
        }
    }
});
