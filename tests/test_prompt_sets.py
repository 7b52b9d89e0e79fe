"""The papers' named prompt sets (rewardflow/prompt_sets.py, docs/data.md#named-prompt-sets): composition, the
download checked against its pinned git blob, the cache read offline, the evaluation on the test split, and the
error without network. No test touches the network: downloads are served by a fake ``urlopen``."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import urllib.error

import pytest

from conftest import compose, rewardflow_cmd
from rewardflow import prompt_sets
from rewardflow.errors import ConfigError
from rewardflow.prompt_sets import SETS, PromptSet, SetFile, Split, git_blob_id, set_prompts

TRAIN = ["a red car", "a blue sky", "a red car", "a green tree"]  # a repeat, kept once
TEST = ["a yellow flower", "a white cat"]


def fill_cache(cache, name: str, split: str, prompts: list[str]) -> None:
    """Put a split's file in the cache as a download would leave it (the format of the set's file)."""
    (f,) = SETS[PromptSet(name)].splits[Split(split)][:1]
    path = cache / "prompt_sets" / name / f.name
    path.parent.mkdir(parents=True, exist_ok=True)
    if f.kind == "jsonl":
        path.write_text("".join(json.dumps({"tag": "x", "prompt": p}) + "\n" for p in prompts))
    else:
        path.write_text("\n".join(prompts) + "\n")


class FakeWeb:
    """``urllib.request.urlopen`` serving fixed bytes per URL, recording the requests."""

    def __init__(self, pages: dict[str, bytes]):
        self.pages, self.asked = pages, []

    def __call__(self, url, timeout=None):
        self.asked.append(url)
        if url not in self.pages:
            raise urllib.error.URLError("no route to host")
        return io.BytesIO(self.pages[url])


@pytest.fixture
def online(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def test_the_git_blob_id_is_gits(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"a red car\n")
    expected = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout
    assert git_blob_id(path.read_bytes()) == expected.strip()


@pytest.mark.parametrize("name", [s.value for s in PromptSet])
def test_every_named_set_composes_with_its_splits(name):
    cfg = compose([f"data={name}"])
    assert cfg.data.set == name and cfg.data.split == "train" and cfg.data.name == name
    assert Split.test in SETS[PromptSet(name)].splits  # every set has a test split to evaluate on
    for files in SETS[PromptSet(name)].splits.values():
        for f in files:  # pinned to a commit, or recorded at the first download (the hub's HPDv2 files only)
            assert f.blob is not None or f.url.startswith(prompt_sets.HPDV2_HUB)


def test_a_download_is_checked_against_its_pinned_blob_then_read_offline(tmp_path, monkeypatch, online):
    body = b"a red car\na blue sky\na red car\n"
    f = SetFile("https://example.org/sets/train.txt", git_blob_id(body))
    monkeypatch.setitem(SETS, PromptSet.ocr, SETS[PromptSet.ocr].__class__("t", "s", "l", {Split.train: (f,)}))
    web = FakeWeb({f.url: body})
    monkeypatch.setattr(prompt_sets.urllib.request, "urlopen", web)
    assert set_prompts("ocr", "train", tmp_path) == ["a red car", "a blue sky"]
    assert (tmp_path / "prompt_sets" / "ocr" / "train.txt").read_bytes() == body
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the second read needs no network
    assert set_prompts("ocr", "train", tmp_path) == ["a red car", "a blue sky"] and len(web.asked) == 1


def test_a_download_that_does_not_match_its_blob_is_refused_and_not_cached(tmp_path, monkeypatch, online):
    f = SetFile("https://example.org/sets/train.txt", git_blob_id(b"the real file\n"))
    monkeypatch.setitem(SETS, PromptSet.ocr, SETS[PromptSet.ocr].__class__("t", "s", "l", {Split.train: (f,)}))
    monkeypatch.setattr(prompt_sets.urllib.request, "urlopen", FakeWeb({f.url: b"<html>rate limited</html>"}))
    with pytest.raises(ConfigError, match="does not match its pinned git blob"):
        set_prompts("ocr", "train", tmp_path)
    assert not (tmp_path / "prompt_sets" / "ocr" / "train.txt").exists()


def test_an_unpinned_file_is_checked_by_the_sha256_of_its_first_download(tmp_path, monkeypatch, online):
    f = SetFile("https://example.org/benchmark/anime.json", None, "json")
    monkeypatch.setitem(SETS, PromptSet.hpdv2, SETS[PromptSet.hpdv2].__class__("t", "s", "l", {Split.test: (f,)}))
    body = json.dumps(["a red car", "a blue sky"]).encode()
    monkeypatch.setattr(prompt_sets.urllib.request, "urlopen", FakeWeb({f.url: body}))
    assert set_prompts("hpdv2", "test", tmp_path) == ["a red car", "a blue sky"]
    cached = tmp_path / "prompt_sets" / "hpdv2" / "anime.json"
    assert (cached.parent / "anime.json.sha256").read_text().strip() == hashlib.sha256(body).hexdigest()
    cached.write_text(json.dumps(["something else"]))
    with pytest.raises(ConfigError, match="changed since it was downloaded"):
        set_prompts("hpdv2", "test", tmp_path)


def test_without_network_the_error_names_the_set_the_address_the_cache_and_data_path(tmp_path, monkeypatch, online):
    monkeypatch.setattr(prompt_sets.urllib.request, "urlopen", FakeWeb({}))
    with pytest.raises(ConfigError) as e:
        set_prompts("pickscore", "train", tmp_path)
    message = str(e.value)
    url = SETS[PromptSet.pickscore].splits[Split.train][0].url
    assert "data.set=pickscore" in message and url in message and "no route to host" in message
    assert str(tmp_path / "prompt_sets" / "pickscore" / "train.txt") in message and "data.path=" in message


def test_drawbench_has_no_train_split_and_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="has no train split.*eval.prompts=drawbench"):
        set_prompts("drawbench", "train", tmp_path)


def test_the_cli_without_network_or_cache_exits_2_in_seconds(tmp_path):
    proc = subprocess.run(
        [*rewardflow_cmd(), "data=ocr", "reward=jpeg", "trainer.steps=1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "REWARDFLOW_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "data.set=ocr" in proc.stderr and "raw.githubusercontent.com/yifan123/flow_grpo" in proc.stderr
    assert "data.path=" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()  # reported before the run folder is made


def test_a_run_trains_on_the_train_split_and_evaluates_on_the_test_split(tmp_path, monkeypatch):
    from launcher.train.data import PromptSource
    from launcher.train.evaluation import held_out_prompts
    from launcher.validate import validate

    cache = tmp_path / "cache"
    fill_cache(cache, "pickscore", "train", TRAIN)
    fill_cache(cache, "pickscore", "test", TEST)
    monkeypatch.setenv("REWARDFLOW_CACHE", str(cache))
    cfg = compose(["data=pickscore", "eval.every=1"])
    assert validate(cfg) == ["a red car", "a blue sky", "a green tree"]  # the train split, each prompt once
    from omegaconf import OmegaConf

    run = OmegaConf.to_object(cfg)
    assert held_out_prompts(run) == TEST
    assert PromptSource(run.data).prompts == ["a red car", "a blue sky", "a green tree"]
    # eval.prompts=<set>: another set's test split
    fill_cache(cache, "geneval", "test", ["a photo of a red car", "a photo of a red car"])
    other = OmegaConf.to_object(compose(["data=pickscore", "eval.every=1", "eval.prompts=geneval"]))
    assert held_out_prompts(other) == ["a photo of a red car"]


def test_a_local_copy_replaces_the_download_and_a_test_split_cannot_be_trained_and_evaluated(tmp_path):
    from launcher.validate import validate

    copy = tmp_path / "test.txt"
    copy.write_text("a red car\na red car\na blue sky\n")
    assert validate(compose(["data=drawbench", "data.split=test", f"data.path={copy}", "eval.every=0"])) == [
        "a red car",
        "a blue sky",
    ]
    with pytest.raises(ConfigError, match="data.split: test trains on data.set=drawbench's test split"):
        validate(compose(["data=drawbench", "data.split=test", f"data.path={copy}", "eval.every=1"]))


def test_a_demo_run_on_a_named_set_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    fill_cache(cache, "pickscore", "train", TRAIN)
    fill_cache(cache, "pickscore", "test", TEST)
    # the run reads the prompt sets and the tiny twins from REWARDFLOW_CACHE: the session's twins are linked in
    twins = os.environ["REWARDFLOW_CACHE"]
    for entry in os.listdir(twins):
        if entry != "prompt_sets":
            os.symlink(os.path.join(twins, entry), cache / entry)
    proc = subprocess.run(
        [*rewardflow_cmd(), "experiment=smoke", "data=pickscore", "logger=none", "trainer.export=false",
         "trainer.steps=1", "eval.every=1", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "REWARDFLOW_CACHE": str(cache)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/color/mean" in r] == [0, 1]
