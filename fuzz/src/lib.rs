//! What the fuzz targets of mlx-aot share: how one fuzz input holds several files, and
//! a mutator that knows JSON.
//!
//! A model folder is several files (config.json beside kv_config.json, shards beside
//! their index, tokenizer.json beside tokenizer_config.json), so one input is the files'
//! contents joined by [`SEPARATOR`]. The separator is plain text so that seeds and saved
//! crashes stay readable.
//!
//! libFuzzer's own mutations flip bytes, which almost always breaks JSON syntax: in a
//! minute they rarely reach the validation behind the parser. [`mutate`] also edits the
//! parsed JSON of a part (a config, an index, a tokenizer, the header of a safetensors
//! file) and writes it back, so most inputs are well-formed files with one odd value.

pub mod mutate;

pub use mutate::mutate;

/// Between two files of one input.
pub const SEPARATOR: &[u8] = b"\n--8<--\n";

/// At most this many files per input: no target reads more, and a bound keeps one input
/// from turning into thousands of empty files.
pub const MAX_PARTS: usize = 8;

/// The files of one input: `data` split at each [`SEPARATOR`], the last part taking the
/// rest once [`MAX_PARTS`] are reached.
pub fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while parts.len() + 1 < MAX_PARTS {
        match find(rest, SEPARATOR) {
            Some(at) => {
                parts.push(&rest[..at]);
                rest = &rest[at + SEPARATOR.len()..];
            }
            None => break,
        }
    }
    parts.push(rest);
    parts
}

/// The files joined into one input (what the seeds are made of).
pub fn join(parts: &[&[u8]]) -> Vec<u8> {
    parts.join(SEPARATOR)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A part as text, or `None` when it is not UTF-8 (the loaders read text files; bytes
/// that are not UTF-8 are refused before any parser runs, by `read_to_string`).
pub fn text(part: &[u8]) -> Option<&str> {
    std::str::from_utf8(part).ok()
}
