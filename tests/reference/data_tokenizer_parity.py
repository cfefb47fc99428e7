"""Reference for tests/data/tokenizer_parity_test.cpp.

  build OUTDIR            train small byte-level BPE tokenizers with HF `tokenizers` in the
                          Qwen2 and Llama 3 structures, write them with a test corpus and
                          the ids / decodes HF gives (OUTDIR/expected.json)
  encode TOKENIZER CORPUS OUT
                          load a tokenizer.json (e.g. one lazytrain wrote) and write the ids
                          and decodes HF gives for each string of the CORPUS JSON list

Exits non-zero on any failure, so the C++ test fails with this output.
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

# The split patterns published in the Qwen2 and Llama 3 tokenizer.json files.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is you that it he was for on are as with his they I at be this have "
         "from or one had by word but not what all were we when your can said there use an each "
         "which she do how their if will up other about out many then them these so some her "
         "would make like him into time has look two more write go see number no way could people "
         "my than first water been call who oil its now find long down day did get come made may "
         "part café naïve résumé Straße größer über déjà vu façade "
         "你好 世界 中文 测试 日本語 テキスト ひらがな 안녕하세요 한국어 "
         "Привет мир Ελληνικά γλώσσα مرحبا بالعالم नमस्ते दुनिया "
         "😀 👍🏽 🚀 🇫🇷 ❤️ "
         "def return import class self None True False print range len for while").split()


def training_corpus(n=3000, seed=1):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(3, 15)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.7:
                w = rng.choice(WORDS)
                if rng.random() < 0.2:
                    w = w.capitalize()
                if rng.random() < 0.1:
                    w += rng.choice(["'s", "'t", "'re", "'ll", "n't"])
                parts.append(w)
            elif r < 0.85:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 7))))
            else:
                parts.append(rng.choice([",", ".", "!", "?", ":", ";", "(", ")", "{", "}", "==",
                                         "->", "...", "\"", "#", "$", "%"]))
        sep = rng.choice([" ", " ", " ", "  ", "\n", "\t"])
        out.append(sep.join(parts))
    return out


def test_corpus(seed=2):
    fixed = [
        "", " ", "  ", "\n", "\n\n\n", "a", "'s", "'S", "Hello world", "Hello, World!",
        "I'm here, you're there, they'll see, we'VE done, it'S fine, don't, DON'T",
        "12345678 3.14159 1,000,000 x=42y 0007 ١٢٣ ²³ ½",
        "a   b    c     d", "tabs\t\tand\ttabs", "trailing   ", "   leading", "line1\r\nline2\rline3",
        "nbsp\u00a0here\u00a0\u00a0two", "ideographic\u3000space", "nel\u0085line", "ls\u2028ps\u2029",
        "zwsp\u200bjoin\u200dnon\ufeffbom", "mongolian\u180eseparator",
        "café cafe\u0301 CAFE\u0301 e\u0301\u0301 \u212b \u00c5 A\u030a", "ﬁne ligature ﬀ",
        "Straße größer ÜBER", "Ελληνικά Привет мир", "مرحبا بالعالم", "नमस्ते दुनिया किताब",
        "你好，世界！这是一个测试。", "日本語のテキストとカタカナ", "안녕하세요 세계",
        "emoji 😀😀😀 👍🏽 👨‍👩‍👧 🇫🇷🇩🇪 ❤️ 🚀!", "mixed中文and English123混合",
        "def f(x):\n    return x**2  # square\n\n\nclass A:\n\tpass\n",
        "if (a<b && c>d) { return -1; } else { x += 2; }",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
        "<|endoftext|><|endoftext|>text<|endoftext|>more", "<|im_start", "<|im_end|", "<<|im_end|>>",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
        "before <tool>  call  </tool> after", "x<tool>y", "  <tool>  ",
        "zzq zzqx xzzq (zzq) zzq.", "naïve café! and café! and cafe\u0301!",
        " " * 300 + "x", "\n" * 50, "ab" * 200, "9" * 40,
    ]
    rng = random.Random(seed)
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 3 + list("0123456789") * 3 +
                [" "] * 20 + ["\n", "\t", "\r", "'", "\"", ".", ",", "!", "?", "-", "_", "#", "<", ">", "|"] +
                ["é", "e\u0301", "ß", "ñ", "你", "好", "語", "한", "😀", "👍🏽", "🇫🇷", "\u00a0", "\u3000",
                 "Σ", "σ", "ς", "ا", "न", "ि", "'s", "'LL", "<|im_end|>", "<|endoftext|>", "<tool>",
                 "<|eot_id|>", "zzq", "café!"])
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(400)]
    return fixed + fuzz


def run_on(tok, corpus):
    ids = [tok.encode(t).ids for t in corpus]
    ids_plain = [tok.encode(t, add_special_tokens=False).ids for t in corpus]
    return {
        "ids": ids,
        "ids_no_special": ids_plain,
        "decoded": [tok.decode(x, skip_special_tokens=False) for x in ids],
        "decoded_skip": [tok.decode(x, skip_special_tokens=True) for x in ids],
    }


def train(structure):
    tok = Tokenizer(models.BPE())
    if structure == "qwen2":
        tok.normalizer = normalizers.NFC()
        pattern, specials = QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    elif structure == "gpt2":
        pattern, specials = None, ["<|endoftext|>"]
    else:
        pattern = LLAMA3_PATTERN
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                    "<|end_header_id|>", "<|eot_id|>"]
    if structure == "gpt2":  # ByteLevel alone: its built-in regex and a prefix space
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=specials)
    tok.train_from_iterator(training_corpus(), trainer)
    if structure == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)]),
        ])
    # Added tokens with each flag, after training (as fine-tuning setups add them).
    tok.add_tokens([
        AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False, special=False),
        AddedToken("</tool>", lstrip=False, rstrip=True, normalized=False, special=False),
        AddedToken("zzq", single_word=True, normalized=True, special=False),
        AddedToken("cafe\u0301!", normalized=True, special=False),  # matches NFC text in qwen2
    ])
    tok.add_special_tokens([AddedToken("<|é|>", special=True, normalized=False)])
    return tok


def save_variant(tok_json, outdir, name, corpus, expected):
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok_json, f, ensure_ascii=False, indent=1)
    expected[name] = run_on(Tokenizer.from_file(path), corpus)


def build(outdir):
    corpus = test_corpus()
    expected = {}
    for structure in ("qwen2", "llama3", "gpt2"):
        tok = train(structure)
        j = json.loads(tok.to_str())
        merges = j["model"]["merges"]
        assert merges and isinstance(merges[0], list), "expected the [a, b] merge form"
        assert len(merges) > 500, f"too few merges trained: {len(merges)}"
        save_variant(j, outdir, structure, corpus, expected)
        # The older "a b" spelling of merges must give the same ids.
        j2 = json.loads(json.dumps(j))
        j2["model"]["merges"] = [" ".join(m) for m in merges]
        save_variant(j2, outdir, structure + "_string_merges", corpus, expected)
        assert expected[structure + "_string_merges"]["ids"] == expected[structure]["ids"]
        if structure == "llama3":
            j3 = json.loads(json.dumps(j))
            j3["model"]["ignore_merges"] = True  # as Llama 3's file
            save_variant(j3, outdir, "llama3_ignore_merges", corpus, expected)
    with open(os.path.join(outdir, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=False)
    with open(os.path.join(outdir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)
    print("built", sorted(expected), "on", len(corpus), "strings")


def encode(tok_path, corpus_path, out_path):
    tok = Tokenizer.from_file(tok_path)
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    result = run_on(tok, corpus)
    result["vocab_size"] = tok.get_vocab_size(with_added_tokens=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        build(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
