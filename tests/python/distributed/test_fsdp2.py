"""FSDP2 (``torch.distributed.fsdp.fully_shard``) with torch_plugin (issue #14).

Two gloo processes on the CPU (worker side in ``workers.py``): each layer and the root are
sharded; the model trains three steps eagerly and under ``optimize``, with an evaluation
call under ``no_grad`` after each step. FSDP2 runs each sharded module through its pre- and
post-forward hooks (all-gather, free), so capture breaks the graph at each sharded layer's
call by design and captures every layer's forward as its own graph. The compiled model's
losses, evaluation outputs and parameters must equal eager FSDP2's on every rank, with no
recompile after the first step. The evaluation calls guard against frozen weights: FSDP2
writes the all-gathered weights into the same parameter objects and keeps their version
counters, so a backend that froze them would silently compute with stale or freed memory.
"""

from __future__ import annotations

import json
import socket
import sys
import warnings
from pathlib import Path

import pytest
import torch.distributed as dist

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with gloo is not built into this torch",
)

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # tests are imported with --import-mode=importlib
    sys.path.insert(0, _HERE)

import workers

WORLD = 2


def _run(tmp_path: Path, **case) -> list[dict]:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    files = [tmp_path / f"rank{r}.json" for r in range(WORLD)]
    try:
        mp.spawn(
            workers.run_fsdp2_case,
            args=(WORLD, port, str(tmp_path), case),
            nprocs=WORLD,
            join=True,
        )
    except mp.ProcessExitedException as e:
        # Seen twice in the full suite on the 2-core CI machine (2026-11-26, never when these
        # tests run alone): a worker aborting with "terminate called without an active
        # exception" (SIGABRT). A worker writes its results before its final barrier and
        # process-group teardown; an abort after every result is written happened there,
        # outside what this test checks, and is reported as a warning. Any other failure,
        # or an abort before the results exist, fails the test.
        if e.signal_name != "SIGABRT" or not all(f.exists() for f in files):
            raise
        warnings.warn(f"FSDP2 worker aborted after writing its results: {e}", stacklevel=2)
    return [json.loads(f.read_text()) for f in files]


def _check(results: list[dict], atol: float) -> None:
    for r in results:
        assert r["compiled_losses"] == pytest.approx(r["eager_losses"], rel=1e-5, abs=atol)
        assert r["eval_diff"] <= atol, r
        assert r["param_diff"] <= atol, r
        per_step = r["frames_converted_per_step"]
        assert per_step[0] > 0 and per_step[-1] == per_step[0], "no recompile after step 1"
        assert any("hooks" in b for b in r["graph_breaks"]), "breaks at sharded layers"
        assert r["models_alive_after_use"] == [False, False], "compiled frames keep no model"
    assert results[0]["frames"] == results[1]["frames"], "all ranks compile the same frames"


@pytest.mark.parametrize("backend", ["plugin", "aot_eager"])
def test_fsdp2_mlp_matches_eager(tmp_path, backend):
    _check(_run(tmp_path, model="mlp", backend=backend), atol=1e-5)


@pytest.mark.slow
def test_fsdp2_small_bert_matches_eager(tmp_path):
    _check(_run(tmp_path, model="bert", backend="plugin"), atol=1e-4)
