"""Reference for tests/data/tokenizer_spm_parity_test.cpp.

  build OUTDIR   train a small BPE tokenizer with HF `tokenizers` in the SentencePiece style
                 (the byte tokens <0x00>..<0xFF> in the model vocabulary, byte_fallback,
                 <unk>, fuse_unk), write it in the structures of Llama 2 (legacy
                 Prepend + Replace normalizer), Mistral v0.3 / non-legacy Llama (Metaspace
                 "first", split false), Gemma (Replace normalizer, Split on " ") and plain
                 Metaspace, plus variants of each option (prepend schemes, split, the older
                 add_prefix_space spelling, partial byte tokens with and without fuse_unk,
                 ignore_merges, Strip, Whitespace / WhitespaceSplit / Punctuation, subword
                 affixes). For every variant OUTDIR/expected.json holds the ids and decodes
                 HF gives on a corpus (OUTDIR/corpus.json) and the decodes of random id lists.

Every tokenizer.json is read back with Tokenizer.from_file before its expectations are made,
so the expectations are what HF computes from exactly the file the C++ test loads. Exits
non-zero on any failure, so the C++ test fails with this output.
"""
import json
import os
import random
import sys

# HF's Strip decoder panics on some inputs (caught below); one line each, not a backtrace.
os.environ["RUST_BACKTRACE"] = "0"

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

from data_tokenizer_parity import test_corpus, training_corpus

SPACE = "\u2581"  # "▁", SentencePiece's meta space
BYTE_TOKENS = ["<0x%02X>" % b for b in range(256)]
SPECIALS = ["<unk>", "<s>", "</s>"]


def spm_corpus(seed=3):
    fixed = [
        SPACE, SPACE * 2 + "hello", "hello" + SPACE + "world", " " + SPACE + "x", SPACE + " ",
        "<0x41>", "<0x41><0xE4>", "<s>", "<s>hello</s>", "<s> hello", " <s>", "hello <s> world",
        "<unk>", "<unk><unk>", "[INST] What is 2+2? [/INST] 4</s>", "[INST][/INST]",
        "x" + SPACE + "y and x" + SPACE + "yz", "<start_of_turn>user\nhi<end_of_turn>\n",
        "Ω ☃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦀🧬 ꙮ ᚠᛇᚻ ⅷ", "rare: \u0fd5 \U0001f9ff \u2603\u2603 \U00010348",
        "\x00\x01\x7f ctrl", "a\x00b", "   ", "\t", " \n ", "a  ", "  a", "trailing\n", "\n\nx",
        " zzq", "zzq ", "<tool>x", "x <tool> y", "A" * 100, " ".join(["the"] * 80),
        "The quick brown fox jumps over the lazy dog. " * 5,
    ]
    rng = random.Random(seed)
    alphabet = (list("abcdefghijklmnopqrstuvwxyz") * 3 + [" "] * 25 + ["\n", "\t", "  "] +
                [SPACE, "<s>", "</s>", "<unk>", "[INST]", "<0x41>", "Ω", "🦀", "☃", "ꙮ", "é", "你"])
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(150)]
    return test_corpus() + fixed + fuzz


def train_base(**affixes):
    """The SentencePiece-style vocabulary: specials, then the 256 byte tokens, then BPE."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True, **affixes))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    # limit_alphabet leaves rare characters out, so the corpus needs byte fallback.
    trainer = trainers.BpeTrainer(vocab_size=1400, min_frequency=2, show_progress=False, limit_alphabet=150,
                                  special_tokens=SPECIALS + BYTE_TOKENS, **affixes)
    tok.train_from_iterator(training_corpus(), trainer)
    j = json.loads(tok.to_str())
    # As in Llama 2 / Mistral / Gemma, the byte tokens are plain vocabulary entries, not added tokens.
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in BYTE_TOKENS]
    assert len(j["model"]["merges"]) > 500, f"too few merges trained: {len(j['model']['merges'])}"
    assert all(j["model"]["vocab"][b] == 3 + i for i, b in enumerate(BYTE_TOKENS))
    return j


def llama_decoder(strip_start=1, strip_stop=0):
    return decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                              decoders.Strip(content=" ", left=strip_start, right=strip_stop)])


def bos_template(tok):
    return processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                         special_tokens=[("<s>", tok.token_to_id("<s>"))])


def structure(base, name):
    """The base vocabulary in the structure `name`, with added tokens of every flag."""
    tok = Tokenizer.from_str(json.dumps(base))
    tok.normalizer = None
    tok.pre_tokenizer = None
    tok.post_processor = None
    extra = []
    if name == "metaspace":
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
        tok.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    elif name == "mistral":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first", split=False)
        tok.decoder = llama_decoder()
        tok.post_processor = bos_template(tok)
    elif name == "llama2_legacy":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
        tok.decoder = llama_decoder()
        tok.post_processor = bos_template(tok)
    elif name == "gemma":
        tok.normalizer = normalizers.Replace(" ", SPACE)
        tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
        tok.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
        tok.post_processor = bos_template(tok)
        extra = ["<start_of_turn>", "<end_of_turn>"]
    elif name == "metaspace_first_digits":
        tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first", split=True)])
        tok.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="first", split=True)
    elif name == "metaspace_never_punctuation":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Punctuation(),
            pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)])
        tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                         decoders.Metaspace(replacement=SPACE, prepend_scheme="never")])
    elif name == "whitespace_split":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)])
        tok.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="always")
    elif name == "whitespace":
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.decoder = None  # HF joins the tokens with spaces
    elif name == "affixes":
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.decoder = decoders.BPEDecoder(suffix="</w>")
    else:
        raise ValueError(name)
    tok.add_tokens([
        AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False, special=False),
        AddedToken("zzq", single_word=True, normalized=True, special=False),
        AddedToken("x" + SPACE + "y", normalized=False, special=False),  # decoders see its ▁
    ])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<|é|>", "[INST]", "[/INST]"] + extra])
    return json.loads(tok.to_str())


def decode_cases(j, n=300, seed=4):
    """Random id lists: mostly byte tokens (invalid UTF-8 runs among them), specials, the
    rest of the vocabulary, added tokens and an id no one knows."""
    rng = random.Random(seed)
    vocab = sorted(j["model"]["vocab"].values())
    added = [a["id"] for a in j["added_tokens"]]
    cases = [[], [3 + 0xE4, 3 + 0xBD], [3 + 0xE4, 3 + 0xBD, 3 + 0xA0], [3 + 0x41, 3 + 0xFF, 3 + 0x42]]
    for _ in range(n):
        case = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.45:
                case.append(3 + rng.randrange(256))
            elif r < 0.55:
                case.append(rng.choice(added))
            elif r < 0.57:
                case.append(10 ** 6)
            else:
                case.append(rng.choice(vocab))
        cases.append(case)
    return cases


def hf_decode(tok, ids, skip):
    try:
        return tok.decode(ids, skip_special_tokens=skip)
    except BaseException:  # HF's Strip panics on some inputs (pyo3 PanicException)
        return None


def run_on(tok, corpus, cases):
    ids = [tok.encode(t).ids for t in corpus]
    return {
        "ids": ids,
        "ids_no_special": [tok.encode(t, add_special_tokens=False).ids for t in corpus],
        "decoded": [hf_decode(tok, x, False) for x in ids],
        "decoded_skip": [hf_decode(tok, x, True) for x in ids],
        "decode_cases": cases,
        "decode_cases_out": [hf_decode(tok, x, False) for x in cases],
        "decode_cases_skip": [hf_decode(tok, x, True) for x in cases],
    }


def save_variant(j, outdir, name, corpus, expected):
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    expected[name] = run_on(Tokenizer.from_file(path), corpus, decode_cases(j))


def copy(j):
    return json.loads(json.dumps(j))


def build(outdir):
    corpus = spm_corpus()
    expected = {}
    base = train_base()
    for name in ("metaspace", "mistral", "llama2_legacy", "gemma", "metaspace_first_digits",
                 "metaspace_never_punctuation", "whitespace_split", "whitespace"):
        save_variant(structure(base, name), outdir, name, corpus, expected)
    affixed = train_base(continuing_subword_prefix="##", end_of_word_suffix="</w>")
    save_variant(structure(affixed, "affixes"), outdir, "affixes", corpus, expected)

    # Edits of the files that HF still loads.
    ms = structure(base, "metaspace")
    # The older spelling add_prefix_space (false needs prepend_scheme "never" beside it).
    for name, old in (("metaspace_add_prefix_space", {"add_prefix_space": True}),
                      ("metaspace_no_prefix_space", {"add_prefix_space": False, "prepend_scheme": "never"})):
        j = copy(ms)
        old = dict(type="Metaspace", replacement=SPACE, **old)
        j["pre_tokenizer"], j["decoder"] = old, old
        save_variant(j, outdir, name, corpus, expected)
    mistral = structure(base, "mistral")
    partial = copy(mistral)  # no byte tokens past ASCII: other characters fall to <unk>
    for b in BYTE_TOKENS[0x80:]:
        del partial["model"]["vocab"][b]
    save_variant(partial, outdir, "mistral_partial_bytes", corpus, expected)
    partial["model"]["fuse_unk"] = False
    save_variant(partial, outdir, "mistral_partial_bytes_no_fuse", corpus, expected)
    legacy = structure(base, "llama2_legacy")
    j = copy(legacy)
    j["model"]["ignore_merges"] = True
    save_variant(j, outdir, "llama2_ignore_merges", corpus, expected)
    j = copy(legacy)
    j["decoder"] = json.loads(llama_decoder(strip_start=2, strip_stop=1).__getstate__())
    save_variant(j, outdir, "llama2_strip_both", corpus, expected)

    # The corpus must reach what these tokenizers add: byte fallback, <unk>, and HF's
    # decode panics (left out of the comparison) must stay rare.
    byte_ids = set(range(3, 3 + 256))
    assert sum(any(i in byte_ids for i in ids) for ids in expected["mistral"]["ids"]) >= 20
    unk = partial["model"]["vocab"]["<unk>"]
    assert sum(unk in ids for ids in expected["mistral_partial_bytes"]["ids"]) >= 20
    assert expected["mistral_partial_bytes"]["ids"] != expected["mistral_partial_bytes_no_fuse"]["ids"]
    for name, e in expected.items():
        nulls = sum(x is None for k in ("decoded", "decoded_skip", "decode_cases_out", "decode_cases_skip")
                    for x in e[k])
        assert nulls <= 40, f"{name}: HF failed to decode {nulls} lists"
    with open(os.path.join(outdir, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=False)
    with open(os.path.join(outdir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)
    print("built", sorted(expected), "on", len(corpus), "strings")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        build(sys.argv[2])
    else:
        sys.exit(__doc__)
