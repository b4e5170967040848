"""Advice that fits the operator and the values: first checks keyed by the failing operator's
kind of index, and value patterns stated in words."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cudadiag import classify, incidents
from cudadiag.advice import fitting_checks
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.trace import OpTracer, PrecheckError
from scenarios import run

EMBEDDING_CHECK = "Token ids must lie in [0, num_embeddings)"
TARGET_CHECK = "Class targets must lie in [0, C)"
INDEX_CHECK = "Each index must be smaller than the size of the dimension"


def _prechecked(fail) -> list[str]:
    """The checks an isolated run gives: the op under the tracer with prechecks, as the
    worker runs it."""
    with OpTracer() as tracer, pytest.raises(PrecheckError) as info:
        fail()
    exc = info.value
    incident = Incident(error=ErrorInfo.from_exception(exc), diagnosis=classify(exc),
                        run=RunInfo(mode="isolated"), op=tracer.failed)
    return fitting_checks(incident, exc.violation)


def _loss(targets: list[int], classes: int, **kwargs):
    return lambda: F.cross_entropy(torch.randn(len(targets), classes),
                                   torch.tensor(targets), **kwargs)


def test_targets_exactly_one_to_c_may_be_one_based_and_the_dataset_decides():
    checks = _prechecked(_loss([1, 5, 10, 3, 10, 2], 10))
    assert checks[0].startswith("labels may be 1-based: the targets run 1..10 here, no 0, for "
                                "10 classes — if the whole label set is 1..10, shift it by −1")
    assert "Check min and max over the dataset, not one batch" in checks[0]
    assert not any(c.startswith("one class more") for c in checks)
    assert checks[1].startswith(TARGET_CHECK)


def test_a_target_equal_to_c_is_one_class_more_than_the_output_layer():
    checks = _prechecked(_loss([0, 2, 4], 4))
    assert checks[0].startswith("one class more than the output layer: target 4 needs 5 "
                                "outputs, the layer has 4")


def test_padding_minus_one_is_not_ignored_by_the_default_ignore_index():
    checks = _prechecked(_loss([0, 1, -1, -1], 3))
    assert checks[0].startswith("padding −1 is not ignored: the loss skips only −100")


def test_padding_minus_one_is_fine_when_it_is_the_ignore_index():
    F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, -1, -1]), ignore_index=-1)
    checks = _prechecked(_loss([0, 1, -1, 7], 3, ignore_index=-1))
    assert not any("padding −1" in c for c in checks)


def test_a_token_id_equal_to_the_vocabulary_size():
    emb = torch.nn.Embedding(50, 8)
    checks = _prechecked(lambda: emb(torch.tensor([[1, 50, 3]])))
    assert checks[0].startswith("a token id equals the vocabulary size (50)")
    assert checks[1].startswith(EMBEDDING_CHECK)
    assert any("resize_token_embeddings" in c for c in checks)
    assert any("padding_idx" in c for c in checks)


def test_token_ids_far_beyond_the_vocabulary_point_at_another_tokenizer():
    emb = torch.nn.Embedding(1000, 8)
    checks = _prechecked(lambda: emb(torch.tensor([5, 30000, 12])))
    assert checks[0].startswith("token ids reach 30000 for an embedding of 1000: the "
                                "tokenizer and the model do not share a vocabulary")


def test_gather_index_equal_to_the_dimension_size_and_negative_indices():
    source = torch.randn(3, 4)
    off_by_one = _prechecked(lambda: source.gather(1, torch.tensor([[0, 4], [1, 2], [3, 0]])))
    assert off_by_one[0].startswith("an index equals the dimension size (4): off by one — "
                                    "valid indices run 0..3")
    negative = _prechecked(lambda: source.gather(1, torch.tensor([[0, -1], [1, 2], [3, 0]])))
    assert negative[0].startswith("negative indices [-1]: this operator does not wrap them")
    assert any(c.startswith(INDEX_CHECK) for c in negative)


def test_the_embedding_case_and_the_loss_target_case_get_different_advice():
    emb = torch.nn.Embedding(4, 8)
    embedding = _prechecked(lambda: emb(torch.tensor([0, 2, 4])))
    target = _prechecked(_loss([0, 2, 4], 4))
    assert embedding[1].startswith(EMBEDDING_CHECK) and TARGET_CHECK not in " ".join(embedding)
    assert target[1].startswith(TARGET_CHECK) and EMBEDDING_CHECK not in " ".join(target)


@pytest.mark.parametrize(("cell", "expected", "absent"), [
    ("emb = torch.nn.Embedding(50, 8)\nout = emb(torch.tensor([[1, 50, 3]]))\nout.sum().item()",
     EMBEDDING_CHECK, TARGET_CHECK),
    ("loss = F.cross_entropy(torch.randn(3, 4), torch.tensor([1, 2, 4]))\nloss.item()",
     TARGET_CHECK, EMBEDDING_CHECK),
], ids=["embedding", "loss_target"])
def test_in_the_kernel_the_device_assertion_names_the_kind_of_index(shell, capsys, cell,
                                                                      expected, absent):
    # pytest re-points fds 1/2 between setup and call: load again to read the device's lines
    shell.extension_manager.reload_extension("cudadiag")
    run(shell, "import torch, torch.nn.functional as F\n"
               "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
    run(shell, cell)
    (incident,) = incidents()
    assert incident.diagnosis.first_checks[0].startswith(expected)
    assert absent not in " ".join(incident.diagnosis.first_checks)
    assert f"check first: {expected}" in capsys.readouterr().err


def test_the_kernel_incident_never_uses_values_a_real_device_does_not_tell(shell):
    """The simulator knows the offending values; a real device prints only its kernel."""
    shell.extension_manager.reload_extension("cudadiag")
    run(shell, "import torch, torch.nn.functional as F\n"
               "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
    run(shell, "F.cross_entropy(torch.randn(4, 4), torch.tensor([1, 2, 3, 4])).item()")
    (incident,) = incidents()
    assert incident.diagnosis.first_checks[0].startswith(TARGET_CHECK)
    assert not any("1-based" in c or "one class more" in c
                   for c in incident.diagnosis.first_checks)


@pytest.mark.parametrize(("cell", "expected"), [
    ("torch.nn.Embedding(5, 3)(torch.tensor([1, 5]))", EMBEDDING_CHECK),
    ("F.nll_loss(torch.randn(2, 3), torch.tensor([0, 3]))", TARGET_CHECK),
], ids=["embedding", "nll_loss"])
def test_cpu_errors_are_keyed_by_the_function_that_raised(shell, cell, expected):
    run(shell, "import torch, torch.nn.functional as F")
    run(shell, cell)
    (incident,) = incidents()
    assert incident.diagnosis.family == "index_out_of_bounds"
    assert incident.diagnosis.first_checks[0].startswith(expected)
