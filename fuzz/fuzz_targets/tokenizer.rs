//! tokenizer.json (+ tokenizer_config.json, chat_template.jinja) -> the binary's
//! tokenizer -> encode, decode, streamed decode, chat prompt: what `mlx-aot run` does with
//! a model folder's tokenizer files.
//!
//! Input: tokenizer.json, then optionally [`SEPARATOR`] and tokenizer_config.json (empty:
//! none), then optionally [`SEPARATOR`] and chat_template.jinja. Each step may fail with
//! an error; none may panic or hang.
//!
//! [`SEPARATOR`]: mlx_aot_fuzz::SEPARATOR

#![no_main]

// The binary's own module, compiled here as is: `mlx-aot` is a binary crate (with the
// generated models behind it), and this file needs only anyhow, serde_json, tokenizers and
// minijinja. The target uses part of it.
#[path = "../../cli/src/tokenizer.rs"]
#[allow(dead_code)]
mod tokenizer;

use libfuzzer_sys::fuzz_target;
use mlx_aot_fuzz::{split, text};
use tokenizer::{Detokenizer, Tokenizer};

/// Text with ASCII, spaces, accents, an emoji and a special-looking token.
const PROMPT: &str = "Hello  world, ünïcödé 🙂 <bos> t7";

// Mostly well-formed files with one odd value (see `mlx_aot_fuzz::mutate`).
libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    mlx_aot_fuzz::mutate(data, size, max_size, seed)
});

fuzz_target!(|data: &[u8]| {
    let parts = split(data);
    let config = match parts.get(1).copied() {
        None | Some([]) => None,
        Some(bytes) => match text(bytes) {
            Some(t) => Some(("tokenizer_config.json", t)),
            None => return,
        },
    };
    let jinja = match parts.get(2).map(|p| text(p)) {
        None => None,
        Some(None) => return,
        Some(Some(t)) => Some(t.to_owned()),
    };
    let Ok(tok) = Tokenizer::from_parts("tokenizer.json", parts[0], config, jinja) else {
        return;
    };
    let Ok(ids) = tok.encode(PROMPT, true) else {
        return;
    };
    let _ = tok.decode(&ids);
    let mut stream = Detokenizer::new(&tok);
    for &id in ids.iter().take(64) {
        if stream.push(id).is_err() {
            break;
        }
    }
    let _ = stream.finish();
    let _ = tok.chat_prompt("hi");
});
