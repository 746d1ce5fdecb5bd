"""Issue 44, the first hour: the short README, the errors that name the way out, the two defects a new
user hits first, logs that stay, and a library that changes nothing process-wide on import.

The CLI checks call ``robotrl.cli.main`` in subprocesses (real Hydra composition, real exit status and
stderr), each asserting the ONE line and what it names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from robotrl.envs.video import osmesa_available

needs_osmesa = pytest.mark.skipif(not osmesa_available(), reason="libOSMesa (apt-get install libosmesa6) is not installed")
ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SETUP = 'python3 -m pip install -e . && robotrl train'
TESTS = ('python3 -m pip install -e ".[test]" && python3 -m pytest -q -m "not realtime" '
         '&& python3 -m pytest -q -m realtime -n 0')


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def _robotrl(args: list[str], cwd: Path, timeout: float = 240, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robotrl.cli", *args], cwd=cwd, env=_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def _one_error_line(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("robotrl: error: ")]
    assert len(errors) == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    return errors[0]


# ----------------------------------------------------------------------------- README and docs
def test_readme_is_a_short_front_door_with_the_two_commands_and_live_links():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert SETUP in text and TESTS in text
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in link:
            assert (ROOT / link).exists(), f"README links {link}, which does not exist"
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]"' in ci and "mkdocs build --strict" in ci


def test_every_moved_readme_section_is_a_docs_page():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in ("getting-started.md", "python-api.md", "own-data.md", "concepts/data.md", "cameras.md",
                 "robot/index.md", "robot/online.md", "ray.md", "benchmarks.md", "results/index.md",
                 "results/full.md", "results/quick.md", "algorithms/flow-reinflow.md", "protocol.md",
                 "robot_driver_guide.md", "config.md", "contributing.md"):
        assert (ROOT / "docs" / page).is_file() and page in nav, page
    # the generated benchmark blocks keep their markers (robotrl bench tables rewrites between them)
    assert "<!-- robotrl-bench:full:begin -->" in (ROOT / "docs/results/full.md").read_text()
    assert "<!-- robotrl-bench:quick:begin -->" in (ROOT / "docs/results/quick.md").read_text()


# ----------------------------------------------------------------------------- library hygiene
def test_import_changes_nothing_process_wide():
    probe = ("import sys, os; import robotrl, robotrl.report, robotrl.envs; from robotrl import _alloc; "
             "print(_alloc.STATE['reason'], 'matplotlib.pyplot' in sys.modules, os.environ.get('MUJOCO_GL'))")
    out = subprocess.run([sys.executable, "-c", probe], env=_env(), capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["not", "run", "False", "None"], out.stdout


def test_the_command_line_and_its_non_training_commands_do_not_import_torch():
    """``import robotrl.cli`` and ``robotrl bench list`` / ``robotrl collect list=true`` leave torch unimported
    (it costs ~3 s, which every command paid while robotrl.utils, robotrl.data and robotrl.envs imported it);
    the lazy names still resolve afterwards (``robotrl.data.Batch`` then imports torch)."""
    probe = ("import sys; import robotrl, robotrl.cli, robotrl.utils, robotrl.provenance, robotrl.bench.cli, "
             "robotrl.collect, robotrl.data; print('torch' in sys.modules, end=' '); "
             "print(robotrl.data.Batch.__module__, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], env=_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "robotrl.data.batch", "True"], out.stdout
    for args in (["bench", "list"], ["collect", "list=true"]):  # the commands themselves (they end in sys.exit)
        run = ("import atexit, sys; atexit.register(lambda: print('torch loaded:', 'torch' in sys.modules)); "
               f"from robotrl.cli import main; main({args!r})")
        out = subprocess.run([sys.executable, "-c", run], env=_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, (args, out.stderr[-2000:])
        assert out.stdout.splitlines()[-1] == "torch loaded: False", (args, out.stdout[-500:])
        assert "pointmaze" in out.stdout, (args, out.stdout[-500:])


def test_learning_curve_leaves_the_matplotlib_backend_alone(tmp_path):
    probe = ("import matplotlib; matplotlib.use('svg'); from pathlib import Path; from robotrl.report import "
             "plot_learning_curve; p = plot_learning_curve([{'step': 0, 'return_mean': 1.0}, {'step': 5, 'return_mean': 2.0}],"
             f" Path({str(tmp_path / 'c.png')!r}), 't'); print(matplotlib.get_backend(), p.stat().st_size > 0)")
    out = subprocess.run([sys.executable, "-c", probe], env=_env(), capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["svg", "True"], out.stdout


def test_package_ships_py_typed_and_license_metadata():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
    assert "Typing :: Typed" in meta["classifiers"] and (ROOT / "robotrl" / "py.typed").is_file()
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "docs" in meta["optional-dependencies"]


def test_the_supported_pythons_agree_everywhere_and_the_extras_name_only_optional_libraries():
    """requires-python's lower bound is the oldest classifier and the version ruff and mypy check against
    (tools/check_python_versions.sh compiles every module with the oldest and newest ones where they are installed)."""
    import tomllib

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    meta = doc["project"]
    oldest = meta["requires-python"].removeprefix(">=")
    versions = sorted((c.rsplit(" :: ", 1)[1] for c in meta["classifiers"]
                       if c.startswith("Programming Language :: Python :: 3.")), key=lambda v: int(v.split(".")[1]))
    assert versions[0] == oldest and len(versions) >= 2
    assert doc["tool"]["ruff"]["target-version"] == "py" + oldest.replace(".", "")
    assert doc["tool"]["mypy"]["python_version"] == oldest
    core = " ".join(meta["dependencies"])
    for optional in ("stable-baselines3", "onnx", "pyzmq", "msgpack", "wandb", "ray", "huggingface"):
        assert optional not in core, optional


# ----------------------------------------------------------------------------- errors: one line, the way out
def test_unknown_config_key_names_the_closest_key(tmp_path):
    line = _one_error_line(_robotrl(["train", "trainer.ofline_steps=100"], tmp_path))
    assert "trainer.ofline_steps" in line and "did you mean trainer.offline_steps?" in line


def test_unknown_group_option_names_the_closest_option(tmp_path):
    line = _one_error_line(_robotrl(["train", "agent=sacc"], tmp_path))
    assert "no agent config 'sacc'" in line and "did you mean sac" in line


def test_a_word_for_a_number_is_refused_with_the_default(tmp_path):
    line = _one_error_line(_robotrl(["train", "agent=bc", "agent.model.lr=fast"], tmp_path))
    assert "agent.model.lr=fast is not a number" in line


def test_device_gpu_is_not_a_device(tmp_path):
    line = _one_error_line(_robotrl(["train", "device=gpu"], tmp_path))
    assert "device=gpu is not a device" in line and "device=cuda" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible here: device=cuda is valid")
def test_device_cuda_without_a_gpu(tmp_path):
    line = _one_error_line(_robotrl(["train", "device=cuda"], tmp_path))
    assert "no CUDA GPU is visible" in line and "device=auto" in line


def test_eval_without_a_checkpoint(tmp_path):
    line = _one_error_line(_robotrl(["eval"], tmp_path))
    assert "robotrl eval checkpoint=" in line


def test_online_experiment_before_its_pretraining_names_the_command(tmp_path):
    line = _one_error_line(_robotrl(["train", "experiment=wsrl", "seed=3"], tmp_path))
    assert "runs/pretrain/calql/" in line and "`robotrl train experiment=calql seed=3`" in line


def test_official_minari_dataset_is_downloaded_or_the_line_says_why_not_and_the_command(tmp_path):
    """env=ant (an official Minari id) is fetched with minari.download_dataset; here the network does not allow it."""
    line = _one_error_line(_robotrl(["train", "env=ant"], tmp_path, MINARI_DATASETS_PATH=str(tmp_path / "minari"),
                                    HF_HUB_OFFLINE="1"))
    assert "minari download mujoco/ant/" in line
    assert "the download failed" in line or 'pip install "robotrl[download]"' in line


def test_official_minari_dataset_without_huggingface_hub_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['huggingface_hub'] = None; from robotrl.cli import main; "
            "main(['train', 'env=ant'])")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                         env=_env(MINARI_DATASETS_PATH=str(tmp_path / "minari")))
    line = _one_error_line(res)
    assert "its download needs huggingface_hub" in line and 'robotrl[download]' in line and "minari download mujoco/ant/" in line


def test_official_minari_dataset_download_failure_names_the_reason(tmp_path):
    """huggingface_hub present, the Hub out of reach (HF_HUB_OFFLINE, as on a machine without network)."""
    pytest.importorskip("huggingface_hub")
    line = _one_error_line(_robotrl(["train", "env=ant"], tmp_path, MINARI_DATASETS_PATH=str(tmp_path / "minari"),
                                    HF_HUB_OFFLINE="1"))
    assert "the download failed (" in line and "minari download mujoco/ant/" in line


def test_unknown_command_names_the_closest(tmp_path):
    res = _robotrl(["trian"], tmp_path)
    assert res.returncode == 2 and "did you mean train?" in res.stderr and "Traceback" not in res.stderr


# ----------------------------------------------------------------------------- defect (a): recipe_args and provenance
@pytest.mark.slow
def test_a_dataset_made_with_other_recipe_args_is_not_reused_silently(tmp_path):
    from robotrl.collect import ensure_dataset
    from robotrl.data import load_dataset
    from robotrl.errors import ConfigError

    root, ds_id = tmp_path / "minari", "robotrl/pointmaze/umaze-slow-v1"
    small = dict(num_steps=300, ref_episodes=1, progress=False, root=str(root), dataset_id=ds_id)
    assert ensure_dataset("pointmaze-umaze-slow", **small) == ds_id
    assert ensure_dataset("pointmaze-umaze-slow", **small) == ds_id  # the same arguments: reused
    with pytest.raises(ConfigError) as e:  # what a later run with other recipe_args asks for
        ensure_dataset("pointmaze-umaze-slow", **{**small, "num_steps": 200_000})
    msg = str(e.value)
    assert "num_steps=300 recorded, num_steps=200000 asked" in msg and "dataset.id=robotrl/pointmaze/umaze-slow-<variant>-v1" in msg
    assert "\n" not in msg
    prov = json.loads(load_dataset(str(root / ds_id)).metadata["robotrl_provenance"]) \
        if hasattr(load_dataset(str(root / ds_id)), "metadata") else None
    if prov is not None:
        assert prov["recipe_args"]["num_steps"] == 300


# ----------------------------------------------------------------------------- defect (b): headless cameras
@pytest.mark.slow
@needs_osmesa
def test_headless_camera_recording_needs_no_environment_variable(tmp_path):
    res = _robotrl(["collect", "recipe=pointmaze-umaze", "num_steps=20", "cameras=[topdown]", "image_size=16",
                    f"root={tmp_path}", "dataset_id=t/cam-v0", "+ref_episodes=1"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "FatalError" not in res.stderr and "Traceback" not in res.stderr
    meta = json.loads((tmp_path / "t/cam-v0/data/metadata.json").read_text())
    assert "pixels" in json.dumps(meta["observation_space"])


# ----------------------------------------------------------------------------- logs that stay
@pytest.mark.slow
def test_cli_log_keeps_the_console_with_timestamps_and_no_bar_states(tmp_path):
    run_dir = tmp_path / "run"
    res = _robotrl(["train", "agent=bc", "dataset=pointmaze-umaze-planner", "dataset.id=robotrl/pointmaze/umaze-fh-v1",
                    "dataset.recipe_args.num_steps=2000", "+dataset.recipe_args.ref_episodes=2", "trainer.offline_steps=200",
                    "trainer.eval_every=100", "trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.log_every=10",
                    "trainer.checkpoint_every=200", "torch_threads=1", f"run_dir={run_dir}"], tmp_path, timeout=400,
                   MINARI_DATASETS_PATH=str(tmp_path / "minari"))
    assert res.returncode == 0, res.stderr[-3000:]
    log = (run_dir / "cli.log").read_text()
    assert log and "\r" not in log
    assert "\r" not in res.stdout + res.stderr  # the dataset's collection too: lines, not a bar, off a terminal
    assert re.search(r"\[collect robotrl/pointmaze/umaze-fh-v1\] 2000/2000 \(100%\) .* ETA 0:00:00", log)
    lines = log.splitlines()
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", ln) for ln in lines if ln and not ln.startswith((" ", "}", "{", '"')))
    progress = [ln for ln in lines if " 200/200 (100%) step 200 · " in ln]
    assert progress and "ETA" in progress[0]
    # every console line of the run is in the log (the build path's notices too: robotrl.progress.emit)
    for shown in res.stdout.splitlines():
        if shown.strip():
            assert shown in log, shown
    assert "report.json" in log and "cli.log" in log


def test_collector_progress_off_a_terminal_is_lines_with_an_eta(capsys):
    from robotrl.progress import LineBar, progress_bar

    bar = progress_bar(100, "collect x", tty=False)
    assert isinstance(bar, LineBar)
    for i in range(100):
        bar.update(1)
        if i == 50:
            bar.set_postfix(ret="3")
    bar.close()
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 20 and "\r" not in out  # every 5 %, the last one once
    assert lines[0].startswith("[collect x] 5/100 (5%) · ") and " step/s · " in lines[0] and " · ETA " in lines[0]
    assert lines[-1].startswith("[collect x] 100/100 (100%)") and "ETA 0:00:00" in lines[-1] and lines[-1].endswith("ret 3")
    quiet = progress_bar(100, "collect y", enabled=False, tty=False)
    quiet.update(100)
    quiet.close()
    assert capsys.readouterr().out == ""


def test_config_and_hparams_go_into_the_runs_one_event_file(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from robotrl.utils import log_run_config

    writer = SummaryWriter(str(tmp_path / "tb"))
    writer.add_scalar("train/loss", 1.0, 1)
    log_run_config(writer, {"seed": 0, "trainer": {"offline_steps": 200, "init_from": None}, "agent": {"hidden": [64, 64]}},
                   {"summary/final_return": 12.5}, step=200)
    writer.close()
    files = [p for p in (tmp_path / "tb").rglob("events.out.tfevents.*")]
    assert len(files) == 1 and files[0].parent == tmp_path / "tb"
    acc = EventAccumulator(str(files[0]), size_guidance={"tensors": 0})
    acc.Reload()
    assert "config/text_summary" in acc.Tags()["tensors"] and "summary/final_return" in acc.Tags()["scalars"]
    hp = acc.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"} <= set(hp)
    start = hp["_hparams_/session_start_info"]
    assert b"trainer.offline_steps" in start and b"agent.hidden" in start


# ----------------------------------------------------------------------------- deployable policies without Hydra
def test_save_pretrained_round_trips_a_policy_without_hydra(tmp_path):
    import numpy as np
    import torch

    from robotrl.agents.bc import BCAgent
    from robotrl.data import ActionScaler, ObservationNormalizer
    from robotrl.errors import CheckpointError
    from robotrl.policy import act, from_pretrained, save_pretrained

    norm = ObservationNormalizer(torch.tensor([0.5, -1.0, 2.0]), torch.tensor([2.0, 0.5, 1.0]))
    agent = BCAgent(3, 2, obs_normalizer=norm, action_scaler=ActionScaler(torch.tensor([-2.0, -1.0]), torch.tensor([2.0, 1.0])),
                    device="cpu", seed=0)
    policy = agent.policy.eval()
    out = save_pretrained(policy, tmp_path / "policy")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((out / "config.json").read_text())["target"].startswith("robotrl.agents.bc.")
    loaded = from_pretrained(out)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    assert np.array_equal(act(loaded, obs), act(policy, obs))  # normalisers travel with the weights
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "target": "os.system"}))
    with pytest.raises(CheckpointError, match="only classes under robotrl.agents."):
        from_pretrained(out)
    (out / "config.json").write_text(json.dumps({**cfg, "kwargs": {**cfg["kwargs"], "obs_dim": 4}}))
    with pytest.raises(CheckpointError, match="do not fit"):
        from_pretrained(out)


# ----------------------------------------------------------------------------- the core without the optional libraries
@pytest.mark.parametrize("blocked, args, extra", [
    ("zmq", ["robot-server", "robot=sim", "key_file=k.key", "key_create=true"], "robot"),
    ("msgpack", ["deploy", "checkpoint=x", "robot=sim", "key_file=k.key"], "robot"),
    ("onnx", ["export", "run", "bundle"], "export"),
])
def test_a_feature_without_its_extra_names_the_extra(tmp_path, blocked, args, extra):
    # sys.modules[name] = None is Python's own way to make a module unimportable in this process
    code = f"import sys; sys.modules[{blocked!r}] = None; from robotrl.cli import main; main({args!r})"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    line = _one_error_line(res)
    assert f'robotrl[{extra}]' in line and blocked in line


@pytest.mark.slow
@needs_osmesa
def test_headless_camera_frames_from_python_after_mujoco_was_imported(tmp_path):
    """The library path of defect (b): mujoco imported (GLFW chosen) before any camera env, no display, nothing set."""
    code = ("import mujoco, gymnasium as gym, gymnasium_robotics, numpy as np\n"
            "from robotrl.envs import make_env\n"
            "env = make_env('PointMaze_UMaze-v3', pixels=('topdown',), size=16)\n"
            "obs, _ = env.reset(seed=0)\n"
            "px = obs['pixels']['topdown']\n"
            "print(px.shape, px.dtype, int(px.max()) > 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "(16, 16, 3) uint8 True"
