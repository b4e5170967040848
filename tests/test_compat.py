"""cudadiag env --check: device, driver, ROCm targets, companions and extensions vs the build."""

from __future__ import annotations

import json

import pytest
import torch

from cudadiag import cli
from cudadiag.compat import Device, Facts, Package, failed, gather_facts, run_checks
from scenarios import run

CU124_ARCHS = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
CPU_BUILD = not (torch.version.cuda or getattr(torch.version, "hip", None))


def _facts(**changes) -> Facts:
    base = {"torch": "2.5.1+cu124", "cuda": "12.4", "arch_list": CU124_ARCHS,
            "devices": (Device("NVIDIA A10", "8.6"),), "driver": "550.54.15",
            "system": "Linux", "packages": (Package("torch", "2.5.1+cu124"),)}
    return Facts(**{**base, **changes})


def _check(checks, prefix):
    (found,) = [c for c in checks if c.name.startswith(prefix)]
    return found


@pytest.mark.skipif(not CPU_BUILD, reason="this PyTorch build has CUDA or ROCm support")
def test_the_cpu_build_asked_about_a_capability_fails_and_says_it_has_no_cuda(capsys):
    assert cli.main(["env", "--check", "--capability", "8.6"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  capability 8.6: this PyTorch build (torch {torch.__version__}) has no CUDA " \
           "support: it cannot run on a GPU of capability 8.6" in out
    assert "fix: pip install 'torch>=2.12' --index-url https://download.pytorch.org/whl/cu130" \
           in out


@pytest.mark.skipif(not CPU_BUILD, reason="this PyTorch build has CUDA or ROCm support")
def test_the_cpu_build_without_a_gpu_passes_with_nothing_to_check(capsys):
    assert cli.main(["env", "--check", "--json"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["capability"]["status"] == "skip"
    assert "build without CUDA" in checks["capability"]["reason"]
    assert checks["driver"]["status"] == "skip"


@pytest.mark.skipif(CPU_BUILD or bool(getattr(torch.version, "hip", None)),
                    reason="needs a CUDA build of PyTorch (no device needed)")
def test_the_cuda_build_is_checked_against_its_own_arch_list(capsys):
    facts = gather_facts()
    newest = max(a for a in facts.arch_list if a.startswith("sm_"))
    carried = f"{newest[3:-1]}.{newest[-1]}"
    assert cli.main(["env", "--check", "--capability", carried]) == 0
    assert f"PASS  capability {carried} (the capability asked): the build carries {newest}" \
           in capsys.readouterr().out
    assert cli.main(["env", "--check", "--capability", "3.0"]) == 1
    assert "the build carries no code that runs on it" in capsys.readouterr().out


def test_a_bad_capability_is_a_usage_error(capsys):
    assert cli.main(["env", "--check", "--capability", "eighty-six"]) == 2
    assert "cudadiag env: --capability takes X.Y (e.g. 8.6)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["env", "--capability", "8.6"])
    assert exited.value.code == 2


def test_a_newer_gpu_than_the_build_fails_and_names_the_wheel_that_carries_it():
    checks = run_checks(_facts(), capability="12.0")
    capability = _check(checks, "capability 12.0")
    assert capability.status == "fail" and failed(checks)
    assert "'no kernel image is available for execution on the device'" in capability.reason
    assert capability.fix.startswith("pip install 'torch>=2.12' --index-url "
                                     "https://download.pytorch.org/whl/cu130")


def test_machine_code_of_the_same_major_runs_on_a_higher_minor():
    check = _check(run_checks(_facts(devices=(Device("NVIDIA L4", "8.9"),))), "capability")
    assert check.status == "pass"
    assert check.reason.startswith("the build carries sm_86 code for it")


def test_ptx_runs_forward_through_the_driver_and_arch_specific_code_does_not():
    ptx = run_checks(_facts(arch_list=("sm_80", "sm_90", "compute_90")), capability="sm_120")
    assert _check(ptx, "capability").status == "warn"
    assert "only compute_90 PTX" in _check(ptx, "capability").reason
    specific = run_checks(_facts(arch_list=("sm_90a", "compute_90a")), capability="10.0")
    assert _check(specific, "capability").status == "fail"
    exact = run_checks(_facts(arch_list=("sm_90a",)), capability="9.0")
    assert _check(exact, "capability").status == "pass"


def test_every_gpu_found_is_checked():
    devices = (Device("NVIDIA A100", "8.0"), Device("NVIDIA GeForce RTX 5090", "12.0"))
    checks = run_checks(_facts(devices=devices))
    assert [(c.name, c.status) for c in checks if c.name.startswith("capability")] == [
        ("capability 8.0 (NVIDIA A100)", "pass"),
        ("capability 12.0 (NVIDIA GeForce RTX 5090)", "fail")]


@pytest.mark.parametrize(("driver", "status", "words"), [
    ("560.35.03", "pass", "runs CUDA 12.6 (needs >= 560.28.03)"),
    ("535.104.05", "warn", "through minor version compatibility (>= 525.60.13)"),
    ("470.82.01", "fail", "too old for this PyTorch build (CUDA 12.6 needs a driver >= "
                          "525.60.13)"),
])
def test_the_driver_is_held_against_the_cuda_the_build_was_made_for(driver, status, words):
    check = _check(run_checks(_facts(cuda="12.6", driver=driver)), "driver")
    assert check.status == status and words in check.reason


def test_a_driver_too_old_for_cuda_13_points_to_a_build_it_runs():
    check = _check(run_checks(_facts(torch="2.14.1+cu130", cuda="13.0",
                                     driver="575.57.08")), "driver")
    assert check.status == "fail" and "needs a driver >= 580" in check.reason
    assert "pip install 'torch>=2.12' --index-url https://download.pytorch.org/whl/cu126" \
           in check.fix


def test_windows_drivers_are_read_in_their_own_column():
    check = _check(run_checks(_facts(cuda="12.6", driver="561.09", system="Windows")),
                   "driver")
    assert check.status == "pass" and "needs >= 560.76" in check.reason


def test_no_driver_is_a_skip_not_a_failure():
    checks = run_checks(_facts(driver=None, driver_note="no NVIDIA driver found"))
    assert _check(checks, "driver").status == "skip" and not failed(checks)


@pytest.mark.parametrize(("device", "status"), [
    ("gfx90a", "pass"), ("gfx90a:sramecc+:xnack-", "pass"), ("gfx1100", "fail"), ("8.6",
                                                                                 "fail"),
])
def test_rocm_needs_the_very_gfx_target_in_its_arch_list(device, status):
    facts = _facts(torch="2.5.1+rocm6.2", cuda=None, hip="6.2.41133",
                   arch_list=("gfx900", "gfx906", "gfx90a", "gfx942"),
                   devices=(Device("AMD Instinct MI210", device),), driver=None)
    checks = run_checks(facts)
    assert _check(checks, "gfx target").status == status
    assert _check(checks, "driver").status == "skip"


def test_a_companion_pinned_to_another_torch_fails():
    vision = Package("torchvision", "0.20.1", ("torch==2.5.1",), compiled=True)
    check = _check(run_checks(_facts(torch="2.4.0+cu124", packages=(vision,))), "torchvision")
    assert check.status == "fail"
    assert check.reason == "built for torch ==2.5.1, this is torch 2.4.0+cu124"
    assert check.fix == "pip install 'torchvision==0.19.*' from the index torch came from"


@pytest.mark.parametrize(("installed", "status"), [("0.20.0", "pass"), ("0.19.1", "fail")])
def test_an_unpinned_companion_is_held_against_the_release_table(installed, status):
    vision = Package("torchvision", installed, compiled=True)
    check = _check(run_checks(_facts(packages=(vision,))), "torchvision")
    assert check.status == status


def test_a_companion_built_for_another_cuda_major_fails():
    vision = Package("torchvision", "0.20.1+cu118", ("torch==2.5.1",), compiled=True)
    check = _check(run_checks(_facts(torch="2.5.1+cu124", packages=(vision,))), "torchvision")
    assert check.status == "fail"
    assert "built for CUDA 11.8, torch 2.5.1+cu124 for CUDA 12.4" in check.reason


def test_a_stable_abi_torchaudio_runs_with_later_torch():
    audio = Package("torchaudio", "2.11.0", compiled=True)
    assert _check(run_checks(_facts(torch="2.13.0+cu130", cuda="13.0", driver="580.65.06",
                                    packages=(audio,))), "torchaudio").status == "pass"


def test_triton_follows_the_pin_in_torchs_own_metadata_else_the_table():
    torch_package = Package("torch", "2.5.1", ("triton==3.1.0; platform_system == 'Linux'",))
    pinned = run_checks(_facts(packages=(torch_package, Package("triton", "3.0.0"))))
    check = _check(pinned, "triton")
    assert check.status == "fail" and check.fix == "pip install 'triton==3.1.0'"
    unpinned = run_checks(_facts(packages=(Package("torch", "2.5.1"), Package("triton",
                                                                              "3.1.0"))))
    assert _check(unpinned, "triton").status == "pass"
    assert "torch 2.5 was released with triton 3.1.0" in _check(unpinned, "triton").reason


@pytest.mark.parametrize(("package", "status", "words"), [
    (Package("xformers", "0.0.25", ("torch==2.2.1",), compiled=True), "fail",
     "built for torch ==2.2.1 (its metadata)"),
    (Package("torch_scatter", "2.1.2+pt24cu124", (), compiled=True), "fail",
     "built for torch 2.4 (its version tag)"),
    (Package("flash_attn", "2.5.8+cu122torch2.5cxx11abiFALSE", ("torch",), compiled=True),
     "pass", "built for torch 2.5 (its version tag)"),
    (Package("somext", "1.0", ("torch>=1.8",), compiled=True), "skip",
     "it records no PyTorch it was built for"),
])
def test_compiled_extensions_are_held_against_the_running_torch(package, status, words):
    check = _check(run_checks(_facts(torch="2.5.1+cu124", packages=(package,))),
                   package.name)
    assert check.status == status and words in check.reason


def _fake_extension(root, pin: str) -> None:
    """An installed distribution with a compiled module, pinned to another torch."""
    info = root / "fakeext-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: fakeext\nVersion: 0.1\nRequires-Dist: torch{pin}\n")
    (info / "RECORD").write_text("fakeext/_C.so,,\nfakeext-0.1.dist-info/METADATA,,\n")


def test_the_installed_packages_are_read_from_their_metadata(tmp_path, monkeypatch):
    _fake_extension(tmp_path, "==1.0.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    checks = run_checks(gather_facts())
    check = _check(checks, "fakeext 0.1")
    assert check.status == "fail" and check.reason == "built for torch ==1.0.0 (its metadata)"


def test_an_op_unavailable_incident_runs_the_checks_and_shows_them(shell, tmp_path,
                                                                   monkeypatch, capsys):
    _fake_extension(tmp_path, "==1.0.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    run(shell, 'raise RuntimeError("CUDA error: no kernel image is available for execution '
               'on the device")')
    capsys.readouterr()
    run(shell, "%cudadiag show")
    shown = capsys.readouterr().out
    run(shell, "%cudadiag report")
    report = capsys.readouterr().out

    assert "op_unavailable" in shown and "Compatibility (cudadiag env --check)" in shown
    assert "FAIL  fakeext 0.1: built for torch ==1.0.0 (its metadata)" in shown
    check_first = shown.split("Check first", 1)[1]
    assert check_first.lstrip().startswith("- fakeext 0.1: built for torch ==1.0.0")
    assert "compatibility check fail: fakeext 0.1: built for torch ==1.0.0" in report


def test_other_families_do_not_run_the_checks(shell, capsys):
    run(shell, 'raise RuntimeError("CUDA error: an illegal memory access was encountered")')
    run(shell, "%cudadiag show")
    assert "Compatibility (cudadiag env --check)" not in capsys.readouterr().out
