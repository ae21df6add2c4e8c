//! Chunk files: the compression a file is written with and read back
//! through, chosen by its name (`.zst`, `.gz`, or none).

use std::io::{Read, Write};
use std::path::Path;

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compress {
    Zstd(i32),
    Gzip,
    None,
}

impl Compress {
    pub fn suffix(self) -> &'static str {
        match self {
            Compress::Zstd(_) => ".zst",
            Compress::Gzip => ".gz",
            Compress::None => "",
        }
    }
}

/// A writer that compresses; [`Encoder::finish`] ends the stream.
pub enum Encoder<'a> {
    Zstd(zstd::Encoder<'static, &'a mut dyn Write>),
    Gzip(flate2::write::GzEncoder<&'a mut dyn Write>),
    None(&'a mut dyn Write),
}

impl<'a> Encoder<'a> {
    pub fn new(out: &'a mut dyn Write, c: Compress) -> Result<Encoder<'a>> {
        Ok(match c {
            Compress::Zstd(level) => Encoder::Zstd(zstd::Encoder::new(out, level)?),
            Compress::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(out, flate2::Compression::fast())),
            Compress::None => Encoder::None(out),
        })
    }

    pub fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Encoder::Zstd(z) => z.write_all(b),
            Encoder::Gzip(g) => g.write_all(b),
            Encoder::None(w) => w.write_all(b),
        }
    }

    pub fn finish(self) -> std::io::Result<()> {
        match self {
            Encoder::Zstd(z) => z.finish().map(|_| ()),
            Encoder::Gzip(g) => g.finish().map(|_| ()),
            Encoder::None(w) => w.flush(),
        }
    }
}

/// Open a chunk file for reading, decompressed as its name says.
pub fn open(path: &Path) -> std::io::Result<Box<dyn Read + Send>> {
    let f = std::fs::File::open(path)?;
    let name = path.to_string_lossy();
    Ok(if name.ends_with(".zst") {
        Box::new(zstd::Decoder::new(f)?)
    } else if name.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(std::io::BufReader::new(f)))
    } else {
        Box::new(std::io::BufReader::new(f))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_compression_reads_back_what_was_written() {
        let dir = std::env::temp_dir().join(format!("pileup-files-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for c in [Compress::Zstd(3), Compress::Gzip, Compress::None] {
            let p = dir.join(format!("x.tsv{}", c.suffix()));
            let mut f = std::fs::File::create(&p).unwrap();
            let mut e = Encoder::new(&mut f, c).unwrap();
            e.write_all(b"hello\tworld\n").unwrap();
            e.finish().unwrap();
            let mut s = String::new();
            open(&p).unwrap().read_to_string(&mut s).unwrap();
            assert_eq!(s, "hello\tworld\n", "{c:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
