//! Decode a whole file the way the prefetcher and `pileup binlog` do —
//! every event, every row image, every value rendered — resynchronising
//! after corruption. It must never panic, whatever the bytes: the fuzz
//! target (`fuzz/`), its kept corpus (`tests/fuzz_corpus.rs`) and the
//! mutation tests all drive it.

use std::path::Path;

use crate::decoder::{Decoder, Event};
use crate::reader::FileReader;

/// Decode everything in `path` (checksums verified or not); returns how
/// many events were framed. Stops after `max_events`.
pub fn decode_everything(path: &Path, verify: bool, max_events: usize) -> usize {
    let mut r = match FileReader::open(path) {
        Ok(r) => r,
        Err(_) => return 0,
    };
    r.verify = verify;
    let mut dec = Decoder::new();
    let mut n = 0;
    while n < max_events {
        match r.next_with_format() {
            Ok(Some((ev, f))) => {
                n += 1;
                if let Ok(Event::Rows(rows, Some(tm))) = dec.decode(f, ev.bytes) {
                    let mut it = rows.iter(&tm);
                    let (mut b, mut a) = (vec![], vec![]);
                    while let Ok(true) = it.next_into(&mut b, &mut a) {
                        for v in b.iter().chain(a.iter()).flatten() {
                            let _ = v.to_string();
                        }
                    }
                }
            }
            Ok(None) => break,
            Err(_) => {
                let at = r.position();
                match r.resync(at) {
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }
    }
    n
}
