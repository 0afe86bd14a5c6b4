"""`python3 -m lightning_trainer.doctor` prints one JSON object; problems come with concrete fixes."""

import json
import subprocess
import sys

from conftest import worker_env

from lightning_trainer.doctor import problems


def test_doctor_prints_the_environment_as_json():
    run = subprocess.run(
        [sys.executable, "-m", "lightning_trainer.doctor"],
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["torch"] and report["python"].startswith("3.") and report["executable"] == sys.executable
    assert report["blas"] in ("openblas", "mkl", "reference", "unknown")
    assert report["ok"] is True  # torch is here; transformers/peft/CUDA are optional
    assert all(p["fix"] for p in report["problems"])


def test_missing_torch_gets_apt_on_debian_without_pip_and_pip_otherwise():
    info = {"torch": None, "cuda": None, "transformers": None, "peft": None, "blas": None}
    offline = problems(info, pip_ok=False, debian=True)
    assert offline[0]["fix"] == "apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread"
    assert not offline[0].get("optional")
    online = problems(info, pip_ok=True, debian=True)
    assert online[0]["fix"] == "pip install torch"
    assert {p["fix"] for p in online if p.get("optional")} >= {"pip install transformers", "pip install peft"}
