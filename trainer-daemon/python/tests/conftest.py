"""Shared helpers for the worker's tests: a loaded Session on the tiny model, an HTTP client for its endpoint, a tiny
Qwen2 saved as a downloaded model is, and checks run by the stock libraries alone in an isolated Python."""

import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

# One BLAS thread: the tests share 2 cores with others; OpenBLAS's spinning helper threads only slow them down.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PACKAGE_ROOT))
torch.set_num_threads(1)

from lightning_trainer.params import LoadParams  # noqa: E402
from lightning_trainer.schema import parse  # noqa: E402
from lightning_trainer.session import Session  # noqa: E402

TINY = {"kind": "tiny", "config": {"dModel": 64, "layers": 2, "heads": 4, "context": 64}}


def make_session(adapter=None, model_config=None, **load) -> Session:
    """A session with the tiny model loaded; with `checkpoint=` alone, model and adapter come from the checkpoint."""
    session = Session(lambda message: None)
    model = {"kind": "tiny", "config": model_config} if model_config else TINY
    defaults = (
        {} if "checkpoint" in load and adapter is None else {"model": model, "adapter": adapter or {"kind": "full"}}
    )
    session.load(parse(LoadParams, {**defaults, **load}))
    return session


@pytest.fixture
def session():
    s = make_session()
    yield s
    s.close()


def http(url: str, path: str, body=None):
    """(status, headers, raw body text) of a real HTTP request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def worker_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}


from lightning_trainer.bench import tiny_hf_model_dir as hf_model_dir  # noqa: E402,F401  (tiny Qwen2/Llama folders)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """A tiny Qwen2 with weights on disk, as `save_pretrained` leaves a downloaded model (stock loaders rebuild it)."""
    import transformers

    folder = tmp_path_factory.mktemp("base") / "qwen2"
    hf_model_dir(folder)
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder))
    model.save_pretrained(folder)
    return str(folder)


# The start of a stock check: it refuses to run where project code is importable, reads its JSON spec from argv[1],
# and picks the dtype keyword of the installed transformers; `torch`, `transformers`, `json`, `spec`, `dtype` follow.
STOCK_PRELUDE = textwrap.dedent("""
    import json, sys
    try:
        import lightning_trainer  # noqa: F401
        sys.exit("project code is importable: the check would not be a stock one")
    except ImportError:
        pass
    import torch, transformers
    spec = json.loads(sys.argv[1])
    dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
""")


def run_stock(body: str, spec: dict, cwd) -> str:
    """`STOCK_PRELUDE` + `body` run by this Python isolated (`-I`: no project path, no user site, a bare env); its
    stdout. Fails the test with its stderr unless it exits 0."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", STOCK_PRELUDE + textwrap.dedent(body), json.dumps(spec)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
