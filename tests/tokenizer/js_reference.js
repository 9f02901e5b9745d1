// Expected ids for the tokenizer differential test, computed by an independent
// implementation of the Hugging Face algorithms: the JavaScript tokenizers of the npm
// package @lenml/tokenizers (a fork of transformers.js), run under node.
// Usage: node js_reference.js LENML_PACKAGE_DIR TOKENIZERS_DIR CORPUS_JSONL OUT_DIR
// Writes OUT_DIR/<name>.json: {"ids": [[...] per corpus line]} (no special tokens).
"use strict";
const fs = require("fs");
const path = require("path");
const vm = require("vm");

const [pkg, tokDir, corpusPath, outDir] = process.argv.slice(2);
vm.runInThisContext(fs.readFileSync(path.join(pkg, "dist", "main.global.js"), "utf8"));
const { TokenizerLoader } = globalThis.Tokenizers;
const lines = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
const texts = lines.map((l) => JSON.parse(l).text);
fs.mkdirSync(outDir, { recursive: true });
for (const name of fs.readdirSync(tokDir).sort()) {
  const dir = path.join(tokDir, name);
  if (!fs.existsSync(path.join(dir, "tokenizer.json"))) continue;
  const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
  const ids = texts.map((t) => tokenizer.encode(t, { add_special_tokens: false }));
  fs.writeFileSync(path.join(outDir, name + ".json"), JSON.stringify({ ids }));
}
