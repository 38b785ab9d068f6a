//! A model folder's tokenizer: `tokenizer.json` (crate `tokenizers`), the chat template
//! of `tokenizer_config.json` (rendered with minijinja as transformers renders it), and
//! incremental detokenization for streaming.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Once;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

/// The tokenizer of a model folder.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// tokenizer_config.json, if the folder has one.
    config: Option<Value>,
    /// The chat template, if any.
    chat_template: Option<String>,
}

impl Tokenizer {
    /// Reads `dir/tokenizer.json` and, when present, `dir/tokenizer_config.json` (and
    /// `chat_template.jinja`, which newer folders use instead of the config key).
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            bail!("{} has no tokenizer.json", dir.display());
        }
        let json = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
        let config_path = dir.join("tokenizer_config.json");
        let config_text = if config_path.is_file() {
            Some(
                std::fs::read_to_string(&config_path)
                    .with_context(|| format!("{}", config_path.display()))?,
            )
        } else {
            None
        };
        let jinja = dir.join("chat_template.jinja");
        let jinja_text = if jinja.is_file() {
            Some(std::fs::read_to_string(&jinja).with_context(|| format!("{}", jinja.display()))?)
        } else {
            None
        };
        let config_name = config_path.display().to_string();
        Self::from_parts(
            &path.display().to_string(),
            &json,
            config_text.as_deref().map(|t| (config_name.as_str(), t)),
            jinja_text,
        )
    }

    /// Builds a tokenizer from the contents of its files: `json` of `tokenizer.json`
    /// (`name` names it in errors), `config` as `(name, text)` of
    /// `tokenizer_config.json`, and the text of `chat_template.jinja`, used when the config
    /// has no `chat_template`. [`Tokenizer::open`] reads the files and calls this; the
    /// fuzz target calls it with bytes.
    pub fn from_parts(
        name: &str,
        json: &[u8],
        config: Option<(&str, &str)>,
        jinja: Option<String>,
    ) -> Result<Self> {
        // Syntax first, for a plain message (and see `without_panics`).
        serde_json::from_slice::<serde::de::IgnoredAny>(json)
            .map_err(|e| anyhow!("{name}: not valid JSON: {e}"))?;
        let inner = without_panics(|| tokenizers::Tokenizer::from_bytes(json))
            .map_err(|e| anyhow!("{name}: cannot read the tokenizer: {e}"))?
            .map_err(|e| anyhow!("{name}: cannot read the tokenizer: {e}"))?;
        let config = match config {
            Some((config_name, text)) => Some(
                serde_json::from_str::<Value>(text)
                    .with_context(|| format!("{config_name}: not valid JSON"))?,
            ),
            None => None,
        };
        let chat_template = config
            .as_ref()
            .and_then(|c| c.get("chat_template"))
            .and_then(template_of)
            .or(jinja);
        Ok(Tokenizer {
            inner,
            config,
            chat_template,
        })
    }

    /// Token ids of `text`; `special` adds the tokenizer's special tokens (BOS).
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        let enc = without_panics(|| self.inner.encode(text, special))
            .map_err(|e| anyhow!("tokenizing the prompt: {e}"))?
            .map_err(|e| anyhow!("tokenizing the prompt: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        without_panics(|| self.inner.decode(ids, true))
            .map_err(|e| anyhow!("detokenizing: {e}"))?
            .map_err(|e| anyhow!("detokenizing: {e}"))
    }

    /// A special token of tokenizer_config.json (`bos_token`, `eos_token`, ...), given
    /// as a string or as an added-token object.
    fn special(&self, key: &str) -> String {
        match self.config.as_ref().and_then(|c| c.get(key)) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => o
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        }
    }

    /// The id of tokenizer_config.json's `eos_token`, when it names a token of the
    /// vocabulary.
    pub fn eos_token_id(&self) -> Option<u32> {
        let eos = self.special("eos_token");
        (!eos.is_empty())
            .then(|| self.inner.token_to_id(&eos))
            .flatten()
    }

    /// The prompt `user` rendered through the chat template, as transformers'
    /// `apply_chat_template(messages, add_generation_prompt=True)` renders it.
    pub fn chat_prompt(&self, user: &str) -> Result<String> {
        self.render_messages(&[ChatMessage {
            role: "user".into(),
            content: user.into(),
        }])
        .map_err(|e| match self.chat_template {
            None => anyhow!("--chat: {e}"),
            Some(_) => e,
        })
    }

    /// `messages` rendered through the chat template with the generation prompt.
    pub fn render_messages(&self, messages: &[ChatMessage]) -> Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            anyhow!("the model folder has no chat template (tokenizer_config.json `chat_template`)")
        })?;
        render_chat(
            template,
            messages,
            &self.special("bos_token"),
            &self.special("eos_token"),
        )
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// system, user, assistant, ...
    pub role: String,
    /// Its text.
    pub content: String,
}

/// Runs `f`, turning a panic into an error carrying its message. The `tokenizers` crate
/// panics on some malformed files instead of returning an error (0.21.4: a syntax error
/// inside `decoder` fails an `expect` while loading; a post-processor template naming a
/// special token it does not define fails a map lookup in every `encode`). A model
/// folder is user input, so those must end in an error naming the file, not a crash.
///
/// The panic is kept quiet (nothing printed, and a fuzzing harness's hook, which aborts,
/// is not called) on this thread only: a process-wide hook installed once defers to the
/// previous one except while this thread is inside `f`.
fn without_panics<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    thread_local! {
        static QUIET: Cell<bool> = const { Cell::new(false) };
    }
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    result.map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        format!("the tokenizers crate panicked: {message}")
    })
}

/// The template of a `chat_template` value: a string, or a list of `{name, template}` of
/// which the one named `default`.
fn template_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => items
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// Renders a chat template for `messages` with a generation prompt, in transformers'
/// Jinja settings (trim_blocks, lstrip_blocks, loop controls, Python string methods,
/// `raise_exception`).
pub fn render_chat(
    template: &str,
    messages: &[ChatMessage],
    bos: &str,
    eos: &str,
) -> Result<String> {
    let mut env = minijinja::Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                msg,
            ))
        },
    );
    let ctx = minijinja::context! {
        messages => messages
            .iter()
            .map(|m| minijinja::context! { role => m.role, content => m.content })
            .collect::<Vec<_>>(),
        add_generation_prompt => true,
        bos_token => bos,
        eos_token => eos,
    };
    env.render_str(template, ctx)
        .map_err(|e| anyhow!("rendering the chat template: {e}"))
}

/// Streaming text from a growing list of ids. Each step decodes a short window, the ids
/// from the last emitted boundary on, and yields what it adds to the window's previous
/// text: a token's text can depend on its neighbours (a leading space dropped at the
/// start, bytes of one character split across tokens), so the window keeps the
/// token before the new ones as context, and costs the same at token 10 as at token
/// 10,000 (decoding the whole list every step would be quadratic in the reply). Text
/// ending in an incomplete UTF-8 sequence (U+FFFD) is held back until the next token
/// completes it.
pub struct Detokenizer<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    /// Where the window starts: context for the ids after `read`.
    prefix: usize,
    /// Ids before this have been emitted.
    read: usize,
}

impl<'a> Detokenizer<'a> {
    /// An empty stream.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        Detokenizer {
            tokenizer,
            ids: Vec::new(),
            prefix: 0,
            read: 0,
        }
    }

    /// Adds `id`; returns the new text to print.
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let (before, now) = self.window()?;
        if now.len() <= before.len() || now.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        let new = added(&before, &now);
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(new)
    }

    /// Whatever is still held back (at the end of the stream).
    pub fn finish(&mut self) -> Result<String> {
        let (before, now) = self.window()?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(added(&before, &now))
    }

    /// The window's text without and with the ids not yet emitted.
    fn window(&self) -> Result<(String, String)> {
        let before = self.tokenizer.decode(&self.ids[self.prefix..self.read])?;
        let now = self.tokenizer.decode(&self.ids[self.prefix..])?;
        Ok((before, now))
    }
}

/// What `now` adds to `before`: its rest when it extends it, else (a decoder that revised
/// earlier text, rare) from where they differ; what was printed cannot be taken back.
fn added(before: &str, now: &str) -> String {
    match now.strip_prefix(before) {
        Some(rest) => rest.to_owned(),
        None => {
            let common = before
                .char_indices()
                .zip(now.chars())
                .find(|((_, a), b)| a != b)
                .map_or(before.len().min(now.len()), |((i, _), _)| i);
            now.get(common..).unwrap_or_default().to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files of one input of the `tokenizer` fuzz target (as `fuzz/src/lib.rs`
    /// joins them): tokenizer.json, then tokenizer_config.json (empty: none), then
    /// chat_template.jinja.
    fn fuzz_input(folder: &str, name: &str) -> Result<Tokenizer> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz")
            .join(folder)
            .join(name);
        let data = std::fs::read(&path).unwrap();
        let sep = b"\n--8<--\n";
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut rest = data.as_slice();
        while let Some(at) = rest.windows(sep.len()).position(|w| w == sep) {
            parts.push(&rest[..at]);
            rest = &rest[at + sep.len()..];
        }
        parts.push(rest);
        let text = |p: &[u8]| std::str::from_utf8(p).unwrap().to_owned();
        let config = parts.get(1).filter(|p| !p.is_empty()).map(|p| text(p));
        Tokenizer::from_parts(
            "tokenizer.json",
            parts[0],
            config.as_deref().map(|c| ("tokenizer_config.json", c)),
            parts.get(2).map(|p| text(p)),
        )
    }

    #[test]
    fn a_syntax_error_inside_the_decoder_is_an_error_naming_the_file() {
        // Found by the fuzzer: tokenizers 0.21.4 panics (`expect("Helper")`) on it.
        let err = fuzz_input("regressions/tokenizer", "decoder-syntax-error")
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.starts_with("tokenizer.json: not valid JSON: expected `:`"),
            "{err}"
        );
    }

    #[test]
    fn a_template_naming_an_undefined_special_token_fails_encode_with_an_error() {
        // Found by the fuzzer: tokenizers 0.21.4 loads it, then panics in every encode
        // (its TemplateProcessing looks the token up with `[]`).
        let t = fuzz_input("regressions/tokenizer", "template-unknown-special-token").unwrap();
        let err = t.encode("hello", true).unwrap_err().to_string();
        assert!(
            err.starts_with("tokenizing the prompt: the tokenizers crate panicked: "),
            "{err}"
        );
        // Without special tokens the template is not applied; the tokenizer still works,
        // and a caught panic left nothing behind.
        assert!(!t.encode("hello", false).unwrap().is_empty());
    }

    #[test]
    fn streamed_text_is_the_whole_decode() {
        // Byte-level BPE splits the emoji and accents over tokens; word-level joins
        // words with spaces the window must not lose.
        for name in ["bpe-bytelevel", "wordlevel+config"] {
            let t = fuzz_input("corpus/tokenizer", name).unwrap();
            let text = "Hello  world, ünïcödé 🙂 t7 t8 t9 again and again";
            let ids = t.encode(text, false).unwrap();
            let mut d = Detokenizer::new(&t);
            let mut streamed = String::new();
            for &id in &ids {
                streamed.push_str(&d.push(id).unwrap());
            }
            streamed.push_str(&d.finish().unwrap());
            assert_eq!(streamed, t.decode(&ids).unwrap(), "{name}");
        }
    }

    #[test]
    fn the_tokenizer_seeds_load_encode_and_decode() {
        for name in ["wordlevel+config", "wordlevel+jinja", "bpe-bytelevel"] {
            let t = fuzz_input("corpus/tokenizer", name).unwrap();
            let ids = t.encode("t7 t8", true).unwrap();
            assert!(!ids.is_empty(), "{name}");
            t.decode(&ids).unwrap();
            if name.starts_with("wordlevel") {
                assert!(t.chat_prompt("t7").unwrap().contains("t7"), "{name}");
            }
        }
    }

    fn user(text: &str) -> Vec<ChatMessage> {
        vec![ChatMessage {
            role: "user".into(),
            content: text.into(),
        }]
    }

    #[test]
    fn a_conversation_renders_every_turn_in_order() {
        let t = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}\
                 {% if add_generation_prompt %}[assistant:{% endif %}";
        let messages = vec![
            ChatMessage {
                role: "system".into(),
                content: "be brief".into(),
            },
            ChatMessage {
                role: "user".into(),
                content: "hi".into(),
            },
            ChatMessage {
                role: "assistant".into(),
                content: "hello".into(),
            },
            ChatMessage {
                role: "user".into(),
                content: "again".into(),
            },
        ];
        assert_eq!(
            render_chat(t, &messages, "", "").unwrap(),
            "[system:be brief][user:hi][assistant:hello][user:again][assistant:"
        );
    }

    #[test]
    fn a_gemma_style_template_renders_the_user_turn_and_the_generation_prompt() {
        let t = "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n\
                 {{ message['content'] | trim }}<end_of_turn>\n{% endfor %}\
                 {% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";
        let s = render_chat(t, &user(" hi "), "<bos>", "<eos>").unwrap();
        assert_eq!(
            s,
            "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn python_string_methods_and_raise_exception_work() {
        let t = "{% if not messages[0].content.startswith('h') %}{{ raise_exception('no') }}{% endif %}\
                 {{ messages[0].content.upper() }}";
        assert_eq!(render_chat(t, &user("hello"), "", "").unwrap(), "HELLO");
        let err = render_chat(t, &user("bye"), "", "")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no"), "{err}");
    }
}
