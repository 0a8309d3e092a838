#!/usr/bin/env node
// Hugging Face's own tokenizers (the Rust crate, through npm's @anush008/tokenizers binding), the
// reference the tokenizer.json tests compare hpctrain against. The package is installed by the
// test, never kept in the repository; this script only runs it.
//   node hf_tokenizer_reference.js --node-modules DIR TOKENIZER_JSON TEXTS_JSONL [--add-special-tokens]
// DIR holds node_modules (the test installs into its build tree). TEXTS_JSONL has one JSON string
// a line; each prints, in order, as {"ids": [...], "decoded": D, "decoded_skip_special": S}: the
// reference's ids for the text, and its decode of them keeping and skipping special tokens.
// Without --add-special-tokens the post-processor adds nothing, as for text inside a document.
'use strict';

const fs = require('fs');
const path = require('path');

function usage(message) {
  process.stderr.write(`hf_tokenizer_reference.js: ${message}\n`);
  process.exit(2);
}

function parse(argv) {
  const positional = [];
  let nodeModules = null;
  let addSpecialTokens = false;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--node-modules') {
      if (i + 1 >= argv.length) usage('--node-modules needs a directory');
      nodeModules = argv[++i];
    } else if (argv[i] === '--add-special-tokens') {
      addSpecialTokens = true;
    } else if (argv[i].startsWith('--')) {
      usage(`unknown option ${argv[i]}`);
    } else {
      positional.push(argv[i]);
    }
  }
  if (nodeModules === null || positional.length !== 2)
    usage('usage: --node-modules DIR TOKENIZER_JSON TEXTS_JSONL [--add-special-tokens]');
  const [tokenizerJson, textsJsonl] = positional;
  const binding = path.resolve(nodeModules, 'node_modules', '@anush008', 'tokenizers');
  if (!fs.existsSync(path.join(binding, 'package.json'))) usage(`${binding} is not installed`);
  for (const file of [tokenizerJson, textsJsonl])
    if (!fs.statSync(file, {throwIfNoEntry: false})?.isFile()) usage(`${file} is not a file`);
  return {binding, tokenizerJson, textsJsonl, addSpecialTokens};
}

function readTexts(file) {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines.map((line, i) => {
    let text;
    try {
      text = JSON.parse(line);
    } catch (e) {
      usage(`${file}:${i + 1}: ${e.message}`);
    }
    if (typeof text !== 'string') usage(`${file}:${i + 1}: not a JSON string`);
    return text;
  });
}

async function main() {
  const args = parse(process.argv.slice(2));
  const texts = readTexts(args.textsJsonl);
  const {Tokenizer} = require(args.binding);
  const tokenizer = Tokenizer.fromFile(path.resolve(args.tokenizerJson));
  // One text at a time, in order: an encodeBatch would spread them over rayon's threads.
  const out = [];
  for (const text of texts) {
    const ids = (await tokenizer.encode(text, null, {addSpecialTokens: args.addSpecialTokens})).getIds();
    const decoded = await tokenizer.decode(ids, false);
    const decodedSkipSpecial = await tokenizer.decode(ids, true);
    out.push(JSON.stringify({ids, decoded, decoded_skip_special: decodedSkipSpecial}));
  }
  process.stdout.write(out.length ? out.join('\n') + '\n' : '');
}

main().catch((e) => {
  process.stderr.write(`hf_tokenizer_reference.js: ${e.message}\n`);
  process.exit(1);
});
