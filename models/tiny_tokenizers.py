"""Tokenizers built in code (no files, no hub), for tiny twins of real model families
(docs/development.md#tokenizers-built-in-code)."""

from __future__ import annotations

import string


def bytes_to_unicode() -> list[str]:
    """GPT-2/CLIP byte alphabet (256 printable stand-ins for the 256 byte values)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def make_clip_tokenizer(model_max_length: int = 77):
    """Character-level byte BPE without merges (514 tokens): every string tokenizes, nothing maps to unk."""
    from transformers import CLIPTokenizer

    chars = bytes_to_unicode()
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in chars + [c + "</w>" for c in chars]:
        vocab.setdefault(c, len(vocab))
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=model_max_length)


def make_t5_tokenizer(words: list[str], extra_ids: int = 0, model_max_length: int = 512):
    """Unigram tokenizer with whole-word pieces for ``words`` plus single characters (ids 0/1/2 = pad/eos/unk)."""
    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    pieces += [("▁" + w, -5.0) for w in sorted(set(words))]
    pieces += [(ch, -10.0) for ch in sorted(set(string.ascii_letters + string.digits + ".,;:!?'\"()-_/"))]
    return T5Tokenizer(vocab=pieces, extra_ids=extra_ids, model_max_length=model_max_length)


QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def make_qwen2_tokenizer(template: str, words: list[str], vocab_size: int = 600, model_max_length: int = 1024):
    """Byte-level BPE (every string tokenizes) trained on Qwen-Image's chat template and ``words``, so the template's
    system prefix is 34 tokens, exactly as with the real Qwen2.5-VL tokenizer (the pipeline drops 34 tokens)."""
    from transformers import Qwen2Tokenizer

    base = Qwen2Tokenizer(vocab={c: i for i, c in enumerate(bytes_to_unicode())}, merges=[])
    sentence = " ".join(words)
    tok = base.train_new_from_iterator(
        [template.format(sentence)] * 50 + [sentence] * 50, vocab_size=vocab_size, new_special_tokens=QWEN_SPECIALS
    )
    tok.model_max_length = model_max_length
    return tok
