//! Fuzz what `pileup load` reads from a dump directory before it sends
//! anything to a server: pileup's manifest (`pileup-dump.json`), and a
//! mydumper data file (plain, or gzip by its name) cut into statements,
//! each INSERT's values parsed. Must never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("pileup-fuzz-dump-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    pileup_dump::check::garbled_dump(&dir, data);
});
