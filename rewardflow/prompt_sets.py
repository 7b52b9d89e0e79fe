"""The papers' named prompt sets (``data=drawbench|geneval|ocr|pickscore|hpdv2``): where each split lives, how it is
checked, and its download into a cache that later runs read offline (docs/data.md#named-prompt-sets).

Every split is one or more files at a public address. The files kept in a git repository are pinned to a commit and
checked against the git blob id the commit records (``git hash-object``: SHA-1 of ``blob <size>\\0<bytes>``), so a
download that is cut, altered or served from another commit is refused. The HPDv2 benchmark prompts are on a Hugging
Face dataset repository that no git id here pins: their SHA-256 is written next to them at the first download and
checked at every later read (trust on first use, said so in the docs). A split is fetched once, written atomically
into ``<cache>/prompt_sets/<set>/`` (``$REWARDFLOW_CACHE`` or ``~/.cache/rewardflow``), and read from there; with
``HF_HUB_OFFLINE=1`` or without network, a missing split is a config error naming the set, the address, the cache path
and ``data.path`` (a local copy of the split's file).

The sets repeat prompts to draw several images of each (DrawBench 5 times, GenEval 4 times, as the reference
evaluation scripts read them); a prompt is kept once here, in its first place, and ``eval.samples_per_prompt`` draws
the repeats with distinct fixed noise. Plain Python: no torch (the config checks read the prompts before torch loads).
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.request
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from rewardflow.cache_dir import default_cache_dir
from rewardflow.errors import ConfigError

#: seconds a download may wait for the server
TIMEOUT_S = 30.0

FLOW_GRPO = "https://raw.githubusercontent.com/yifan123/flow_grpo/ac4c86e8cae021841f1fde853d340e0db67690dd"
DIFFUSION_NFT = "https://raw.githubusercontent.com/NVlabs/DiffusionNFT/24af5554898d85e93efa492f42b5e9cdf4156e9b"
DANCE_GRPO = "https://raw.githubusercontent.com/XueZeyue/DanceGRPO/15cc71d53cc2e6e18a68ee607d5fb6ba9a99e344"
HPDV2_HUB = "https://huggingface.co/datasets/zhwang/HPDv2/resolve/main/benchmark"


class PromptSet(StrEnum):
    drawbench = "drawbench"
    geneval = "geneval"
    ocr = "ocr"
    pickscore = "pickscore"
    hpdv2 = "hpdv2"


class Split(StrEnum):
    train = "train"
    test = "test"


@dataclass(frozen=True)
class SetFile:
    """One file of a split: its address, its pinned git blob id (None: checked by the SHA-256 of its first download)
    and how prompts are read from it (``txt``: a line each; ``jsonl``: the ``prompt`` key of each object, the other
    keys are kept in the cached file, e.g. GenEval's detector metadata; ``json``: a JSON list of strings)."""

    url: str
    blob: str | None
    kind: str = "txt"

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[1]


@dataclass(frozen=True)
class SetInfo:
    title: str
    source: str  # the paper and the repository the files come from
    license: str
    splits: dict[Split, tuple[SetFile, ...]] = field(default_factory=dict)


SETS: dict[PromptSet, SetInfo] = {
    PromptSet.drawbench: SetInfo(
        "DrawBench, Imagen's 200 prompts in 11 categories (arXiv:2205.11487); a test set only",
        "DiffusionNFT's evaluation copy (NVlabs/DiffusionNFT dataset/drawbench, each prompt 5 times)",
        "Apache-2.0 (DiffusionNFT repository)",
        {
            Split.test: (
                SetFile(f"{DIFFUSION_NFT}/dataset/drawbench/test.txt", "8d96e7cf7017ce6ce299a6eec96e21467a2ac7aa"),
            )
        },
    ),
    PromptSet.geneval: SetInfo(
        "GenEval's object-composition prompts with their detector metadata (arXiv:2310.11513): 553 test prompts",
        "Flow-GRPO's split (yifan123/flow_grpo dataset/geneval, test prompts 4 times each)",
        "MIT (Flow-GRPO repository)",
        {
            Split.train: (
                SetFile(
                    f"{FLOW_GRPO}/dataset/geneval/train_metadata.jsonl",
                    "0b97e8a6802c08fc7537cd00c76ae79c851bddcb",
                    "jsonl",
                ),
            ),
            Split.test: (
                SetFile(
                    f"{FLOW_GRPO}/dataset/geneval/test_metadata.jsonl",
                    "27cdaf5cc1356fe15aeadbb8df55682ca74228f0",
                    "jsonl",
                ),
            ),
        },
    ),
    PromptSet.ocr: SetInfo(
        "Flow-GRPO's visual-text-rendering prompts (arXiv:2505.05470): a quoted text to render in each",
        "yifan123/flow_grpo dataset/ocr",
        "MIT (Flow-GRPO repository)",
        {
            Split.train: (SetFile(f"{FLOW_GRPO}/dataset/ocr/train.txt", "3ce0521b77b0a9031191d66ecc36ebaaf27a3922"),),
            Split.test: (SetFile(f"{FLOW_GRPO}/dataset/ocr/test.txt", "8deb4f8d8f2e863f45353354243669b3c991a6a2"),),
        },
    ),
    PromptSet.pickscore: SetInfo(
        "Pick-a-Pic prompts (arXiv:2305.01569), Flow-GRPO's PickScore split: 2048 test prompts",
        "yifan123/flow_grpo dataset/pickscore",
        "MIT (Flow-GRPO repository)",
        {
            Split.train: (
                SetFile(f"{FLOW_GRPO}/dataset/pickscore/train.txt", "a437bd921c03fbc00c4e7ce148ae2d28fcd6e49b"),
            ),
            Split.test: (
                SetFile(f"{FLOW_GRPO}/dataset/pickscore/test.txt", "45f05231b969fb5f74c8debd606b22cd3be27f8e"),
            ),
        },
    ),
    PromptSet.hpdv2: SetInfo(
        "HPDv2 (arXiv:2306.09341): DanceGRPO's training prompts; the HPSv2 benchmark's 800 test prompts in 4 styles",
        "train: XueZeyue/DanceGRPO assets/prompts.txt; test: the zhwang/HPDv2 dataset's benchmark/*.json (the hpsv2 "
        "package reads the same files)",
        "Apache-2.0 (DanceGRPO and HPSv2 repositories)",
        {
            Split.train: (SetFile(f"{DANCE_GRPO}/assets/prompts.txt", "b47234e475645222ca9a0bb7742ebf4d08123855"),),
            Split.test: tuple(
                SetFile(f"{HPDV2_HUB}/{style}.json", None, "json")
                for style in ("anime", "concept-art", "paintings", "photo")
            ),
        },
    ),
}


def git_blob_id(data: bytes) -> str:
    """The id git gives a file with these bytes (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def split_folder(name: PromptSet | str, cache_dir: str | os.PathLike | None = None) -> Path:
    return Path(cache_dir or default_cache_dir()) / "prompt_sets" / str(name)


def split_files(name: PromptSet | str, split: Split | str, key: str = "data.set") -> tuple[SetFile, ...]:
    info = SETS[PromptSet(name)]
    files = info.splits.get(Split(split))
    if not files:
        have = ", ".join(str(s) for s in info.splits)
        raise ConfigError(
            f"{key}={name} has no {split} split (it has: {have}). Fix: "
            + (
                "train on another set and evaluate on this one: e.g. data=pickscore eval.prompts=drawbench"
                if split == Split.train
                else f"another set's {split} split"
            )
        )
    return files


def fetch_split(
    name: PromptSet | str, split: Split | str, cache_dir: str | os.PathLike | None = None, key: str = "data.set"
) -> list[Path]:
    """The split's files in the cache, downloaded and checked first if missing (see the module docstring)."""
    folder = split_folder(name, cache_dir)
    paths = []
    for f in split_files(name, split, key):
        path = folder / f.name
        if not path.is_file():
            _download(name, f, path, key)
        elif f.blob is None:
            _check_first_sha256(name, f, path)
        paths.append(path)
    return paths


def _download(name: PromptSet | str, f: SetFile, path: Path, key: str) -> None:
    def fail(why: str) -> ConfigError:
        return ConfigError(
            f"{key}={name}: the prompt set's file {f.url} is not in the cache ({path}) and {why}. Fix: run once "
            f"with network access (without HF_HUB_OFFLINE=1) to fill the cache, or download the file yourself and "
            f"pass it as data.path=/path/{f.name} (or put it at {path})"
        )

    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        raise fail("HF_HUB_OFFLINE is set: nothing is downloaded")
    try:
        with urllib.request.urlopen(f.url, timeout=TIMEOUT_S) as response:
            data = response.read()
    except (OSError, ValueError) as e:  # URLError, HTTPError, timeouts are OSErrors
        raise fail(f"cannot be downloaded ({e})") from None
    if f.blob is not None and git_blob_id(data) != f.blob:
        raise fail(f"the download does not match its pinned git blob {f.blob} (got {git_blob_id(data)})")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # atomic: a reader sees the whole file or none
    if f.blob is None:
        _sha_file(path).write_text(hashlib.sha256(data).hexdigest() + "\n")


def _sha_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _check_first_sha256(name: PromptSet | str, f: SetFile, path: Path) -> None:
    recorded = _sha_file(path)
    if not recorded.is_file():
        return  # put there by hand (a local copy): nothing recorded to compare with
    if hashlib.sha256(path.read_bytes()).hexdigest() != recorded.read_text().strip():
        raise ConfigError(
            f"data.set={name}: the cached {path} changed since it was downloaded (its SHA-256 differs from "
            f"{recorded}). Fix: delete both files to download it again"
        )


def read_split(paths: list[Path], files: tuple[SetFile, ...], key: str) -> list[str]:
    """The split's prompts, each once, in first-seen order."""
    prompts: list[str] = []
    for path, f in zip(paths, files):
        text = path.read_text(encoding="utf-8")
        if f.kind == "txt":
            prompts += [line.strip() for line in text.split("\n") if line.strip()]
            continue
        try:
            rows = (
                [json.loads(line) for line in text.split("\n") if line.strip()]
                if f.kind == "jsonl"
                else json.loads(text)
            )
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"{key}: {path} is not valid JSON ({e.msg}). Fix: delete it to download it again"
            ) from None
        for row in rows:
            prompt = row.get("prompt") if isinstance(row, dict) else row
            if not isinstance(prompt, str):
                raise ConfigError(
                    f"{key}: {path} holds an entry without a prompt string. Fix: delete it to download it again"
                )
            prompts.append(prompt.strip())
    if not prompts:
        raise ConfigError(f"{key}: the split's files hold no prompts ({', '.join(map(str, paths))})")
    return list(dict.fromkeys(prompts))


def set_prompts(
    name: PromptSet | str, split: Split | str, cache_dir: str | os.PathLike | None = None, key: str = "data.set"
) -> list[str]:
    """The prompts of a named set's split, fetched into the cache on first use."""
    return read_split(fetch_split(name, split, cache_dir, key), split_files(name, split, key), key)


def named_test_split(value: str) -> bool:
    """Whether ``eval.prompts=<value>`` names a set's test split rather than a file (a file of that name wins)."""
    return value in PromptSet.__members__ and Split.test in SETS[PromptSet(value)].splits and not Path(value).exists()
