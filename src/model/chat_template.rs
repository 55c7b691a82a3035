//! Chat templates: the model's own Jinja template, rendered with minijinja the way Hugging Face
//! transformers renders it (jinja2 with `trim_blocks` and `lstrip_blocks`, Python string
//! methods, `raise_exception`), and checked once at load time on a probe conversation.

use minijinja::{context, Environment, Error, ErrorKind, Value};
use serde::Serialize;

use super::chat_literal::Escapes;
use super::tokenizer::{ChatPrompt, Tokenizer};

/// The template used when a model carries none: ChatML, which SmolLM, Qwen and many others use.
pub const CHATML_TEMPLATE: &str = "{%- for message in messages %}\
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{%- endfor %}\
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/// The template used for a Gemma model that carries none (a base model's file): Gemma's turns,
/// as llama.cpp's built-in `gemma` template writes them (a system message goes before the first
/// user message's text), led by the BOS token as Gemma's own templates are (chat prompts are
/// encoded as the template spells them, with no token added).
pub const GEMMA_TEMPLATE: &str = "{{- bos_token -}}{%- if messages and messages[0]['role'] == 'system' -%}\
{%- set prefix = messages[0]['content'] | trim + '\n\n' -%}{%- set turns = messages[1:] -%}\
{%- else -%}{%- set prefix = '' -%}{%- set turns = messages -%}{%- endif -%}\
{%- for message in turns -%}\
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\
{{- '<start_of_turn>' + role + '\n' + (prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' -}}\
{%- endfor -%}\
{%- if add_generation_prompt %}{{- '<start_of_turn>model\n' }}{%- endif %}";

/// Built-in templates by architecture, for files that carry none (as llama.cpp picks one); any
/// other architecture gets ChatML.
const BUILT_IN: &[(&str, &str, &str)] = &[("gemma3", "gemma", GEMMA_TEMPLATE)];

/// Longest template source accepted; real ones are a few KiB, the largest about 20 KiB.
pub const MAX_TEMPLATE_BYTES: usize = 1 << 20;

/// Marks errors raised by the template's own `raise_exception` call.
const RAISED_MARK: &str = "raise_exception: ";
const TEMPLATE_NAME: &str = "chat_template";

/// One message of a conversation, as templates see it (`message.role`, `message['content']`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// The template source is longer than [`MAX_TEMPLATE_BYTES`].
    TooLong { len: usize, max: usize },
    /// The template does not parse.
    Syntax { detail: String },
    /// The template refused the conversation through `raise_exception(message)`.
    Raised { message: String },
    /// Rendering failed: an unknown filter or method, a type error, ...
    Render { detail: String },
    /// The load-time check failed: the template cannot render a plain conversation.
    Probe { problem: String },
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateError::TooLong { len, max } => {
                write!(f, "chat template is {len} bytes, more than the {max} allowed")
            }
            TemplateError::Syntax { detail } => write!(f, "chat template does not parse: {detail}"),
            TemplateError::Raised { message } => {
                write!(f, "chat template refused the conversation: {message}")
            }
            TemplateError::Render { detail } => write!(f, "chat template failed: {detail}"),
            TemplateError::Probe { problem } => write!(
                f,
                "chat template fails its load-time check (system, user, assistant, user \
                 conversation): {problem}"
            ),
        }
    }
}

impl std::error::Error for TemplateError {}

/// A checked chat template, ready to render prompts. `Send + Sync`; rendering takes `&self`.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// The built-in template's name when the model carries none.
    built_in: Option<&'static str>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("built_in", &self.built_in).finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The model's template (or the built-in one for `arch` when it has none), with its bos/eos
    /// texts, checked.
    pub fn from_tokenizer(tok: &Tokenizer, arch: &str) -> Result<Self, TemplateError> {
        let bos = tok.bos_text().unwrap_or_default();
        let eos = tok.eos_text().unwrap_or_default();
        Self::for_model(tok.chat_template(), &bos, &eos, arch)
    }

    /// `source`, or when `None` or blank the built-in template of architecture `arch` (ChatML
    /// for one without); checked on a probe conversation.
    pub fn for_model(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
        arch: &str,
    ) -> Result<Self, TemplateError> {
        match source {
            Some(s) if !s.trim().is_empty() => Self::new(s, bos_token, eos_token),
            _ => {
                let (name, source) =
                    BUILT_IN.iter().find(|b| b.0 == arch).map_or(("chatml", CHATML_TEMPLATE), |b| (b.1, b.2));
                let mut t = Self::new(source, bos_token, eos_token)?;
                t.built_in = Some(name);
                Ok(t)
            }
        }
    }

    /// Which template this is: `model` (the file's own), or `built-in NAME` when the file
    /// carries none.
    pub fn origin(&self) -> String {
        self.built_in.map_or_else(|| "model".to_string(), |n| format!("built-in {n}"))
    }

    /// Compiles `source` and checks it by rendering a probe conversation.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, TemplateError> {
        if source.len() > MAX_TEMPLATE_BYTES {
            return Err(TemplateError::TooLong { len: source.len(), max: MAX_TEMPLATE_BYTES });
        }
        let mut env = Environment::new();
        // transformers compiles chat templates with these two jinja2 options.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| TemplateError::Syntax { detail: describe(&e) })?;
        let t = ChatTemplate { env, bos_token: bos_token.to_owned(), eos_token: eos_token.to_owned(), built_in: None };
        t.probe()?;
        Ok(t)
    }

    /// Whether this is a built-in template rather than the model's own.
    pub fn is_fallback(&self) -> bool {
        self.built_in.is_some()
    }

    /// The prompt for `messages`; with `add_generation_prompt`, ending where the assistant's
    /// reply begins.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, TemplateError> {
        self.render_with_kwargs(messages, add_generation_prompt, &serde_json::Map::new())
    }

    /// Like [`render`](Self::render), with extra template variables (OpenAI-style servers'
    /// `chat_template_kwargs`, e.g. Qwen3's `enable_thinking`). They cannot replace the
    /// variables this type sets (`messages`, `bos_token`, ...).
    pub fn render_with_kwargs(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, TemplateError> {
        let tmpl = self.env.get_template(TEMPLATE_NAME).map_err(|e| TemplateError::Render { detail: describe(&e) })?;
        tmpl.render(context! {
            messages => Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            tools => Value::from(()),
            ..Value::from_serialize(kwargs)
        })
        .map_err(classify)
    }

    /// The prompt for `messages`, with the special-token strings the messages spell (roles and
    /// content) marked as literal text, for [`Tokenizer::encode_chat`]: a user who writes
    /// `<|im_end|>\n<|im_start|>system` gets those characters, not a system turn. `tok` finds
    /// the special-token strings. The text is what [`render_with_kwargs`](Self::render_with_kwargs)
    /// gives, unless the template branches on a special-token string in content.
    pub fn render_prompt(
        &self,
        tok: &Tokenizer,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<ChatPrompt, TemplateError> {
        let mut escapes = Escapes::default();
        let mut escaped = Vec::with_capacity(messages.len());
        for m in messages {
            let role = escapes.escape(&m.role, &tok.special_token_spans(&m.role));
            let content = escapes.escape(&m.content, &tok.special_token_spans(&m.content));
            escaped.push((role, content));
        }
        if escapes.is_empty() {
            let text = self.render_with_kwargs(messages, add_generation_prompt, kwargs)?;
            return Ok(ChatPrompt { text, literal: Vec::new() });
        }
        let escaped: Vec<ChatMessage> = escaped.into_iter().map(|(r, c)| ChatMessage::new(r, c)).collect();
        let rendered = self.render_with_kwargs(&escaped, add_generation_prompt, kwargs)?;
        Ok(escapes.restore(&rendered))
    }

    /// Renders system + user + assistant + user and checks every message made it into the
    /// prompt. Templates that refuse a system role (Gemma's) are probed without it.
    fn probe(&self) -> Result<(), TemplateError> {
        let all = [
            ChatMessage::new("system", "probe-system-text"),
            ChatMessage::new("user", "probe-user-text-1"),
            ChatMessage::new("assistant", "probe-assistant-text"),
            ChatMessage::new("user", "probe-user-text-2"),
        ];
        let rendered = match self.render(&all, true) {
            Ok(s) => Ok((s, &all[..])),
            Err(TemplateError::Raised { .. }) => self.render(&all[1..], true).map(|s| (s, &all[1..])),
            Err(e) => Err(e),
        };
        let (text, probed) = rendered.map_err(|e| TemplateError::Probe { problem: e.to_string() })?;
        for m in probed {
            if !text.contains(&m.content) {
                return Err(TemplateError::Probe {
                    problem: format!("the rendered prompt omits the {} message", m.role),
                });
            }
        }
        Ok(())
    }
}

/// `raise_exception(message)`, which HF templates call to refuse a conversation.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, format!("{RAISED_MARK}{message}")))
}

fn classify(e: Error) -> TemplateError {
    if let Some(message) = e.detail().and_then(|d| d.strip_prefix(RAISED_MARK)) {
        return TemplateError::Raised { message: message.to_owned() };
    }
    TemplateError::Render { detail: describe(&e) }
}

/// The error with its line, without minijinja's multi-line source excerpt.
fn describe(e: &Error) -> String {
    let what = e.detail().map_or_else(|| e.kind().to_string(), |d| format!("{}: {d}", e.kind()));
    match e.line() {
        Some(line) => format!("{what} (line {line})"),
        None => what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> Vec<ChatMessage> {
        vec![ChatMessage::new("user", "Hi"), ChatMessage::new("assistant", "Hello!")]
    }

    #[test]
    fn tokenizer_and_template_can_be_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<ChatTemplate>();
        shared::<Tokenizer>();
    }

    #[test]
    fn chatml_fallback_renders_the_conversation() {
        let t = ChatTemplate::for_model(None, "", "<|im_end|>", "llama").unwrap();
        assert!(t.is_fallback());
        assert_eq!(t.origin(), "built-in chatml");
        let out = t.render(&conv(), true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        assert!(!t.render(&conv(), false).unwrap().ends_with("assistant\n"));
        assert!(ChatTemplate::for_model(Some("  \n"), "", "", "qwen3").unwrap().is_fallback());
    }

    #[test]
    fn a_gemma_file_without_a_template_gets_gemma_turns() {
        let t = ChatTemplate::for_model(None, "<bos>", "<eos>", "gemma3").unwrap();
        assert_eq!(t.origin(), "built-in gemma");
        let mut c = vec![ChatMessage::new("system", "Be brief.")];
        c.extend(conv());
        assert_eq!(
            t.render(&c, true).unwrap(),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n\
             <start_of_turn>model\n"
        );
        let own =
            ChatTemplate::for_model(Some("{% for m in messages %}{{ m['content'] }}{% endfor %}"), "", "", "gemma3")
                .unwrap();
        assert_eq!((own.origin(), own.is_fallback()), ("model".to_string(), false));
    }

    #[test]
    fn python_string_methods_and_special_variables_work() {
        let src = "{{ bos_token }}{% for m in messages %}{{ m.role.upper() }}:\
                   {{ m.content.strip().split(' ')|join('_') }}{% if m.content.startswith(' ') %}!\
                   {% endif %};{% endfor %}{{ eos_token }}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap_or_else(|e| panic!("{e}"));
        let out = t.render(&[ChatMessage::new("user", " a b ")], false).unwrap();
        assert_eq!(out, "<s>USER:a_b!;</s>");
    }

    #[test]
    fn trim_and_lstrip_blocks_match_transformers() {
        let src = "{% for m in messages %}\n    {% if true %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}";
        let out = ChatTemplate::new(src, "", "").unwrap().render(&conv(), false).unwrap();
        assert_eq!(out, "Hi\nHello!\n");
    }

    #[test]
    fn raise_exception_becomes_a_clear_error() {
        let src = "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}\
                   {% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";
        // Refuses the system message: the probe retries without it and passes.
        let t = ChatTemplate::new(src, "", "").unwrap();
        let err = t.render(&[ChatMessage::new("system", "x")], false).unwrap_err();
        assert_eq!(err, TemplateError::Raised { message: "first must be user".into() });
        assert!(err.to_string().contains("first must be user"));
    }

    #[test]
    fn broken_templates_fail_at_load_naming_the_problem() {
        let e = ChatTemplate::new("{% for m in messages %}", "", "").unwrap_err();
        assert!(matches!(e, TemplateError::Syntax { .. }), "{e}");

        let e = ChatTemplate::new("{{ raise_exception('never') }}", "", "").unwrap_err();
        assert!(matches!(&e, TemplateError::Probe { problem } if problem.contains("never")), "{e}");

        let e = ChatTemplate::new("{{ messages[0].content | no_such_filter }}", "", "").unwrap_err();
        assert!(matches!(&e, TemplateError::Probe { problem } if problem.contains("no_such_filter")), "{e}");

        let e = ChatTemplate::new("{{ messages[1].content }}", "", "").unwrap_err();
        assert!(matches!(&e, TemplateError::Probe { problem } if problem.contains("omits")), "{e}");

        let long = "x".repeat(MAX_TEMPLATE_BYTES + 1);
        assert!(matches!(ChatTemplate::new(&long, "", ""), Err(TemplateError::TooLong { .. })));
    }
}
