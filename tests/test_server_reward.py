"""reward=server (issue 28 item 4): scores from an HTTP reward server started in the test (http.server in a thread):
both wire formats (Flow-Factory's JSON, flow_grpo's pickle), batching, retries with backoff, a timeout and a server
error (one clear warning, NaN for the samples without a score), a bad URL as a config error, and a training step whose
server fails is skipped and logged while the run goes on (docs/rewards.md#reward-server)."""

from __future__ import annotations

import base64
import io
import json
import logging
import pickle
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import compose
from launcher import components
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from rewardflow.errors import ConfigError


class RewardServer:
    """A reward server on 127.0.0.1: each image scores its mean pixel value in [0, 1] (so the test sees that the
    images arrived); ``mode`` makes it fail: ``500`` (an error), ``slow`` (answers after ``delay`` s), ``count``
    (too few scores), ``flaky`` (HTTP 503 for the first two requests, then well)."""

    def __init__(self):
        self.mode, self.delay, self.requests, self.batches = "ok", 1.0, 0, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                server.requests += 1
                if server.mode == "slow":
                    time.sleep(server.delay)
                if server.mode == "500" or (server.mode == "flaky" and server.requests <= 2):
                    self.send_response(500 if server.mode == "500" else 503)
                    self.end_headers()
                    self.wfile.write(b"CUDA out of memory")
                    return
                if self.headers["Content-Type"] == "application/json":
                    data = json.loads(body)
                    images = [Image.open(io.BytesIO(base64.b64decode(b))) for b in data["image"]]
                    prompts = data["prompt"]
                else:
                    data = pickle.loads(body)  # a test server trusts its own client
                    images = [Image.open(io.BytesIO(b)) for b in data["images"]]
                    prompts = data["prompts"]
                assert len(prompts) == len(images)
                server.batches.append(len(images))
                scores = [float(np.asarray(im.convert("RGB"), dtype=np.float64).mean() / 255) for im in images]
                if server.mode == "count":
                    scores = scores[:-1]
                if self.headers["Content-Type"] == "application/json":
                    out = json.dumps({"rewards": scores}).encode()
                else:
                    out = pickle.dumps({"scores": np.asarray(scores), "rewards": scores})  # numpy, as servers send
                self.send_response(200)
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/compute"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = RewardServer()
    yield s
    s.close()


def build(url: str, *extra: str):
    cfg = compose(["reward=server", f"reward.url={url}", *extra])
    validate(cfg)
    return components.build(cfg.reward, "reward")


def images(n: int) -> torch.Tensor:
    """Flat grey images of levels 0, 1/(n-1), ..., 1, on the uint8 grid: their mean is their score."""
    levels = torch.linspace(0, 255, n).round() / 255
    return levels.view(n, 1, 1, 1).expand(n, 3, 16, 24).contiguous()


@pytest.mark.parametrize("protocol", ["json", "pickle"])
def test_scores_come_back_in_order_in_batches(server, protocol):
    reward = build(server.url, f"reward.protocol={protocol}", "reward.batch_size=2")
    x = images(5)
    scores = reward(x, [f"p{i}" for i in range(5)])
    assert scores.dtype == torch.float32 and scores.shape == (5,)
    # PNG is lossless; flow_grpo's JPEG keeps flat grey within a level
    torch.testing.assert_close(scores, x.mean((1, 2, 3)), atol=0 if protocol == "json" else 2 / 255, rtol=0)
    assert server.batches == [2, 2, 1]
    assert reward.step_metrics() == {"reward/server_failed": 0.0}


def test_a_flaky_server_is_retried_with_backoff(server):
    server.mode = "flaky"  # 503, 503, then answers
    reward = build(server.url, "reward.retries=2", "reward.backoff_s=0.05")
    t0 = time.perf_counter()
    scores = reward(images(3), ["a", "b", "c"])
    assert torch.isfinite(scores).all() and server.requests == 3
    assert time.perf_counter() - t0 >= 0.05 + 0.1  # backoff 0.05, then 0.1


@pytest.mark.parametrize(
    "mode,says,requests",
    [
        ("slow", "timed out after 0.2 s (reward.timeout_s) after 2 tries", 2),
        ("500", "HTTP 500 Internal Server Error: CUDA out of memory after 2 tries", 2),
        ("count", "it returned 2 scores for 3 images", 1),  # not retried: a wrong answer stays wrong
    ],
)
def test_a_failing_server_gives_nan_and_one_clear_warning(server, caplog, mode, says, requests):
    server.mode, server.delay = mode, 1.0
    reward = build(
        server.url, "reward.timeout_s=0.2", "reward.retries=1", "reward.backoff_s=0.01", "reward.batch_size=3"
    )
    with caplog.at_level(logging.WARNING, logger="rewards.server"):
        scores = reward(images(6), list("abcdef"))  # two batches: the second is not sent after the first failed
    assert torch.isnan(scores).all()
    assert server.requests == requests
    (record,) = caplog.records
    assert record.exc_info is None  # a message, not a traceback
    message = record.getMessage()
    assert server.url in message and says in message and "6 of 6 samples get no score" in message
    assert "Fix: check the server" in message
    assert reward.step_metrics() == {"reward/server_failed": 6.0}


def test_no_server_at_the_url_is_a_clear_warning(caplog):
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{probe.server_address[1]}/compute"
    probe.server_close()  # the port is free: nothing listens there
    reward = build(url, "reward.retries=0")
    with caplog.at_level(logging.WARNING, logger="rewards.server"):
        assert torch.isnan(reward(images(2), ["a", "b"])).all()
    assert "cannot be reached" in caplog.text and "Connection refused" in caplog.text


def test_a_pickled_answer_builds_no_objects(server):
    reward = build(server.url, "reward.protocol=pickle")

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(Exception, match="builtins.print; only containers and numbers"):
        reward.parse(pickle.dumps({"scores": [Evil()]}), 1)


@pytest.mark.parametrize(
    "url,says",
    [
        ("localhost:8000/compute", "scheme"),
        ("ftp://127.0.0.1/compute", "scheme 'ftp'"),
        ("http:///compute", "names no host"),
        ("http://127.0.0.1:99999/compute", "not a URL"),
        ("'http://127.0.0.1:80/a b'", "whitespace"),
    ],
)
def test_a_bad_url_is_a_config_error(url, says):
    with pytest.raises(ConfigError, match=f"reward.url: .*{says}.*Fix: reward.url=http://HOST:PORT/PATH"):
        validate(compose(["reward=server", f"reward.url={url}"]))


def test_a_step_whose_server_fails_is_skipped_and_the_run_goes_on(server, tmp_path, caplog):
    """No lost step: the failed step is logged (its update skipped, its failed samples counted), then training goes
    on; trainer.max_nonfinite_in_a_row such steps in a row would stop the run with its message."""
    cfg = compose(["experiment=smoke", "logger=none", "reward=server", f"reward.url={server.url}", "reward.retries=0"])
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    before = [p.detach().clone() for p in trainer.params]
    server.mode = "500"
    with caplog.at_level(logging.WARNING):
        trainer.train_step(0)
    assert all(torch.equal(p, q) for p, q in zip(trainer.params, before))  # no update from a step without scores
    assert trainer.nonfinite_in_a_row == 1
    server.mode = "ok"
    trainer.train_step(1)
    assert not all(torch.equal(p, q) for p, q in zip(trainer.params, before))  # the next step trains
    rows = trainer.logger.history
    assert [r["step"] for r in rows] == [0, 1]
    assert [r["health/skipped_updates"] for r in rows] == [1, 0]
    assert [r["reward/server_failed"] for r in rows] == [4, 0]  # smoke: 2 prompts x 2 samples
    assert "HTTP 500" in caplog.text and "non-finite reward (4 of 4 samples); update skipped" in caplog.text
    assert trainer.nonfinite_in_a_row == 0
