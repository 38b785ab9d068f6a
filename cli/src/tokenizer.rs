//! A model folder's tokenizer: `tokenizer.json` (crate `tokenizers`), the chat template
//! of `tokenizer_config.json` (rendered with minijinja as transformers renders it), and
//! incremental detokenization for streaming.

use std::path::Path;

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
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| anyhow!("{}: cannot read the tokenizer: {e}", path.display()))?;
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.is_file() {
            let text = std::fs::read_to_string(&config_path)
                .with_context(|| format!("{}", config_path.display()))?;
            Some(
                serde_json::from_str::<Value>(&text)
                    .with_context(|| format!("{}: not valid JSON", config_path.display()))?,
            )
        } else {
            None
        };
        let mut chat_template = config
            .as_ref()
            .and_then(|c| c.get("chat_template"))
            .and_then(template_of);
        let jinja = dir.join("chat_template.jinja");
        if chat_template.is_none() && jinja.is_file() {
            chat_template = Some(
                std::fs::read_to_string(&jinja).with_context(|| format!("{}", jinja.display()))?,
            );
        }
        Ok(Tokenizer {
            inner,
            config,
            chat_template,
        })
    }

    /// Token ids of `text`; `special` adds the tokenizer's special tokens (BOS).
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, special)
            .map_err(|e| anyhow!("tokenizing the prompt: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
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

    /// The prompt `user` rendered through the chat template, as transformers'
    /// `apply_chat_template(messages, add_generation_prompt=True)` renders it.
    pub fn chat_prompt(&self, user: &str) -> Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            anyhow!("--chat: the model folder has no chat template (tokenizer_config.json `chat_template`)")
        })?;
        render_chat(
            template,
            user,
            &self.special("bos_token"),
            &self.special("eos_token"),
        )
    }
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

/// Renders a chat template for one user message with a generation prompt, in
/// transformers' Jinja settings (trim_blocks, lstrip_blocks, loop controls, Python string
/// methods, `raise_exception`).
pub fn render_chat(template: &str, user: &str, bos: &str, eos: &str) -> Result<String> {
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
        messages => vec![minijinja::context! { role => "user", content => user }],
        add_generation_prompt => true,
        bos_token => bos,
        eos_token => eos,
    };
    env.render_str(template, ctx)
        .map_err(|e| anyhow!("rendering the chat template: {e}"))
}

/// Streaming text from a growing list of ids: each step decodes the whole list and
/// yields what was not yet printed. Text ending in an incomplete UTF-8 sequence (U+FFFD)
/// is held back until the next token completes it.
pub struct Detokenizer<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    printed: String,
}

impl<'a> Detokenizer<'a> {
    /// An empty stream.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        Detokenizer {
            tokenizer,
            ids: Vec::new(),
            printed: String::new(),
        }
    }

    /// Adds `id`; returns the new text to print.
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        Ok(self.advance(text))
    }

    /// Whatever is still held back (at the end of the stream).
    pub fn finish(&mut self) -> Result<String> {
        let text = self.tokenizer.decode(&self.ids)?;
        Ok(self.advance(text))
    }

    fn advance(&mut self, text: String) -> String {
        let new = match text.strip_prefix(self.printed.as_str()) {
            Some(rest) => rest.to_owned(),
            // The decoder revised earlier text (rare): print from where they differ; what
            // was printed cannot be taken back.
            None => {
                let common = self
                    .printed
                    .char_indices()
                    .zip(text.chars())
                    .find(|((_, a), b)| a != b)
                    .map_or(self.printed.len().min(text.len()), |((i, _), _)| i);
                text.get(common..).unwrap_or_default().to_owned()
            }
        };
        self.printed = text;
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gemma_style_template_renders_the_user_turn_and_the_generation_prompt() {
        let t = "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n\
                 {{ message['content'] | trim }}<end_of_turn>\n{% endfor %}\
                 {% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";
        let s = render_chat(t, " hi ", "<bos>", "<eos>").unwrap();
        assert_eq!(
            s,
            "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn python_string_methods_and_raise_exception_work() {
        let t = "{% if not messages[0].content.startswith('h') %}{{ raise_exception('no') }}{% endif %}\
                 {{ messages[0].content.upper() }}";
        assert_eq!(render_chat(t, "hello", "", "").unwrap(), "HELLO");
        let err = render_chat(t, "bye", "", "").unwrap_err().to_string();
        assert!(err.contains("no"), "{err}");
    }
}
