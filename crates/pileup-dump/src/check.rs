//! What `pileup load` reads from a dump directory before any server is
//! involved, run over arbitrary bytes: pileup's manifest, and a mydumper
//! data file cut into statements with each INSERT's values parsed. For the
//! fuzzer (`fuzz/fuzz_targets/dumpfiles.rs`) and the replay of its kept
//! corpus in the tests.

use std::io::Read;
use std::path::Path;

/// At most this much of a decompressed file is read (a small gzip can
/// expand to gigabytes).
const MAX_TEXT: u64 = 64 << 20;

/// Read `data` in `dir` as each dump file it could be; the statements
/// found in it as a mydumper file.
pub fn garbled_dump(dir: &Path, data: &[u8]) -> usize {
    let _ = std::fs::write(dir.join(crate::manifest::MANIFEST), data);
    let _ = crate::load::read_manifest(dir);
    let mut statements = 0;
    for name in ["d.t.00000.sql", "d.t.00001.sql.gz"] {
        let p = dir.join(name);
        let mut text = vec![];
        let read = std::fs::write(&p, data)
            .and_then(|()| crate::files::open(&p))
            .and_then(|r| r.take(MAX_TEXT).read_to_end(&mut text));
        if read.is_ok() {
            for st in crate::sql::statements(&text) {
                statements += 1;
                let _ = crate::sql::parse_insert(st);
            }
        }
    }
    let _ = crate::mydumper::scan(dir);
    statements
}
