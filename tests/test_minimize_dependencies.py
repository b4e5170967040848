"""What the minimizer may remove, decided before any trial: no attribute read whose
definition went (an option without its add_argument, a config field without the line that
set it), no setting that changes how the program runs while what it configures stays; and
the environment variables a program's code reads, found by name."""

from __future__ import annotations

import textwrap

import pytest

from cudadiag.repro.dependencies import Admissible, statements

TRAIN = textwrap.dedent("""\
    import argparse
    import os
    import torch
    from mingpt.trainer import Trainer
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="rows.csv")
    parser.add_argument("-s", "--save-path", default="model.pt")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    train_config = Trainer.get_default_config()
    train_config.num_workers = 0
    train_config.learning_rate = 5e-4
    train_config.device = "cuda"
    trainer = Trainer(train_config, torch.load(args.data))
    for epoch in range(3):
        trainer.run()
        with open(args.save_path, "wb") as f:
            torch.save(trainer.model, f)
""")


def _without(*removed: str) -> str | None:
    """Why the program without the statements that start with `removed` may not be tried."""
    units = statements({1: TRAIN})
    candidate = [u for u in units if not u.source.startswith(removed)]
    assert all(any(u.source.startswith(r) for u in units) for r in removed), removed
    return Admissible(units).why_not(candidate)


def test_an_option_read_by_kept_code_keeps_its_add_argument():
    assert _without('parser.add_argument("-s"') == \
        "reads args.save_path after removing what sets it"
    assert _without('parser.add_argument("--lr"') is None  # nothing reads args.lr


def test_a_run_setting_of_an_object_still_used_stays():
    why = _without("train_config.num_workers")
    assert why == ("removes `train_config.num_workers = 0`, a setting of train_config, which "
                   "the program still uses")
    assert _without("train_config.device") is not None
    assert _without("train_config.learning_rate") is None  # not a run setting
    # with the trainer gone (and what it used), its settings may go too
    assert _without("train_config", "trainer", "for epoch") is None


@pytest.mark.parametrize("statement", [
    "torch.backends.cudnn.deterministic", "torch.use_deterministic_algorithms",
    'os.environ["CUBLAS_WORKSPACE_CONFIG"]'])
def test_a_process_wide_setting_stays(statement):
    assert _without(statement).startswith(f"removes `{statement}")


def test_a_seed_is_left_to_the_reseeded_trials():
    assert _without("torch.manual_seed") is None


def test_an_attribute_read_needs_the_statement_that_set_it():
    units = statements({
        1: "import types\ncfg = types.SimpleNamespace()",
        2: "cfg.n_layer = 2\ncfg.n_embd = 32",
        3: "def width():\n    return cfg.n_embd",
        4: "print(cfg.n_layer, width())",
    })
    admissible = Admissible(units)
    without = [u for u in units if u.source != "cfg.n_embd = 32"]
    assert admissible.why_not(without) == "reads cfg.n_embd after removing what sets it"
    assert admissible.why_not([u for u in units if u.cell != 4 and u.cell != 3
                               and u.source != "cfg.n_embd = 32"]) is None


def test_the_variables_code_reads_are_found_by_name():
    from cudadiag.isolate.envreads import environ_reads

    source = textwrap.dedent("""\
        import os
        from os import environ, getenv
        small = os.environ.get("GPT_SMALL")
        fault = os.getenv("FAULT", "")
        root = os.environ["DATA_ROOT"]
        token = environ.get("HF_TOKEN")
        if "WANDB_MODE" in os.environ:
            pass
        seed = int(getenv("SEED", "0"))
        os.environ["WRITTEN_ONLY"] = "1"
        del os.environ["REMOVED"]
        name = "COMPUTED"
        os.environ.get(name)
    """)
    assert environ_reads(source) == ["GPT_SMALL", "FAULT", "DATA_ROOT", "HF_TOKEN",
                                     "WANDB_MODE", "SEED"]
    assert environ_reads("%env X=1\nimport os; os.environ.setdefault('Y', '2')") == ["Y"]
    assert environ_reads("def broken(:") == []


@pytest.mark.slow
def test_a_run_records_the_variables_its_code_read_as_it_started_but_not_the_machine_s(
        monkeypatch):
    from cudadiag.isolate.runner import run_isolated

    monkeypatch.setenv("GPT_SMALL", "1")
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.delenv("EVAL_ONLY", raising=False)
    result = run_isolated(
        "import os\n"
        "small = os.environ.get('GPT_SMALL')\n"
        "os.environ['GPT_SMALL'] = 'changed later'\n"
        "cache = os.path.join(os.environ['HOME'], '.cache')\n"
        "wandb_key = os.getenv('WANDB_API_KEY')\n"
        "eval_only = os.getenv('EVAL_ONLY') == '1'\n"
        "synchronous = os.environ.get('CUDA_LAUNCH_BLOCKING')  # set by cudadiag for the run\n"
        "raise RuntimeError('CUDA error: device-side assert triggered')",
        store=False, stream=False)
    assert result.incident.run.environ == {
        "GPT_SMALL": "1", "WANDB_API_KEY": "[REDACTED:WANDB_API_KEY]", "EVAL_ONLY": None}
