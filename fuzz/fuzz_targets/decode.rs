//! Fuzz the binlog decoder: any bytes, written as a file, decoded with
//! checksums verified and not (unverified, the event decoders themselves
//! meet the damage). Run: `cargo +nightly fuzz run decode fuzz/corpus/decode`
//! (see fuzz/README.md). Must never panic, hang or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("pileup-fuzz-{}.bin", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        pileup_binlog::check::decode_everything(&path, true, 10_000);
        pileup_binlog::check::decode_everything(&path, false, 10_000);
    }
});
