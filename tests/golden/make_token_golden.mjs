// Golden token ids from an independent tokenizer implementation: @lenml/tokenizers, a
// dependency-free JavaScript port of transformers.js's tokenizers (Apache-2.0).
//
// Usage (from a directory where `npm install @lenml/tokenizers@3.7.2` was run; make_all.sh
// does all of this):
//   node tests/golden/make_token_golden.mjs DIR
// DIR holds tokenizer.json and tokenizer_config.json; DIR/golden.json is written (or OUT, if
// given as a second argument). For every text: ids without and with special tokens, and the
// text decoded back (special tokens kept, no clean-up of spaces).

import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

// Resolved from the working directory, so the repository carries no node_modules.
const require = createRequire(join(process.cwd(), "noop.js"));
const entry = require.resolve("@lenml/tokenizers");
const { TokenizerLoader } = await import(pathToFileURL(entry).href);
const libVersion = JSON.parse(readFileSync(join(dirname(entry), "..", "package.json"), "utf8")).version;

export const TEXTS = [
  "",
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  " leading space",
  "trailing spaces   ",
  "multiple    spaces   between  words",
  "\t\ttabs\tand\nnewlines\n\n\nend",
  "\r\nWindows line endings\r\n",
  "   \n  \t  ",
  "a\n\n\nb\n \n c",
  "1234567890",
  "3.14159, 2,718,281 and -42 or +7e-3",
  "Call 555-0123 at 10:45pm on 2024-03-15.",
  "I'm sure they'll say it's fine; we've done what you'd do.",
  "DON'T SHOUT, IT'S LOUD. She'S here.",
  "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
  'fn main() {\n\tprintln!("{}", 1 << 20);\n}',
  '<div class="x">&nbsp;<a href="https://example.com/p?q=1&x=y#f">link</a></div>',
  "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
  "I love 🦀 and 🐍! 👍🏽 👨‍👩‍👧‍👦 🇫🇷",
  "你好，世界！这是一个测试。",
  "日本語のテキストとカタカナ、ひらがな。",
  "한국어 문장입니다.",
  "Café déjà vu, naïve façade, Ångström, Øresund, señor, Straße.",
  "Ελληνικά και русский текст.",
  "مرحبا بالعالم و עברית",
  "∑ x² ≤ ∞ → ∀ε>0 ∃δ; ½ ¼ Ⅻ ٣",
  "e\u0301 versus \u00e9, and Å vs A\u030a",
  "word\u00a0nbsp\u2003emspace\u200bzero-width",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "!!!!!!!!???...----====____****",
  "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "text<|endoftext|>more text",
  "<|im_start|> spaced <|im_end|>",
  "<think>\nreasoning\n</think>\n\nanswer",
  "Over the years, the small town had grown into a bustling city. Its streets, once quiet, " +
    "now hummed with traffic; its markets sold goods from every corner of the world. Yet the " +
    "old clock tower still chimed at noon, as it had for 150 years.",
  "\u0000\u0001 control \u0007 bytes \u001b[0m",
  "ſ and 'ſ and I'M and 'LL",
  "tab\tat\tend\t",
];

function main() {
  const dir = resolve(process.argv[2] ?? "");
  if (!process.argv[2]) throw new Error("usage: make_token_golden.mjs DIR [OUT]");
  const out = resolve(process.argv[3] ?? join(dir, "golden.json"));
  const tokenizerJSON = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const cases = TEXTS.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false });
    const ids_special = tok.encode(text, { add_special_tokens: true });
    // The library refuses to decode nothing; nothing decodes to "".
    const decoded = ids.length === 0 ? "" : tok.decode(ids, {
      skip_special_tokens: false,
      clean_up_tokenization_spaces: false,
    });
    return { text, ids, ids_special, decoded };
  });
  // One case per line keeps diffs of regenerated goldens readable.
  const head = JSON.stringify({
    generator: "tests/golden/make_token_golden.mjs",
    implementation: `@lenml/tokenizers ${libVersion}`,
  }).slice(0, -1);
  const body = cases.map((c) => "  " + JSON.stringify(c)).join(",\n");
  writeFileSync(out, `${head},\n "cases": [\n${body}\n ]\n}\n`);
  console.log(`${out}: ${cases.length} texts`);
}

main();
