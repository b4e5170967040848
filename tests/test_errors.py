"""One base for every error cudadiag raises to its users, the built-in bases kept."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch
import torch.nn.functional as F

import cudadiag
from cudadiag import GuardError, check_class_targets
from cudadiag.errors import (
    CudadiagError,
    ExplainError,
    ExportError,
    IncidentNotFound,
    IncidentSchemaError,
    PlanError,
)
from cudadiag.explain import explain_path
from cudadiag.incident import Incident
from cudadiag.isolate.plan import make_plan
from cudadiag.log.store import IncidentStore
from cudadiag.repro.staging import check_target
from cudadiag.trace import OpTracer, PrecheckError

SIMULATED_DEVICE_ERRORS = {"SimulatedAcceleratorError", "SimulatedOutOfMemoryError"}
"""The simulator's errors imitate PyTorch's own: they are the diagnosed program's errors."""


def _public_exception_classes() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(cudadiag.__path__, "cudadiag."):
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as missing:  # an integration whose extra is not installed
            if not info.name.startswith("cudadiag.integrations."):
                raise
            assert missing.name in ("transformers", "lightning", "accelerate"), missing
            continue
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__ == info.name and not value.__name__.startswith("_")
                    and value.__name__ not in SIMULATED_DEVICE_ERRORS):
                found.append(value)
    return found


def test_every_exception_class_cudadiag_defines_is_a_cudadiag_error():
    classes = _public_exception_classes()
    assert len(classes) >= 10
    assert [c.__qualname__ for c in classes if not issubclass(c, CudadiagError)] == []


def test_the_base_is_public():
    assert cudadiag.CudadiagError is CudadiagError
    assert cudadiag.GuardError is GuardError


def test_refusals_through_the_public_calls_are_cudadiag_errors_with_their_old_bases(tmp_path):
    raised = []
    for call, builtin in [
        (lambda: IncidentStore(tmp_path).get("nope"), LookupError),
        (lambda: Incident.from_dict({"hello": 1}), ValueError),
        (lambda: make_plan({1: "x = 1"}, 7), ValueError),
        (lambda: explain_path(tmp_path / "missing.log"), ValueError),
        (lambda: check_target(tmp_path / "repro.txt", (".ipynb",)), RuntimeError),
        (lambda: check_class_targets(torch.tensor([0, 4]), 4), ValueError),
    ]:
        with pytest.raises(CudadiagError) as info:
            call()
        assert isinstance(info.value, builtin)
        raised.append(type(info.value))
    assert raised == [IncidentNotFound, IncidentSchemaError, PlanError, ExplainError,
                      ExportError, GuardError]


def test_a_precheck_stays_an_index_error_for_the_diagnosed_program():
    with pytest.raises(IndexError) as info, OpTracer():
        F.cross_entropy(torch.zeros(2, 4), torch.tensor([0, 4]))
    assert isinstance(info.value, PrecheckError) and isinstance(info.value, CudadiagError)
    assert type(info.value).__module__ == "cudadiag.trace"  # the name incidents record
