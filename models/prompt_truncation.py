"""Prompts longer than the model's text encoders take are cut by their tokenizers without a word (diffusers' own
truncation notice is silenced with its other logging, and would repeat per batch). The trainer calls
:func:`truncation_warning` once, over the run's whole prompt list, and logs one warning with the counts.

The limits are the pipeline's: CLIP tokenizers keep ``model_max_length`` (77) tokens, the main text encoder (T5,
UMT5, Qwen2.5-VL) keeps ``model.max_sequence_length``. Qwen-Image wraps the prompt in a chat template first, so its
count is of the prompt alone (the template adds a few tokens).
"""

from __future__ import annotations

from collections.abc import Sequence

TOKENIZERS = ("tokenizer", "tokenizer_2", "tokenizer_3")


def _limit(tokenizer, max_sequence_length: int | None) -> tuple[str, int]:
    """(how the limit is named for users, the limit in tokens)."""
    if "CLIP" in type(tokenizer).__name__ or max_sequence_length is None:
        return f"CLIP ({tokenizer.model_max_length} tokens)", int(tokenizer.model_max_length)
    return f"the text encoder (model.max_sequence_length={max_sequence_length} tokens)", int(max_sequence_length)


def truncation_warning(backbone, prompts: Sequence[str], model_option: str) -> str | None:
    """One line saying how many of ``prompts`` each of the backbone's tokenizers cuts, or None if none is cut."""
    pipe = getattr(backbone, "pipe", None)
    if pipe is None:
        return None
    unique = list(dict.fromkeys(prompts))
    parts = []
    for attr in TOKENIZERS:
        tokenizer = getattr(pipe, attr, None)
        if tokenizer is None:
            continue
        label, limit = _limit(tokenizer, getattr(backbone, "max_sequence_length", None))
        # a token covers at least one UTF-8 byte, so shorter prompts need no tokenizing
        long = [p for p in unique if len(p.encode()) + 2 > limit]
        if not long:
            continue
        lengths = [len(ids) for ids in tokenizer(long, truncation=False)["input_ids"]]
        over = [n for n in lengths if n > limit]
        if over:
            parts.append(f"{label}: {len(over)} of {len(unique)} prompts are cut (the longest has {max(over)} tokens)")
    if not parts:
        return None
    return (
        f"model={model_option}: some prompts are longer than the text encoders take and are truncated: "
        f"{'; '.join(parts)}. Shorten them, or raise model.max_sequence_length where the family allows it"
    )
