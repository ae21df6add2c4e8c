//! Fuzz what `pileup report` and `pileup captures` read from a capture
//! directory: its `evidence.json` (and `metrics.json`, `stalls.json`, given
//! the same bytes), read back and rendered as the HTML report. Must never
//! panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("pileup-fuzz-capture-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    pileup_watch::report::garbled_capture(&dir, data);
});
