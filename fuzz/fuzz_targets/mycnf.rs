//! Fuzz the option-file reader (`my.cnf`: groups, bare keys, quotes and
//! escapes, `!include`, `!includedir`). Must never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("pileup-fuzz-my-{}.cnf", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        let mut o = pileup_conn::mycnf::OptionFile::default();
        let _ = o.merge_file(&path, &["client", "mysql", "pileup"]);
    }
});
